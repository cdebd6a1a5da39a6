// Packed documents (--docs SPEC): the spec forms and the workloads of configs/workloads/
// (embedded in the binary at build time), resolved to document lengths for one sequence length.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cpbench {

struct Workload {
  std::string name, description;
  std::vector<int64_t> weights;  // relative document lengths, scaled to N
};
const std::vector<Workload>& workloads();  // embedded from configs/workloads/, sorted by name

// The document lengths of `spec` for a sequence of N tokens:
//   "L1,L2,..."      explicit lengths, each >= 1, summing to N
//   "equal:K"        K documents of N/K tokens (K divides N)
//   "random:MIN:MAX" lengths drawn uniformly from [MIN, MAX] with `seed` (1 <= MIN <= MAX, MIN <= N)
//                    until N is filled; the last document takes the rest (1 .. MAX tokens)
//   "NAME"           a workload: weights scaled to N (largest remainders get the rounding tokens);
//                    every document must get at least one token
// Throws std::invalid_argument naming the spec and the values.
std::vector<int64_t> resolve_doc_lens(const std::string& spec, int64_t N, uint64_t seed);

}  // namespace cpbench
