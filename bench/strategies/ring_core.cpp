#include "bench/strategies/ring_core.h"

#include <limits>
#include <sstream>

#include "bench/strategies/layout.h"

namespace cpbench {

namespace {
// One tag per message stream. K,V of the backward and the dK,dV accumulators arrive from the
// same neighbour at the same time (and have the same size in fp32 runs), so they must not share
// a tag; within a stream, MPI's non-overtaking order matches step i's message to step i's recv.
constexpr int kTagFwdKV = 101, kTagBwdKV = 102, kTagBwdAcc = 103;

// A block whose every key comes after every query contributes nothing under the causal mask:
// skipping it (instead of calling the kernel, which would skip its tiles anyway) also skips the
// merge. count_visible_pairs is closed-form, not a scan.
bool invisible(const AttnShape& a, const Positions& qpos, const Positions& kpos) {
  return count_visible_pairs(qpos, kpos, a.causal) == 0;
}
}  // namespace

AttnShape RingCore::attn_shape() const {
  AttnShape a;
  a.B = s_.B; a.nq = s_.n; a.nk = s_.n; a.hq = s_.hq; a.hk = s_.hk; a.d = s_.d; a.causal = s_.causal;
  return a;
}

Tensor RingCore::kv_view(Tensor& buf, int which) const {
  const int64_t e = s_.B * s_.n * s_.hk * s_.d;
  return buf.view(which * e, {s_.B, s_.n, s_.hk, s_.d});
}

void RingCore::pack_kv(const Tensor& k, const Tensor& v, Tensor& buf) {
  const int64_t e = s_.B * s_.n * s_.hk * s_.d;
  Tensor kd = kv_view(buf, 0), vd = kv_view(buf, 1);
  be_->copy_2d(kd, e, k, e, 1, e);
  be_->copy_2d(vd, e, v, e, 1, e);
}

void RingCore::setup(Backend& be, Communicator& ring, const RingCoreShape& s, BlockPositions block_pos) {
  be_ = &be;
  ring_ = &ring;
  s_ = s;
  block_pos_ = std::move(block_pos);
  const int R = ring.size();
  lse_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
  delta_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
  if (R > 1) {
    o_blk_ = be.alloc({s.B, s.n, s.hq, s.d}, s.dtype, MemKind::activations);
    lse_blk_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
    const int64_t kv = 2 * s.B * s.n * s.hk * s.d;
    for (Tensor& t : kv_) t = be.alloc({kv}, s.dtype, MemKind::comm);
    for (Tensor& t : acc_) t = be.alloc({kv}, DType::f32, MemKind::comm);
  }
}

void RingCore::teardown() {
  for (Tensor* t : {&lse_, &delta_, &o_blk_, &lse_blk_, &kv_[0], &kv_[1], &acc_[0], &acc_[1], &acc_[2]})
    *t = Tensor{};
  ring_ = nullptr;
}

void RingCore::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o) {
  Backend& b = *be_;
  Communicator& c = *ring_;
  const int R = c.size(), me = c.rank();
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  const AttnShape a = attn_shape();
  const Positions qpos = block_pos_(me);
  if (R == 1) {
    b.attn_fwd(a, q, k, v, qpos, qpos, o, lse_);
    return;
  }
  pack_kv(k, v, kv_[0]);
  bool have = false;  // o, lse hold a result (the first visible block writes them directly)
  for (int i = 0; i < R; ++i) {
    Tensor& cur = kv_[i % 2];
    Request rq, sq;
    if (i + 1 < R) {  // post the next hop before computing, so it travels during the compute
      rq = c.irecv(kv_[(i + 1) % 2], prev, kTagFwdKV);
      sq = c.isend(cur, next, kTagFwdKV);
    }
    const Positions kpos = block_pos_((me - i + R) % R);  // block i hops old comes from rank me-i
    if (!invisible(a, qpos, kpos)) {
      const Tensor kb = kv_view(cur, 0), vb = kv_view(cur, 1);
      if (!have) {
        b.attn_fwd(a, q, kb, vb, qpos, kpos, o, lse_);
        have = true;
      } else {
        b.attn_fwd(a, q, kb, vb, qpos, kpos, o_blk_, lse_blk_);
        b.attn_merge(a, o, lse_, o_blk_, lse_blk_);
      }
    }
    if (i + 1 < R) {
      c.wait(rq);
      c.wait(sq);
    }
  }
  // Unreachable for the strategies here (the diagonal block is always visible), but a row set
  // that sees no key at all is o = 0, lse = -inf by the kernels' contract.
  if (!have) {
    b.fill(o, 0.0f);
    b.fill(lse_, -std::numeric_limits<float>::infinity());
  }
}

void RingCore::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                        const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  Backend& b = *be_;
  Communicator& c = *ring_;
  const int R = c.size(), me = c.rank();
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  const AttnShape a = attn_shape();
  const Positions qpos = block_pos_(me);
  b.attn_bwd_delta(a, o, dout, delta_);
  b.fill(dq, 0.0f);
  if (R == 1) {
    b.fill(dk, 0.0f);
    b.fill(dv, 0.0f);
    b.attn_bwd(a, q, k, v, dout, lse_, delta_, qpos, qpos, dq, dk, dv);
    return;
  }
  // Step i: this rank holds block j = me-i (its K,V, and in acc_[2] the dK,dV accumulated by the
  // i ranks before it). It computes its own contribution into a zeroed scratch (acc_[i%2]) while
  // that accumulator is still arriving, then adds it in and sends the sum on. The last send
  // (step R-1) reaches the owner j = me-(R-1) = next; what arrives then is this rank's own.
  pack_kv(k, v, kv_[0]);
  Tensor& incoming = acc_[2];
  Request acc_rq, acc_sq;
  for (int i = 0; i < R; ++i) {
    Tensor& cur = kv_[i % 2];
    Request rq, sq;
    if (i + 1 < R) {
      rq = c.irecv(kv_[(i + 1) % 2], prev, kTagBwdKV);
      sq = c.isend(cur, next, kTagBwdKV);
    }
    Tensor& scratch = acc_[i % 2];  // its send (step i-2) was waited for at step i-1
    b.fill(scratch, 0.0f);
    const Positions kpos = block_pos_((me - i + R) % R);
    if (!invisible(a, qpos, kpos)) {
      Tensor dkb = kv_view(scratch, 0), dvb = kv_view(scratch, 1);
      b.attn_bwd(a, q, kv_view(cur, 0), kv_view(cur, 1), dout, lse_, delta_, qpos, kpos, dq, dkb, dvb);
    }
    if (i > 0) {
      c.wait(acc_rq);
      b.add(scratch, scratch, incoming);
      c.wait(acc_sq);  // frees acc_[(i-1)%2] for step i+1
    }
    acc_sq = c.isend(scratch, next, kTagBwdAcc);
    acc_rq = c.irecv(incoming, prev, kTagBwdAcc);
    if (i + 1 < R) {
      c.wait(rq);
      c.wait(sq);
    }
  }
  c.wait(acc_rq);  // this rank's own block, with every rank's contribution
  const int64_t e = s_.B * s_.n * s_.hk * s_.d;
  b.copy_2d(dk, e, kv_view(incoming, 0), e, 1, e);
  b.copy_2d(dv, e, kv_view(incoming, 1), e, 1, e);
  c.wait(acc_sq);
}

int64_t RingCore::activation_bytes(const RingCoreShape& s, int R) {
  const int64_t es = int64_t(dtype_size(s.dtype)), rows = s.B * s.hq * s.n;
  int64_t bytes = 2 * rows * 4;  // lse, delta
  if (R > 1) {
    const int64_t kv = 2 * s.B * s.n * s.hk * s.d;
    bytes += s.B * s.n * s.hq * s.d * es + rows * 4;  // block o, lse
    bytes += 2 * kv * es + 3 * kv * 4;                // k|v double buffer, dk|dv accumulators
  }
  return bytes;
}

CommPrediction RingCore::predicted_bytes(int64_t tokens, int64_t hk, int R, int64_t elem, int64_t acc) {
  if (R <= 1) return {0, 0};
  const int64_t kv = elem * tokens * 2 * hk * (R - 1);
  return {kv, kv + acc * tokens * 2 * hk * R};
}

// ---- RingLayer -----------------------------------------------------------------------------------

CommPrediction RingLayer::predicted_bytes(const LayerShape& s, int P, const MeshSpec&, int64_t elem,
                                          int64_t acc) const {
  return RingCore::predicted_bytes(s.B * s.N / P, int64_t(s.G) * s.d, P, elem, acc);
}

void RingLayer::core_setup() {
  const LayerShape& s = shape();
  RingCoreShape cs;
  cs.B = s.B; cs.n = T_; cs.hq = s.H; cs.hk = s.G; cs.d = s.d; cs.causal = s.causal; cs.dtype = s.dtype;
  const int P = mesh().P;
  core_.setup(be(), *mesh().cp, cs, [this, P](int j) { return rank_positions(shape(), P, j); });
}

void RingLayer::export_lse(std::vector<float>& global) {
  const LayerShape& s = shape();
  add_lse_rows(global, be().download(core_.lse()), s.B, s.H, s.N, 0, s.H, pos_);
}

int64_t RingLayer::core_activation_bytes(const LayerShape& s, int P, const MeshSpec&) const {
  RingCoreShape cs;
  cs.B = s.B; cs.n = s.N / P; cs.hq = s.H; cs.hk = s.G; cs.d = s.d; cs.dtype = s.dtype;
  return RingCore::activation_bytes(cs, P);
}

void RingLayer::require_seq_multiple(const LayerShape& s, int64_t multiple, const std::string& what) const {
  if (s.N % multiple != 0) {
    std::ostringstream e;
    e << name() << ": seq=" << s.N << " is not divisible by " << what << "=" << multiple;
    throw ConstraintError(e.str());
  }
}

}  // namespace cpbench
