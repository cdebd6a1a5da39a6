#include "bench/strategies/double_ring_core.h"

namespace cpbench {

namespace {
// One tag per message stream (inner and outer are different communicators; distinct tags keep
// traces readable).
constexpr int kTagInnerKV = 111, kTagOuterKV = 112, kTagInnerAcc = 113, kTagOuterAcc = 114;
}  // namespace

void DoubleRingCore::setup(Backend& be, Communicator& inner, Communicator& outer, const RingCoreShape& s,
                           BlockPositions block_pos) {
  be_ = &be;
  inner_ = &inner;
  outer_ = &outer;
  s_ = s;
  const int w = inner.size(), W = outer.size();
  steps_.setup_steps(be, outer.rank() * w + inner.rank(), w * W, s, std::move(block_pos));
  // Allocated even for a ring of one (P = 1), so the loops have no special case.
  const int64_t kv = 2 * s.B * s.n * s.hk * s.d;
  for (Tensor& t : round_) t = be.alloc({kv}, s.dtype, MemKind::comm);
  for (Tensor& t : hop_) t = be.alloc({kv}, s.dtype, MemKind::comm);
  for (Tensor& t : acc_) t = be.alloc({kv}, DType::f32, MemKind::comm);
  acc_out_ = be.alloc({kv}, DType::f32, MemKind::comm);
}

void DoubleRingCore::teardown() {
  steps_.teardown();
  for (Tensor* t : {&round_[0], &round_[1], &hop_[0], &hop_[1], &acc_[0], &acc_[1], &acc_[2], &acc_out_})
    *t = Tensor{};
  inner_ = outer_ = nullptr;
}

int DoubleRingCore::owner(int t, int j) const {
  const int w = inner_->size(), W = outer_->size();
  const int o = (outer_->rank() - t % W + W) % W, i = (inner_->rank() - j % w + w) % w;
  return o * w + i;
}

void DoubleRingCore::pack_kv(const Tensor& k, const Tensor& v, Tensor& buf) {
  const int64_t e = s_.B * s_.n * s_.hk * s_.d;
  Tensor kd = steps_.kv_view(buf, 0), vd = steps_.kv_view(buf, 1);
  be_->copy_2d(kd, e, k, e, 1, e);
  be_->copy_2d(vd, e, v, e, 1, e);
}

void DoubleRingCore::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o) {
  Communicator& in = *inner_;
  Communicator& out = *outer_;
  const int w = in.size(), W = out.size();
  const int inext = (in.rank() + 1) % w, iprev = (in.rank() + w - 1) % w;
  const int onext = (out.rank() + 1) % W, oprev = (out.rank() + W - 1) % W;
  steps_.fwd_begin();
  pack_kv(k, v, round_[0]);
  for (int t = 0; t < W; ++t) {
    Tensor& start = round_[t % 2];
    RingCore::Hop outer_hop;  // the round's starting block to the next window, during the round
    if (t + 1 < W) outer_hop = steps_.post_hop(out, start, onext, round_[(t + 1) % 2], oprev, kTagOuterKV);
    const Tensor* cur = &start;
    for (int j = 0; j < w; ++j) {
      RingCore::Hop inner_hop;
      if (j + 1 < w) inner_hop = steps_.post_hop(in, *cur, inext, hop_[j % 2], iprev, kTagInnerKV);
      steps_.fwd_block(q, *cur, owner(t, j), o);
      if (j + 1 < w) {
        steps_.wait_hop(in, inner_hop);
        cur = &hop_[j % 2];
      }
    }
    if (t + 1 < W) steps_.wait_hop(out, outer_hop);
  }
  steps_.fwd_end(o);
}

void DoubleRingCore::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                              const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  Backend& b = *be_;
  Communicator& in = *inner_;
  Communicator& out = *outer_;
  const int w = in.size(), W = out.size();
  steps_.bwd_begin(o, dout, dq);
  const int64_t e = s_.B * s_.n * s_.hk * s_.d;
  const int inext = (in.rank() + 1) % w, iprev = (in.rank() + w - 1) % w;
  const int onext = (out.rank() + 1) % W, oprev = (out.rank() + W - 1) % W;
  pack_kv(k, v, round_[0]);
  RingCore::Hop acc_inner, acc_outer;  // accumulator hops in flight
  const Tensor* result = nullptr;      // after the loop: this rank's own block, all contributions
  int step = 0;                        // steps so far: alternates the scratch accumulators
  for (int t = 0; t < W; ++t) {
    Tensor& start = round_[t % 2];
    RingCore::Hop outer_hop;
    if (t + 1 < W) outer_hop = steps_.post_hop(out, start, onext, round_[(t + 1) % 2], oprev, kTagOuterKV);
    const Tensor* cur = &start;
    for (int j = 0; j < w; ++j) {
      RingCore::Hop inner_hop;
      if (j + 1 < w) inner_hop = steps_.post_hop(in, *cur, inext, hop_[j % 2], iprev, kTagInnerKV);
      Tensor& scratch = acc_[step++ % 2];  // its inner send was waited for at the previous step
      steps_.bwd_block(q, *cur, owner(t, j), dout, dq, scratch);
      if (j == 0 && t > 0) {  // the block's sum over the previous windows
        steps_.wait_hop(out, acc_outer);
        b.add(scratch, scratch, acc_out_);
      }
      if (j > 0) {  // and over the ranks before this one in the window
        in.wait(acc_inner.recv);
        b.add(scratch, scratch, acc_[2]);
        in.wait(acc_inner.send);
      }
      if (w > 1) acc_inner = steps_.post_hop(in, scratch, inext, acc_[2], iprev, kTagInnerAcc);
      if (j + 1 < w) {
        steps_.wait_hop(in, inner_hop);
        cur = &hop_[j % 2];
      }
    }
    // The sum for the block this rank started the round with: back from the inner circle (or
    // the one scratch when the window is one rank); on to the next window, where that block
    // starts the next round (after the last round: its owner).
    const Tensor* round_sum = &acc_[(step - 1) % 2];
    if (w > 1) {
      steps_.wait_hop(in, acc_inner);
      round_sum = &acc_[2];
    }
    if (W > 1) acc_outer = steps_.post_hop(out, *round_sum, onext, acc_out_, oprev, kTagOuterAcc);
    else result = round_sum;
    if (t + 1 < W) steps_.wait_hop(out, outer_hop);
  }
  if (W > 1) {
    steps_.wait_hop(out, acc_outer);
    result = &acc_out_;
  }
  b.copy_2d(dk, e, steps_.kv_view(*result, 0), e, 1, e);
  b.copy_2d(dv, e, steps_.kv_view(*result, 1), e, 1, e);
}

int64_t DoubleRingCore::activation_bytes(const RingCoreShape& s, int w, int W) {
  // RingCore's buffers (with R > 1: 2 k|v, 3 accumulators) + 2 more k|v and the outer
  // accumulator; for R = 1 the 4 + 4 comm buffers are still allocated.
  const int R = w * W;
  const int64_t kv = 2 * s.B * s.n * s.hk * s.d, es = int64_t(dtype_size(s.dtype));
  int64_t bytes = RingCore::activation_bytes(s, R);
  bytes += R > 1 ? 2 * kv * es + kv * 4 : 4 * kv * es + 4 * kv * 4;
  return bytes;
}

CommPrediction DoubleRingCore::predicted_bytes(int64_t tokens, int64_t hk, int w, int W, int64_t elem,
                                               int64_t acc) {
  CommPrediction p;
  const int64_t block = tokens * 2 * hk;
  // Every round (W of them) passes the K,V block w-1 hops round the inner ring; between rounds
  // the round's starting block goes one hop round the outer ring (W-1 times): R-1 hops in all.
  // Backward adds the dK,dV accumulators: one inner hop per step when w > 1 (R steps) and one
  // outer hop per round when W > 1. Every hop goes to the next rank of its ring.
  const int64_t inner_kv = elem * block * W * (w - 1), outer_kv = elem * block * (W - 1);
  p.add("ring_inner", Phase::fwd, 1, inner_kv).add("ring_outer", Phase::fwd, 1, outer_kv);
  p.add("ring_inner", Phase::bwd, 1, inner_kv + (w > 1 ? acc * block * w * W : 0));
  p.add("ring_outer", Phase::bwd, 1, outer_kv + (W > 1 ? acc * block * W : 0));
  return p;
}

}  // namespace cpbench
