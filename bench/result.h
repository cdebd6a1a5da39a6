// One typed result per job (strategy, mesh, seq). Built on rank 0 from every rank's summary;
// the report (to_json) and the console tables read this struct, never JSON columns.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"
#include "bench/numerics.h"
#include "bench/peak.h"
#include "bench/plan.h"
#include "bench/tiers.h"

namespace cpbench {

// What one rank measured in one job (gathered to rank 0 as a fixed-length vector of doubles).
struct RankSummary {
  double step_ms = 0, busy_ms = 0, exposed_ms = 0, standalone_ms = 0;
  double bytes_fwd = 0, bytes_bwd = 0;
  double mem_peak = 0, mem_weights = 0, mem_activations = 0, mem_comm = 0;
  double model_flops = 0, hardware_flops = 0;
  double hta_overlap = 1;       // communication time covered by own compute (median over timed iterations)
  double timed_allocations = 0;  // allocator calls during the timed iterations
  double intra_fwd = 0, inter_fwd = 0, intra_bwd = 0, inter_bwd = 0;  // bytes_sent by tier
  double bytes_rec = 0, intra_rec = 0, inter_rec = 0;  // Phase::recompute (--recompute), and by tier
  // What the rank holds of the block (Block::held_share), for the whole-model memory estimate.
  double block_parameters = 0, block_input_bytes = 0, tp = 1;
  double norm_parameters = 0, mlp_parameters = 0, mlp_tp = 1;  // of block_parameters; the MLP's degree
  double core_activations = 0;  // of its activations, the attention core's own (Block::HeldShare)
  static constexpr size_t kFields = 28;
  std::vector<double> pack() const;
  static RankSummary unpack(const double* v);
};

struct CommPhaseResult {
  int64_t bytes_sent = 0;  // max over ranks
  std::vector<int64_t> per_rank;
  int64_t predicted_bytes = 0;              // max over ranks of predicted_per_rank
  std::vector<int64_t> predicted_per_rank;  // the model's bytes of every rank
  bool matches_model = false;               // per_rank == predicted_per_rank, rank by rank
  double time_ms = 0;  // rank 0's summed call time
  std::vector<OpSummary> ops;
  std::vector<int64_t> intra_per_rank, inter_per_rank;  // bytes_sent split by tier
  std::vector<TierBytes> predicted_tiers;                // the model's split, per rank
};

struct RankOverlap {
  double comm_standalone_ms = 0, exposed_comm_ms = 0, ratio = 1, hta_ratio = 1;
};

struct VerifyResult {
  bool passed = false;
  double max_rel_l2 = 0, tolerance = 0;
  std::vector<std::pair<std::string, double>> tensors;  // DESIGN's dump order
  std::string worst_tensor() const;
};

// --docs-resample: one timed iteration's pack and what it gave (max over ranks).
struct ResampledPack {
  std::vector<int64_t> lens;
  double step_ms = 0, flops_imbalance = 1;
  bool bytes_match_model = false;  // every rank's bytes = this pack's model
};

// --pass prefill (DESIGN "Inference passes"): what a serving engineer reads off a prefill job.
struct InferenceResult {
  std::string pass = "prefill";  // prefill | decode
  std::string ring_pass = "kv";  // kv | q | q-a2a (prefill)
  int64_t cached = 0, new_tokens = 0;  // --cached C and the tokens computed (prefill N - C; decode S)
  double miss_rate = 1;                // (N - C) / N (prefill)
  int64_t decode_steps = 0;            // S (decode)
  int64_t kv_cache_bytes = 0;          // per rank: its cache shard's k and v (model: 2*B*Cr*G*d*s)
  double ttft_ms = 0;                  // prefill: time to first token, the prefill step's median
  double tpot_ms = 0;                  // decode: time per output token, the step's median / S
  // The longest cache that fits (metrics.h longest_cache) under --block full with a known
  // capacity (--mem-limit, else the device's memory); capacity 0 = unknown, no figure.
  int64_t memory_capacity_bytes = 0;
  std::optional<CacheFit> fit;
};

struct TimedResult {  // present when status is ok in a run
  Stats fwd_ms, bwd_ms, step_ms;  // bwd_ms includes a --recompute's repeated forward
  CommPhaseResult comm_fwd, comm_bwd;
  std::optional<CommPhaseResult> comm_recompute;  // --recompute selective|full: the repeated forward's
  std::vector<RankOverlap> overlap;  // per rank
  double model_flops = 0, hardware_flops = 0;  // mean over ranks
  double tflops = 0;
  std::optional<double> mfu, hfu;  // null when the peak is unavailable
  Peak peak;
  std::vector<int64_t> mem_per_rank;
  int64_t mem_weights = 0, mem_activations = 0, mem_comm = 0, activation_estimate = 0;
  int64_t timed_allocations = 0;  // summed over ranks; 0 by contract
  std::optional<ModelEstimate> model_estimate;  // --block full only (metrics.h model_estimate)
  std::optional<GradSync> grad_sync;            // --block full, train: the step's gradient sync (metrics.h)
  std::vector<double> compute_ms_per_rank, model_flops_per_rank;
  // --balance other than none: the scheme and the layout's visible query-key pairs per rank
  // (TokenLayout::visible_pairs, in rank order).
  std::string balance_scheme = "none";
  std::vector<int64_t> visible_pairs_per_rank;
  // --balance dynamic: the cap in tokens per rank (--cp-cap or N/P), every document's CP group
  // size (document order) and the tokens each rank holds.
  int64_t cp_cap = 0;
  std::vector<int> cp_degrees;
  std::vector<int64_t> tokens_per_rank;
  std::vector<int> degrees;                              // the group sizes present, ascending (1 included)
  std::vector<std::vector<int64_t>> tokens_by_degree;    // per rank, its tokens of each of `degrees`
  std::vector<ResampledPack> packs;  // --docs-resample only, in iteration order (the last is described above)
  std::optional<InferenceResult> inference;  // --pass prefill and decode
  // The layer's model FLOPs for the whole job (metrics.h expected_job_flops); nullopt under decode.
  std::optional<double> expected_flops;

  double overlap_ratio() const;      // min over ranks
  // True when no rank sent a byte (fwd, bwd, recompute): the report's overlap.ratio is null then.
  bool sends_nothing() const;
  double hta_overlap_ratio() const;  // min over ranks
  double imbalance() const { return cpbench::imbalance(compute_ms_per_rank); }
  double flops_imbalance() const { return cpbench::imbalance(model_flops_per_rank); }
  // The report's integrity flags (metrics.h integrity_flags) from this result's own figures: the
  // report and the console both read them here. Empty: nothing to flag.
  std::vector<std::string> integrity_flags() const;
};

struct JobResult {
  std::string strategy, label;
  int64_t seq = 0;
  MeshSpec mesh;
  std::string status = "ok";  // ok | skipped | failed
  std::string reason;         // when not ok
  std::string warning;        // placement advice (tiers.h placement_warning); empty when none
  std::optional<TimedResult> timed;
  std::optional<VerifyResult> verify;
  std::optional<NumericsResult> numerics;  // verify --numerics S

  static JobResult of(const Job& job);  // identity fields; status ok
  nlohmann::json to_json() const;
};

// The report's mesh block: {tp, ulysses, ring, placement, levels: [{name, size}] innermost
// first (size-1 levels included)} and inner_ring for a double ring.
nlohmann::json mesh_json(const MeshSpec& m);

// Assembles the timed result from every rank's summary (rank order) and this rank's records.
TimedResult make_timed_result(const std::vector<RankSummary>& ranks, const Stats& fwd, const Stats& bwd,
                              const Stats& step, const std::vector<CommRecord>& rank0_records,
                              const std::vector<CommPrediction>& predicted, const Peak& peak,
                              int64_t activation_estimate, const std::vector<RankTiers>& predicted_tiers = {},
                              bool recompute = false);

}  // namespace cpbench
