// The tensor-parallel level of a mesh (Megatron-LM sequence parallelism; DESIGN "Tensor
// parallelism inside the CP mesh"): t ranks that split a sub-layer's weights (attention by
// heads, the MLP by columns) and wrap each column-parallel GEMM in an all-gather of its normed
// input and each row-parallel GEMM in a reduce-scatter of its output. megatron-sp is this level
// over all P ranks; usp --tp t puts it innermost under its Ulysses and ring levels; --mlp-tp N
// gives the MLP its own (bench/parts/sublayer_mesh.h). The block (bench/block/block.cpp) calls it
// around its GEMMs.
//
// Here: the running level (setup allocates, the steps allocate nothing) and its term of the byte
// model.
#pragma once
#include <cstdint>
#include <string>

#include "bench/strategy.h"
#include "kernels/backend.h"

namespace cpbench {

class Communicator;

// The tensor-parallel group around the block's column- and row-parallel GEMMs (Megatron SP).
// Outside the GEMMs each member holds its own tokens [B*T, D]; gather() all-gathers them into
// the group's tokens [B*t*T, D] in member order ("wide" rows), reduce() sums partial
// [B*t*T, D] outputs and scatters them back (a reduce-scatter). With no communicator (t = 1)
// gather returns the local rows and partial() is the output itself, so the block's code has no
// special case. Under --pass decode the members hold the same B rows (one token per sequence
// cannot be split): gather() is the rows themselves and reduce() an all-reduce, done as a
// reduce-scatter of D/t columns per member then an all-gather (Megatron's decode TP).
// The whole-sequence buffers are slots allocated once; their uses never overlap in time.
class TpLevel {
 public:
  // Allocates its slots (none when c is null: t = 1). T: this member's tokens per batch row.
  void setup(Backend& be, Communicator* c, const LayerShape& s, int64_t T);
  int size() const { return t_; }
  int rank() const { return r_; }
  bool active() const { return c_ != nullptr; }
  // The members whose rows one gather joins: t, or 1 when the rows are replicated (decode).
  int span() const { return replicated_ ? 1 : t_; }
  // local [B*T, D] -> the group's rows, in slot `dst` (through `scratch` when B > 1).
  const Tensor& gather(Backend& be, const Tensor& local, int dst, int scratch);
  // Where a row-parallel GEMM writes its partial sum: slot `slot`, or `out` itself when t = 1.
  Tensor partial(int slot, Tensor& out);
  // partial (returned by partial()) -> out [B*T, D]: the group's sum of this member's rows
  // (through `scratch` when B > 1); t = 1: nothing.
  void reduce(Backend& be, const Tensor& partial, int scratch, Tensor& out);

 private:
  Communicator* c_ = nullptr;
  int t_ = 1, r_ = 0;
  bool replicated_ = false;
  int64_t B_ = 1, T_ = 0, D_ = 0;
  Tensor slot_[3];
  Tensor chunk_;  // replicated rows: this member's D/t columns of the sum
};

// ---- the byte model's term (bytes sent per rank per layer) -------------------------------------
// One sub-layer's tensor-parallel collectives over t ranks on `level` (Megatron SP): forward the
// all-gather of its normed input and the reduce-scatter of its row-parallel output, backward the
// all-gather of the output gradient, the reduce-scatter of the input gradient and the input's
// all-gather again: 2 and 3 x s*Tn*D*(t-1), Tn = B*(N-C)/P new token rows per rank. Under decode
// (the B rows replicated) one all-reduce per step, a reduce-scatter then an all-gather of
// B*D/t elements: S * 2*s*(B*D/t)*(t-1). t = 1: nothing.
CommPrediction tp_sublayer_bytes(const LayerShape& s, int P, int t, const std::string& level, int64_t elem);

}  // namespace cpbench
