// The compute side of a simulated platform (configs/platforms/NAME.json): peak rate per dtype,
// kernel efficiency tables over shape buckets, memory bandwidth, HBM size, per-kernel launch
// cost. It turns one backend call into simulated seconds; plain C++ (no SimGrid), so it is
// unit-tested in the normal build. The network side of the platform is SimGrid's (the XML that
// scripts/simulate.sh writes from the same JSON).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/tensor.h"

namespace cpbench {

class Backend;

// Compute-bound kernel classes, each with its own efficiency table. The masked attention
// classes (a block where some pair is masked: causal diagonal, window, documents, strided
// positions) are optional: a platform without a table for one charges such blocks at the
// unmasked class's table (masked_fallback), and its context.simulated says so.
// attn_decode (optional): the decode kernel's (nq = 1) FLOP rate where its FLOPs outlast its
// bytes (MLA's absorbed decode: 128 query heads on one latent), looked up at the query heads per
// key head; without a table those FLOPs run at peak.
enum class SimClass { gemm = 0, attn_fwd = 1, attn_bwd = 2, attn_fwd_masked = 3, attn_bwd_masked = 4, attn_decode = 5 };
constexpr int kNumSimClasses = 6;
const char* sim_class_name(SimClass c);
bool sim_class_optional(SimClass c);  // the masked attention classes and attn_decode
// The unmasked class a masked one falls back to (itself for the others).
SimClass sim_class_fallback(SimClass c);

// The size an attention block's efficiency is looked up at: min(pairs / nq, pairs / nk), the
// mean keys a query sees or queries a key sees, whichever is fewer. For a full block that is
// min(nq, nk); a causal diagonal block of n tokens gives (n + 1) / 2, and a window of W inside
// a block of 32K tokens about W, not 32K (the work per query tile is the window's).
double attention_block_size(int64_t nq, int64_t nk, int64_t visible_pairs);

struct SimPlatform {
  std::string name;       // "dgx-h100"
  std::string file;       // where it was read from
  std::string device;     // the modelled device, e.g. "NVIDIA H100 SXM5 80GB"
  std::map<std::string, double> peak_tflops;  // by dtype name ("bf16", "fp16", "fp32")
  // Efficiency (fraction of peak) at a shape size, per class: points (size, eff) sorted by
  // size, interpolated linearly in log2(size) and held constant beyond the ends.
  // Size: gemm min(m, n, k); attention attention_block_size(). A class's tables are keyed by
  // head dim: key 0 is one table for any head dim (the JSON's plain array form); an object
  // {"by_head_dim": {"128": points, ...}, "source": "..."} gives one per head dim (published
  // kernel figures are by head dim: FlashAttention's at 64, 128, 256). An optional class without
  // a table has an empty map here and uses its fallback's.
  using EffPoints = std::vector<std::pair<double, double>>;
  std::map<int, EffPoints> efficiency[kNumSimClasses];
  std::string efficiency_source[kNumSimClasses];  // the table object's "source" (empty: a bare array, test platforms only)
  // GEMM efficiency by the whole shape (optional: "efficiency.gemm": {"shapes": [[m, n, k,
  // efficiency], ...], "source": "..."}, a complete grid: every combination of the listed m, n and
  // k values, as OpenXLA's per-architecture matmul tables give them). Empty: the gemm table above
  // (square sizes) is looked up at the shape's geometric mean (mnk)^(1/3) (gemm_efficiency).
  struct GemmGrid {
    std::vector<double> m, n, k;  // each axis's values, increasing
    std::vector<double> work;     // per node [i][j][l] (flattened): m n k / efficiency, proportional to its time
    std::vector<std::vector<double>> rows;  // the platform's rows [m, n, k, efficiency], for the report
  } gemm_grid;
  double memory_bw_gbs = 0;  // achievable device-memory bandwidth, GB/s (1e9 B/s)
  double hbm_gib = 0;        // device memory per GPU
  double launch_us = 0;      // fixed cost added to every kernel (launch and tail)
  // Relative factors around a simulated median step time (band_lo <= 1 <= band_hi), from the
  // platform's validation residuals (docs/SIMULATION.md "Bands"); the report's timing.step_ms.band.
  double band_lo = 1, band_hi = 1;
  std::string band_source;  // which validation section and residual the factors come from
  // Overlap interference (optional "overlap_interference": {"compute_slowdown": x, "source": ...}):
  // a kernel issued while one of the rank's point-to-point transfers is in flight takes 1 + x
  // times its cost (compute and communication share the device: SMs, memory bandwidth). 0 when
  // the platform has none. Communication slowed by compute is not modelled.
  double compute_slowdown = 0;
  std::string interference_source;
  // NCCL's collectives within one node, from a published nccl-tests curve (optional
  // "network": {"intra": {"nccl": {"collective": "all_gather", "ranks": R, "size_time_us":
  // [[bytes, us], ...], "source": "..."}}}): a ring collective of total size S over R GPUs took T,
  // so one of its R - 1 steps moves a block of S / R bytes in T / (R - 1). The simulated links
  // charge a step lat + block / bw (network.intra); what the published step takes beyond that
  // (small messages: protocol and launch cost; large: the bus bandwidth under the link rate) is
  // added to every collective within a node (nccl_extra_seconds). Empty: no curve, no extra.
  struct NcclCurve {
    std::string collective, source;
    int ranks = 0;
    std::vector<std::pair<double, double>> step;  // (block bytes, seconds per step), increasing
  } nccl_intra;
  double intra_bw_gbs = 0, intra_lat_us = 0;  // network.intra (the links SimGrid simulates)
  double inter_bw_gbs = 0, inter_lat_us = 0;  // network.inter (lat_us + fabric_lat_us)
  // A point-to-point transfer's published time by size (optional network.intra.p2p and
  // network.inter.p2p: {"size_time_us": [[bytes, us], ...], "floor_us": f, "source": "..."}):
  // nccl-tests' sendrecv (a ring shift: every rank sends to the next and receives from the previous
  // at once, as a ring hop does) of one message of `bytes`. Between rows: linear in log(bytes) and
  // log(time); beyond the last row: its bandwidth; below the first: the first row's bandwidth, but
  // never under floor_us (a small message's published time, its own source in the string).
  struct P2pCurve {
    std::vector<std::pair<double, double>> time;  // (bytes, seconds), increasing
    double floor_s = 0;
    std::string source;
  } p2p_intra, p2p_inter;
  // One NCCL operation's fixed cost (launch, proxy, synchronisation), paid once per collective
  // beside the per-message latency of its steps (optional network.intra.op_us and
  // network.inter.op_us, >= 0; 0 when absent): a published collective of one step and one of many
  // separate the two (dgx-a100.json). Within one node of a platform with an NCCL curve the curve
  // is the operation's whole time, so no fixed cost is added there (op_fixed_seconds).
  double intra_op_us = 0, inter_op_us = 0;

  // Reads and checks a platform JSON; throws std::invalid_argument naming the file and field.
  static SimPlatform load(const std::string& path);
  static SimPlatform from_json(const nlohmann::json& j, const std::string& where);

  double peak(DType t) const;  // TFLOP/s; throws if the platform has no peak for that dtype
  // The head dim of the table a kernel of head dim d is charged at: d when the class (or, for a
  // masked class without tables, its fallback) has a table for d; else the any-head-dim table
  // (0); else the nearest in log2(d), the larger on a tie. d <= 0 (no head dim): the smallest.
  int table_head_dim(SimClass c, int d) const;
  // The class's tables by head dim, or its fallback's where it has none (a masked class).
  const std::map<int, EffPoints>& tables_of(SimClass c) const;
  const EffPoints& table(SimClass c, int d) const;  // the points table_head_dim picks
  double efficiency_at(SimClass c, double size, int head_dim = 0) const;  // a missing optional table: its fallback's
  bool has_table(SimClass c) const { return !efficiency[int(c)].empty(); }
  // The efficiency of an m x n x k GEMM. With a shape grid: the grid nodes' times (m n k / eff)
  // interpolated multilinearly in m, n and k (a time affine in each of m, n, k and their products,
  // as a GEMM's is, is reproduced exactly), each coordinate held at the grid's ends beyond them
  // (so the efficiency is constant there). Without one: the square table at (m n k)^(1/3).
  double gemm_efficiency(double m, double n, double k) const;
  // Seconds of an m x n x k GEMM at dtype t. With a shape grid the published times include the
  // kernel's fixed cost, so it is flops / (peak * eff), at least launch_us; without one launch_us
  // + flops / (peak * eff). (The caller takes the roofline against the operands' bytes.)
  double gemm_seconds(int64_t m, int64_t n, int64_t k, DType t) const;
  // Seconds of one compute-bound kernel: launch + flops / (peak(dtype) * efficiency(size)).
  double compute_seconds(SimClass c, double flops, double size, DType t, int head_dim = 0) const;
  // Seconds of one attention block of nq x nk tokens with `visible_pairs` (per batch row and
  // head) visible and `flops` hardware FLOPs at head dim d: a block with some pair masked
  // (pairs < nq * nk) is the masked class (its own table where the platform has one), looked up
  // at attention_block_size, so a window or a causal diagonal is charged at the rate of the work
  // its query tiles do, not at the block's size; the table is d's (table_head_dim).
  double attention_seconds(int64_t nq, int64_t nk, int64_t visible_pairs, double flops, bool backward, DType t,
                           int head_dim) const;
  // Seconds of one memory-bound kernel moving `bytes` (reads + writes).
  double memory_seconds(double bytes) const;
  // One decode attention kernel (nq = 1): its `bytes` at memory_bw, or its `flops` at the
  // attn_decode table's rate (looked up at `heads_per_key`, the query heads sharing a key head;
  // at peak without a table), whichever takes longer.
  double decode_seconds(double flops, double bytes, double heads_per_key, DType t, int head_dim) const;
  // The published seconds of one ring step moving a block of `bytes` (interpolated linearly in
  // log(bytes) and log(seconds) between the curve's points; below the first, the first point's
  // time, a latency floor; beyond the last, at the last point's bandwidth). 0 without a curve.
  double nccl_step_seconds(double bytes) const;
  // The published seconds of one point-to-point transfer of `bytes` within one node (`one_node`)
  // or across nodes (P2pCurve); 0 when the platform has no curve for that tier.
  double p2p_seconds(double bytes, bool one_node) const;
  // A point-to-point transfer's modelled duration: p2p_seconds where the tier has a curve, else
  // its links' latency + bytes / rate (network.intra, or network.inter with fabric_lat_us); 0 for
  // a tier the platform does not describe.
  double transfer_seconds(double bytes, bool one_node) const;
  // What a collective within one node takes beyond the simulated links: for `peers` = 1, one ring
  // step of `bytes`, max(0, step(bytes) - (lat + bytes / bw)); for an all-to-all of `bytes` to
  // each of `peers` peers (nccl-tests' all-to-all of total size S runs about as long as the
  // all-gather of S), max(0, peers * step(bytes) - (lat + peers * bytes / bw)). 0 without a curve.
  double nccl_extra_seconds(double bytes, int peers) const;
  // The fixed cost of one collective whose group lies within one node (`one_node`) or spans
  // nodes: intra_op_us or inter_op_us, except 0 within one node when the platform has an NCCL
  // curve (it already holds the operation's fixed cost).
  double op_fixed_seconds(bool one_node) const;
  // context.simulated of the report: platform, peak_tflops, efficiencies (each class's table at
  // the run's head dim), efficiency_tables (which head dim's table, its source), memory_bw, band.
  nlohmann::json context(int head_dim = 0) const;
};

// Implemented by backends that simulate (kernels/sim/sim_backend.h): gives the report its
// platform without the report knowing the backend's type.
class SimulatedBackend {
 public:
  virtual ~SimulatedBackend() = default;
  virtual const SimPlatform& platform() const = 0;
};

// The report's context.simulated for `be` running a model of head dim `head_dim`, or null when
// the backend does not simulate. (For bench/report.cpp:
// `if (auto s = simulated_context(be, d); !s.is_null()) c["simulated"] = s;`)
nlohmann::json simulated_context(const Backend& be, int head_dim);

}  // namespace cpbench
