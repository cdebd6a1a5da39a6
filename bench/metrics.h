// Pure functions from measurements to the report's figures: statistics, communication
// aggregation, overlap, balance. No MPI, no backend: unit-tested on hand-made inputs
// (tests/unit/test_metrics.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/strategy.h"
#include "comm/communicator.h"
#include "kernels/backend.h"

namespace cpbench {

// Order statistics of samples (median, p10, p90 by linear interpolation between closest ranks).
struct Stats {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0;
  std::vector<double> samples;  // in measurement order
};
Stats summarize(const std::vector<double>& samples);  // samples must not be empty
double median(std::vector<double> v);
double max_of(const std::vector<double>& v);
double mean_of(const std::vector<double>& v);
int64_t max_of(const std::vector<int64_t>& v);

// One (op, group) line of a phase's communication: count, bytes, time and the nccl-tests
// bandwidths (algbw = algorithm bytes / time; busbw = algbw * (g-1)/g for collectives).
struct OpSummary {
  std::string op, group;
  int group_size = 0;
  int64_t count = 0, bytes_sent = 0;
  double time_ms = 0, algbw_gbps = 0, busbw_gbps = 0;
};
std::vector<OpSummary> summarize_ops(const std::vector<CommRecord>& recs, Phase ph);
int64_t phase_bytes(const std::vector<CommRecord>& recs, Phase ph);
TierBytes phase_tier_bytes(const std::vector<CommRecord>& recs, Phase ph);
double phase_time_ms(const std::vector<CommRecord>& recs, Phase ph);

// A closed-open interval [t0, t1) in ms.
struct Interval {
  double t0 = 0, t1 = 0;
};
// Total length of the union of intervals.
double union_length(std::vector<Interval> v);
// Length of (union of a) ∩ (union of b).
double intersection_length(std::vector<Interval> a, std::vector<Interval> b);

// Holistic Trace Analysis' communication-computation overlap of one rank: the part of its
// communication time (union of its comm intervals) during which it also computes (union of its
// compute intervals), over its communication time. 1 when the rank does not communicate.
double hta_overlap(const std::vector<CommRecord>& comm, const std::vector<ComputeRecord>& compute);

// DESIGN's overlap ratio of one rank: clamp(1 - exposed / standalone, 0, 1); 1 for a rank that
// sends nothing (it has no communication to hide) or whose standalone replay took no time.
double exposed_overlap_ratio(double exposed_ms, double standalone_ms, bool sends_nothing);

// max / mean (1 when the mean is 0).
double imbalance(const std::vector<double>& per_rank);

// DESIGN's whole-model memory estimate per rank (--block full): L blocks as measured plus the
// embedding and the output head, trained with mixed-precision Adam, the optimizer states (and
// under --shard grads/params the gradients, and the parameters) sharded over the ranks that hold
// the same weights. An estimate, not a measurement: the report says so in `formula`.
struct ModelEstimateInput {
  int64_t layers = 0;             // L
  int64_t block_parameters = 0;   // parameters one rank holds of one block (its registry's weights)
  int64_t norm_parameters = 0;    // of which the two norms (held whole by every rank)
  int64_t mlp_parameters = 0;     // of which the MLP's three projections (F/mlp_tp columns); the
                                  // rest are the attention's projections (w_qkv, w_o)
  int64_t vocab = 0, dim = 0;     // V, D: embedding and output head, V x D each, split by tp
  int tp = 1;                     // the attention's TP degree (megatron-sp: P; 1 for the others)
  int mlp_tp = 1;                 // the MLP's TP degree (--mlp-tp; else the attention's)
  int replicas = 1;               // ranks that hold the same whole-model replica split by tp: P (single: 1)
  std::string shard = "none";     // --shard none | optimizer | grads | params
  int64_t block_activation_bytes = 0;  // one block's activations per rank (report's memory.activations)
  int64_t block_input_bytes = 0;       // one block's input [B, T, D] per rank, run dtype
  // --recompute: none | selective (the attention core's own activations, core_activation_bytes,
  // live for one block only) | full (each block's input kept, one block's activations live)
  std::string recompute = "none";
  int64_t core_activation_bytes = 0;   // of block_activation_bytes, the attention core's (Block::HeldShare)
};
// One group of weights that the same ranks hold (DESIGN "Memory"): `copies` units (L blocks, or
// the one embedding and head) of `parameters` each on this rank, held identically by `replicas`
// ranks, which shard it into `shard` = ceil(parameters / replicas) each (a shard padded to equal
// size, as Megatron's distributed optimizer and FSDP pad their flat buffers).
struct WeightGroup {
  std::string name;  // norms | attention | mlp | embedding
  int64_t copies = 1, parameters = 0, replicas = 1, shard = 0;
};
struct ModelEstimate {
  int64_t layers = 0, parameters = 0;
  int64_t weights = 0, grads = 0, optimizer = 0, activations = 0, total = 0;  // bytes
  int64_t core_activations = 0;     // the input's core_activation_bytes (what selective does not keep)
  std::string shard;                // the --shard choice it was computed under
  std::vector<WeightGroup> groups;  // norms, attention, mlp, embedding
  std::string formula;
};
// Bytes per parameter held: bf16 weights 2, bf16 gradients 2, optimizer 12 (fp32 master 4 and
// Adam's two fp32 moments 8): 16 in all.
inline constexpr int64_t kWeightBytesPerParam = 2, kGradBytesPerParam = 2, kOptimizerBytesPerParam = 12;
// Groups (replicas g): the norms (2 D per block, every rank: g = replicas), the attention's
// projections (g = replicas / tp), the MLP's (g = replicas / mlp_tp), the embedding and head
// (ceil(2 V D / tp) parameters, g = replicas / tp). parameters = sum of copies x parameters.
// Held count per group: copies x parameters, or copies x shard where sharded. optimizer = 12 x
// (held, sharded unless --shard none); grads = 2 x (held, sharded under grads/params) + under
// grads/params 2 x the largest unit's parameters (one block's, or the embedding and head's: its
// full gradients until their reduce-scatter); weights = 2 x (held, sharded under params) + under
// params 2 x the largest unit (gathered for its forward or backward). activations = L x
// block_activation_bytes (recompute none), L x (block_activation_bytes - core_activation_bytes) +
// core_activation_bytes (selective: the core's state rebuilt one block at a time), or L x
// block_input_bytes + block_activation_bytes (full: each block's input kept, one block recomputed
// at a time); total = their sum.
// Throws std::invalid_argument on layers < 1, tp, mlp_tp or replicas < 1, a degree that does not
// divide replicas, or an unknown shard.
ModelEstimate model_estimate(const ModelEstimateInput& in);

// The weight gradients' synchronisation per training step (DESIGN "Memory", "Report essentials":
// results[].step), a model: bytes one rank sends per step over each group's replicas, in the
// byte convention of DESIGN "Communication" (bf16 gradients and parameters, 2 B each): with x a
// group's shard and g its replicas, a reduce-scatter sends 2 x (g - 1) and an all-gather the same,
// per unit (copies). none, optimizer: all-reduce = reduce-scatter + all-gather; grads: reduce-
// scatter of the gradients + all-gather of the updated parameters; params: the reduce-scatter +
// FSDP's all-gather of each unit's parameters before its forward and again before its backward.
struct GradSync {
  std::string shard;
  int64_t reduce_scatter = 0, all_gather = 0, bytes = 0;  // bytes sent per rank per step; bytes = the sum
  std::string formula;
};
GradSync grad_sync(const ModelEstimate& e);

// The longest KV cache that fits (DESIGN "Inference passes"): a rank with `capacity` bytes holds
// the model's weights (L x block_parameters + 2 V D, bf16 as in model_estimate), one layer step's
// working memory `step_bytes` (measured: the job's peak less its weights and cache shard; layers
// run one after another) and L layers of cache, cache_bytes_per_token per cached token it holds.
// The cache is split over `shards` ranks (P; single 1), so
//   max_cached_tokens = shards x floor((capacity - weights - step_bytes) / (L x cache_bytes_per_token))
// (0 when the weights and the step alone do not fit). Throws std::invalid_argument on layers < 1,
// shards < 1, capacity <= 0 or cache_bytes_per_token <= 0.
struct CacheFitInput {
  int64_t capacity = 0;
  int64_t layers = 0, block_parameters = 0, vocab = 0, dim = 0;
  int64_t step_bytes = 0;
  int64_t cache_bytes_per_token = 0;
  int64_t shards = 1;
};
struct CacheFit {
  int64_t max_cached_tokens = 0;
  std::string formula;
};
CacheFit longest_cache(const CacheFitInput& in);

// The layer's model FLOPs for the whole job (every rank together, one step) from the shape alone:
// DESIGN's counting (kernels/backend.h gemm_flops, attn_fwd_flops) applied to the global sequence,
// as one rank running the layer alone would count them. Per step: the new tokens' (N - C) GEMMs
// (QKV, output projection, the MLP's three under --block full) and the attention of their queries
// on every visible key; a train step adds the backward, 2x each. Context parallelism splits this
// work, it does not add to it: the sum of the ranks' counted FLOPs must equal it. `copies` ranks
// run the whole layer each instead (single, the reference, on every rank: P): that many times
// the layer. nullopt under decode, where every rank computes the new tokens' projections
// (replicated by design).
std::optional<double> expected_job_flops(const LayerShape& s, int copies = 1);

// Report integrity (docs/REPORT.md "integrity"): one line per reason not to believe a result's
// rates, each starting with its kind:
//   "tflops_over_peak: ..." when tflops > peak_tflops (a known peak, > 0): the achieved rate
//     exceeds the peak it is divided by (MFU > 1), as when a framework's formula assumes work that
//     did not run;
//   "flops_mismatch: ..." when the FLOPs counted on all ranks differ from `expected` by more than
//     kFlopsMismatchRtol of it: work repeated or skipped relative to the layer (a CP degree that
//     silently did not split the sequence counts P times the model).
// Both name the two numbers. Empty: nothing to flag.
inline constexpr double kFlopsMismatchRtol = 1e-6;  // far above rounding of sums of exact products
std::vector<std::string> integrity_flags(double tflops, double peak_tflops, const std::string& peak_source,
                                         double counted_flops, std::optional<double> expected);

}  // namespace cpbench
