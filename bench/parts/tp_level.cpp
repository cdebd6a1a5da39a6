#include "bench/parts/tp_level.h"

#include "bench/parts/layout.h"
#include "comm/communicator.h"

namespace cpbench {

void TpLevel::setup(Backend& be, Communicator* c, const LayerShape& s, int64_t T) {
  c_ = c;
  t_ = c ? c->size() : 1;
  r_ = c ? c->rank() : 0;
  replicated_ = s.decode();
  B_ = s.B;
  T_ = T;
  D_ = s.D;
  if (!c_) return;
  // Whole-group [B*span*T, D] slots (run dtype) for the gathers and reduce-scatters; their uses
  // never overlap in time. Two, three when B > 1 (the reordered copy): the peak of the
  // transient buffers they replace. Replicated rows: one slot for the partial, its D/t chunk.
  for (int i = 0; i < (replicated_ ? 1 : s.B > 1 ? 3 : 2); ++i)
    slot_[i] = be.alloc({s.B * span() * T, s.D}, s.dtype, MemKind::comm);
  if (replicated_) chunk_ = be.alloc({s.B * T * s.D / t_}, s.dtype, MemKind::comm);
}

const Tensor& TpLevel::gather(Backend& be, const Tensor& local, int dst, int scratch) {
  if (!c_ || replicated_) return local;
  if (B_ == 1) {  // the member-ordered gather already is the rows' order
    c_->all_gather(local, slot_[dst]);
    return slot_[dst];
  }
  c_->all_gather(local, slot_[scratch]);
  gathered_to_natural(be, slot_[scratch], B_, T_, D_, t_, RankChunks::contiguous, slot_[dst]);
  return slot_[dst];
}

Tensor TpLevel::partial(int slot, Tensor& out) { return c_ ? slot_[replicated_ ? 0 : slot] : out; }

void TpLevel::reduce(Backend& be, const Tensor& partial, int scratch, Tensor& out) {
  if (!c_) return;  // the GEMM wrote `out` itself
  if (replicated_) {  // all-reduce: every member sums a 1/t chunk, then all of them gather it
    Tensor whole = out.reshape({out.numel()});
    c_->reduce_scatter(partial.reshape({partial.numel()}), chunk_);
    c_->all_gather(chunk_, whole);
    return;
  }
  if (B_ == 1) {
    c_->reduce_scatter(partial, out);
    return;
  }
  natural_to_gathered(be, partial, B_, T_, D_, t_, RankChunks::contiguous, slot_[scratch]);
  c_->reduce_scatter(slot_[scratch], out);
}

CommPrediction tp_sublayer_bytes(const LayerShape& s, int P, int t, const std::string& level, int64_t elem) {
  CommPrediction p;
  if (t <= 1) return p;
  if (s.decode()) return p.add(level, Phase::fwd, 0, s.pass.steps * 2 * elem * (s.B * s.D / t) * (t - 1));
  const int64_t sTD = elem * (s.B * s.new_tokens() / P) * s.D;
  return p.add(level, Phase::fwd, 0, 2 * sTD * (t - 1)).add(level, Phase::bwd, 0, 3 * sTD * (t - 1));
}

}  // namespace cpbench
