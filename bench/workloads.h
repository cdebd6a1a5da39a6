// Packed documents (--docs SPEC): the spec forms and the workloads of configs/workloads/
// (embedded in the binary at build time), resolved to document lengths for one sequence length.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cpbench {

// A workload is either a fixed pack (weights, scaled to N) or a length distribution (components,
// sampled with a seed until N is filled): a mixture of exponentials, each component with its
// share of documents and its mean length in tokens, taken from a published table (`source`).
struct LengthComponent {
  std::string name;
  double share = 0;        // relative share of documents (e.g. % of examples)
  double mean_tokens = 0;  // mean document length in tokens
};
struct Workload {
  std::string name, description;
  std::vector<int64_t> weights;             // relative document lengths, scaled to N (fixed pack)
  std::vector<LengthComponent> components;  // a length distribution (sampled pack); weights empty
  std::string source;                       // the distribution's citation
  bool sampled() const { return !components.empty(); }
};
const std::vector<Workload>& workloads();  // embedded from configs/workloads/, sorted by name

// The document lengths of `spec` for a sequence of N tokens:
//   "L1,L2,..."      explicit lengths, each >= 1, summing to N
//   "equal:K"        K documents of N/K tokens (K divides N)
//   "random:MIN:MAX" lengths drawn uniformly from [MIN, MAX] with `seed` (1 <= MIN <= MAX, MIN <= N)
//                    until N is filled; the last document takes the rest (1 .. MAX tokens)
//   "NAME"           a workload: weights scaled to N (largest remainders get the rounding tokens);
//                    every document must get at least one token. For a distribution workload,
//                    lengths drawn with `seed` until N is filled (the last document takes the rest)
//   "NAME:SEED"      a distribution workload drawn with SEED instead of the run's seed
// Throws std::invalid_argument naming the spec and the values.
std::vector<int64_t> resolve_doc_lens(const std::string& spec, int64_t N, uint64_t seed);

// Whether `spec` draws its lengths at random (random:MIN:MAX or a distribution workload), i.e.
// whether another seed gives another pack (--docs-resample needs one).
bool doc_spec_is_sampled(const std::string& spec);

}  // namespace cpbench
