// `cpbench verify --numerics S` (issue 42, docs/NUMERICS.md): each strategy's attention output and
// gradients against float64 attention computed from the same inputs, over S seeds.
//
// The reference is kernels/attention_reference.h on single's q, k, v, do (and the sinks' logits)
// as the run stored them (16-bit values under bf16, e4m3 values under fp8): it measures what the
// attention computation and what travels lose, not the rounding of its inputs (which every
// strategy shares; scripts/numerics.py measures the layer from x instead). Per tensor (o, dq, dk,
// dv, dsinks; the forward's o only without a backward): the relative Frobenius error
// ||x - x64|| / ||x64||, the largest absolute error, and the ratio to single's error on the same
// seed. The gradients dq, dk, dv are compared as the block hands them to the projections' backward:
// rounded once to the run dtype (DESIGN "Rounding points"), wherever a strategy rounds them (single
// exports its float32 accumulators, a Ulysses level its all-to-all's 16-bit ones). The report's
// `numerics` block (result.cpp) gives them per seed with median, min and max.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/strategy.h"
#include "comm/world.h"

namespace cpbench {

using ExportedTensors = std::map<std::string, std::vector<float>>;  // global tensors by dump name
using Reference64 = std::map<std::string, std::vector<double>>;

// The tensors numerics compares, of those a job exports (DESIGN's dump order).
std::vector<std::string> numerics_tensor_names(const std::vector<std::string>& exported);

// float64 attention of shape s (every token at its global position; no cache) from single's
// exported q, k, v, do (sinks); with_grad adds dq, dk, dv (dsinks). The ranks share the (batch
// row, query head) pairs and sum: the same values on every rank. Collective.
Reference64 attention_reference64(const ExportedTensors& single, const LayerShape& s, bool with_grad, World& w);

struct TensorError {
  double rel_fro = 0, max_abs = 0;  // ||x - x64|| / ||x64||; max |x - x64| (inf when x is not finite)
};
TensorError error_against(const std::vector<float>& got, const std::vector<double>& want);

// One tensor's figures, one entry per seed.
struct NumericsTensor {
  std::string name;
  std::vector<double> rel_fro, max_abs, single_rel_fro;
  std::vector<double> ratio() const;  // rel_fro / single_rel_fro, per seed
};
struct NumericsResult {
  std::vector<uint64_t> seeds;
  std::vector<NumericsTensor> tensors;
  // Adds one seed's errors of every tensor in `names` (got and single against ref); dtype: the run's.
  void add(uint64_t seed, const std::vector<std::string>& names, const ExportedTensors& got,
           const ExportedTensors& single, const Reference64& ref, DType dtype);
};

}  // namespace cpbench
