#include "bench/parts/ring_core.h"

#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "bench/parts/layout.h"

namespace cpbench {

namespace {
// One tag per message stream. K,V of the backward and the dK,dV accumulators arrive from the
// same neighbour at the same time (and have the same size in fp32 runs), so they must not share
// a tag; within a stream, MPI's non-overtaking order matches step i's message to step i's recv.
constexpr int kTagFwdKV = 101, kTagBwdKV = 102, kTagBwdAcc = 103, kTagQ = 104, kTagPartial = 105;

// A block none of whose pairs is visible (causal, window, documents) contributes nothing:
// skipping it (instead of calling the kernel, which would skip its tiles anyway) also skips the
// merge. any_visible_pair is closed-form, not a scan.
bool invisible(const AttnShape& a, const Positions& qpos, const Positions& kpos) {
  return !any_visible_pair(qpos, kpos, a.mask());
}
}  // namespace

AttnShape RingCore::attn_shape() const {
  AttnShape a;
  a.B = s_.B; a.nq = s_.n; a.nk = s_.keys(); a.hq = s_.hq; a.hk = s_.hk; a.d = s_.d; a.causal = s_.causal;
  a.window = s_.window; a.docs = s_.docs;
  return a;
}

Tensor RingCore::kv_view(const Tensor& buf, int which) const {
  const int64_t e = s_.B * s_.keys() * s_.hk * s_.d;
  return buf.view(which * e, {s_.B, s_.keys(), s_.hk, s_.d});
}

void RingCore::pack_kv(const Tensor& k, const Tensor& v, Tensor& buf) {
  const int64_t e = s_.B * s_.keys() * s_.hk * s_.d;
  Tensor kd = kv_view(buf, 0), vd = kv_view(buf, 1);
  be_->copy_2d(kd, e, k, e, 1, e);
  be_->copy_2d(vd, e, v, e, 1, e);
}

int RingCore::resolve_hops(int hops) const {
  const int R = ring_->size();
  if (hops < 0) return R - 1;
  if (hops > R - 1)
    throw std::logic_error("ring core: hops=" + std::to_string(hops) + " exceeds R-1=" + std::to_string(R - 1));
  return hops;
}

void RingCore::setup(Backend& be, Communicator& ring, const RingCoreShape& s, BlockPositions block_pos,
                     BlockPositions key_pos) {
  setup_steps(be, ring.rank(), ring.size(), s, std::move(block_pos), std::move(key_pos));
  ring_ = &ring;
  if (ring.size() > 1) {
    const int64_t kv = 2 * s.B * s.keys() * s.hk * s.d;
    for (Tensor& t : kv_) t = be.alloc({kv}, s.dtype, MemKind::comm);
    for (Tensor& t : acc_) t = be.alloc({kv}, DType::f32, MemKind::comm);
    const int64_t qn = s.B * s.n * s.hq * s.d, part = qn + s.B * s.hq * s.n;
    if (s.pass_q || s.pass_q_a2a)
      for (Tensor& t : qbuf_) t = be.alloc({qn}, s.dtype, MemKind::comm);
    if (s.pass_q)
      for (Tensor& t : part_) t = be.alloc({part}, DType::f32, MemKind::comm);
    if (s.pass_q_a2a) {
      a2a_send_ = be.alloc({ring.size() * part}, DType::f32, MemKind::comm);
      a2a_recv_ = be.alloc({ring.size() * part}, DType::f32, MemKind::comm);
      back_.resize(size_t(ring.size()));
    }
  }
}

Tensor RingCore::part_o(const Tensor& buf) const { return buf.view(0, {s_.B, s_.n, s_.hq, s_.d}); }
Tensor RingCore::part_lse(const Tensor& buf) const {
  return buf.view(s_.B * s_.n * s_.hq * s_.d, {s_.B, s_.hq, s_.n});
}

void RingCore::setup_steps(Backend& be, int position, int R, const RingCoreShape& s, BlockPositions block_pos,
                           BlockPositions key_pos) {
  be_ = &be;
  ring_ = nullptr;
  s_ = s;
  block_pos_ = std::move(block_pos);
  key_pos_ = key_pos ? std::move(key_pos) : block_pos_;
  me_ = position;
  lse_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
  delta_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
  if (R > 1) {
    o_blk_ = be.alloc({s.B, s.n, s.hq, s.d}, s.dtype, MemKind::activations);
    lse_blk_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
    if (s.dtype != DType::f32) {
      o_acc32_ = be.alloc({s.B, s.n, s.hq, s.d}, DType::f32, MemKind::activations);
      o_blk32_ = be.alloc({s.B, s.n, s.hq, s.d}, DType::f32, MemKind::activations);
    }
  }
}

// Every buffer is a Tensor member: a fresh core frees them (tests reuse one core object).
void RingCore::teardown() { *this = RingCore(); }

// ---- steps ------------------------------------------------------------------------------------------

RingCore::Hop RingCore::post_hop(Communicator& c, const Tensor& send, int to, Tensor& recv, int from, int tag) {
  Hop h;
  h.recv = c.irecv(recv, from, tag);
  h.send = c.isend(send, to, tag);
  return h;
}

void RingCore::wait_hop(Communicator& c, Hop& h) {
  c.wait(h.recv);
  c.wait(h.send);
}

void RingCore::fwd_begin() { have_ = false; }

void RingCore::fwd_block(const Tensor& q, const Tensor& kv, int owner, Tensor& o) {
  fwd_keys(q, kv_view(kv, 0), kv_view(kv, 1), key_pos_(owner), o);
}

void RingCore::fwd_keys(const Tensor& q, const Tensor& kb, const Tensor& vb, const Positions& kpos, Tensor& o) {
  Backend& b = *be_;
  AttnShape a = attn_shape();
  a.nk = kb.shape.at(1);
  const Positions qpos = block_pos_(me_);
  if (invisible(a, qpos, kpos)) return;
  const bool f32 = s_.dtype == DType::f32;
  if (!have_) {  // the first visible block writes the running result directly
    if (f32 || o_acc32_.empty()) {
      b.attn_fwd(a, q, kb, vb, qpos, kpos, o, lse_);
    } else {
      b.attn_fwd(a, q, kb, vb, qpos, kpos, o_blk_, lse_);
      b.convert(o_acc32_, o_blk_);
    }
    have_ = true;
    return;
  }
  b.attn_fwd(a, q, kb, vb, qpos, kpos, o_blk_, lse_blk_);
  if (f32) {
    b.attn_merge(a, o, lse_, o_blk_, lse_blk_);
  } else {  // merged in float32: a bf16 running output would round at every merge
    b.convert(o_blk32_, o_blk_);
    b.attn_merge(a, o_acc32_, lse_, o_blk32_, lse_blk_);
  }
}

void RingCore::fwd_end(Tensor& o) {
  Backend& b = *be_;
  // Unreachable for the strategies here (the diagonal block is always visible), but a row set
  // that sees no key at all is o = 0, lse = -inf by the kernels' contract.
  if (!have_) {
    b.fill(o, 0.0f);
    b.fill(lse_, -std::numeric_limits<float>::infinity());
    return;
  }
  if (s_.dtype != DType::f32 && !o_acc32_.empty()) b.convert(o, o_acc32_);  // once, at the end
}

void RingCore::bwd_begin(const Tensor& o, const Tensor& dout, Tensor& dq) {
  be_->attn_bwd_delta(attn_shape(), o, dout, delta_);
  be_->fill(dq, 0.0f);
}

void RingCore::bwd_block(const Tensor& q, const Tensor& kv, int owner, const Tensor& dout, Tensor& dq,
                         Tensor& acc) {
  Backend& b = *be_;
  const AttnShape a = attn_shape();
  const Positions qpos = block_pos_(me_), kpos = block_pos_(owner);
  b.fill(acc, 0.0f);
  if (invisible(a, qpos, kpos)) return;
  Tensor dkb = kv_view(acc, 0), dvb = kv_view(acc, 1);
  b.attn_bwd(a, q, kv_view(kv, 0), kv_view(kv, 1), dout, lse_, delta_, qpos, kpos, dq, dkb, dvb);
}

void RingCore::bwd_keys(const Tensor& q, const Tensor& kb, const Tensor& vb, const Positions& kpos, const Tensor& dout,
                        Tensor& dq, Tensor& dk, Tensor& dv) {
  AttnShape a = attn_shape();
  a.nk = kb.shape.at(1);
  const Positions qpos = block_pos_(me_);
  if (invisible(a, qpos, kpos)) return;
  be_->attn_bwd(a, q, kb, vb, dout, lse_, delta_, qpos, kpos, dq, dk, dv);
}

// ---- the ring -----------------------------------------------------------------------------------------

void RingCore::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, int hops) {
  Backend& b = *be_;
  Communicator& c = *ring_;
  const int R = c.size(), me = c.rank(), h = resolve_hops(hops);
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  fwd_begin();
  if (h == 0) {  // this rank's own block only: nothing travels
    b.attn_fwd(attn_shape(), q, k, v, block_pos_(me), key_pos_(me), o, lse_);
    return;
  }
  pack_kv(k, v, kv_[0]);
  for (int i = 0; i <= h; ++i) {
    Tensor& cur = kv_[i % 2];
    Hop hop;
    if (i < h) hop = post_hop(c, cur, next, kv_[(i + 1) % 2], prev, kTagFwdKV);  // travels during the compute
    fwd_block(q, cur, (me - i + R) % R, o);  // block i hops old comes from rank me-i
    if (i < h) wait_hop(c, hop);
  }
  fwd_end(o);
}

void RingCore::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                        const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, int hops) {
  Backend& b = *be_;
  Communicator& c = *ring_;
  const int R = c.size(), me = c.rank(), h = resolve_hops(hops);
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  const AttnShape a = attn_shape();
  if (s_.keys() != s_.n) throw std::logic_error("ring core: backward needs as many keys as queries per rank (no cache)");
  bwd_begin(o, dout, dq);
  if (h == 0) {
    const Positions qpos = block_pos_(me);
    b.fill(dk, 0.0f);
    b.fill(dv, 0.0f);
    b.attn_bwd(a, q, k, v, dout, lse_, delta_, qpos, qpos, dq, dk, dv);
    return;
  }
  // Step i: this rank holds block j = me-i (its K,V, and in acc_[2] the dK,dV accumulated by the
  // i ranks before it). It computes its own contribution into a scratch (acc_[i%2]) while that
  // accumulator is still arriving, then adds it in and sends the sum on: to the next rank while
  // the block travels on, and after the last step (i = h) back to the block's owner me-h (for
  // the full ring, h = R-1, that is the next rank). What arrives last, from rank me+h, is this
  // rank's own block with every rank's contribution.
  pack_kv(k, v, kv_[0]);
  Tensor& incoming = acc_[2];
  Hop acc_hop;
  for (int i = 0; i <= h; ++i) {
    Tensor& cur = kv_[i % 2];
    Hop hop;
    if (i < h) hop = post_hop(c, cur, next, kv_[(i + 1) % 2], prev, kTagBwdKV);
    Tensor& scratch = acc_[i % 2];  // its send (step i-2) was waited for at step i-1
    bwd_block(q, cur, (me - i + R) % R, dout, dq, scratch);
    if (i > 0) {
      c.wait(acc_hop.recv);
      b.add(scratch, scratch, incoming);
      c.wait(acc_hop.send);  // frees acc_[(i-1)%2] for step i+1
    }
    const int to = i < h ? next : (me - h + R) % R, from = i < h ? prev : (me + h) % R;
    acc_hop = post_hop(c, scratch, to, incoming, from, kTagBwdAcc);
    if (i < h) wait_hop(c, hop);
  }
  c.wait(acc_hop.recv);  // this rank's own block, with every rank's contribution
  const int64_t e = s_.B * s_.n * s_.hk * s_.d;
  b.copy_2d(dk, e, kv_view(incoming, 0), e, 1, e);
  b.copy_2d(dv, e, kv_view(incoming, 1), e, 1, e);
  c.wait(acc_hop.send);
}

void RingCore::forward_pass_q(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, int hops) {
  Backend& b = *be_;
  Communicator& c = *ring_;
  const int R = c.size(), me = c.rank(), h = resolve_hops(hops);
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  const AttnShape a = attn_shape();
  const Positions kpos = key_pos_(me);
  if (h == 0) {  // this rank's own block only: nothing travels
    b.attn_fwd(a, q, k, v, block_pos_(me), kpos, o, lse_);
    return;
  }
  if (qbuf_[0].empty()) throw std::logic_error("ring core: forward_pass_q needs setup() with pass_q");
  const bool f32 = s_.dtype == DType::f32;
  const int64_t qn = s_.B * s_.n * s_.hq * s_.d, part_n = qn + s_.B * s_.hq * s_.n;
  // Step i: this rank holds the Q block of rank j = me+i (for i > 0 in qbuf_, arrived from the
  // next rank) and in part_[2] the partial the ranks before it on the Q's path built. It
  // computes its own K,V's contribution into a scratch partial while that partial is still
  // arriving (the same overlap as backward()'s dK,dV accumulators), merges the arrived one in,
  // and sends the sum on with the Q: to the previous rank, and after the last step (i = h) back
  // to the owner j. Step 0 is the owner's diagonal block. What arrives last, from rank me-h, is
  // this rank's own Q block's partial with every rank's contribution.
  b.copy_2d(qbuf_[0], qn, q, qn, 1, qn);
  Tensor& incoming = part_[2];
  Hop part_hop;
  for (int i = 0; i <= h; ++i) {
    const Tensor& cur = i == 0 ? q : qbuf_[i % 2];
    Hop hop;
    // Step 0 sends qbuf_[0] (a copy of q: q itself is the caller's and const) so that the buffer
    // the next step receives into, qbuf_[1], is never the one in flight.
    if (i < h) hop = post_hop(c, qbuf_[i % 2], prev, qbuf_[(i + 1) % 2], next, kTagQ);
    const int j = (me + i) % R;
    const Positions qpos = block_pos_(j);
    Tensor& scratch = part_[i % 2];  // its send (step i-2) was waited for at step i-1
    Tensor so = part_o(scratch), sl = part_lse(scratch);
    const bool visible = i == 0 || !invisible(a, qpos, kpos);
    if (visible) {
      if (f32) {
        b.attn_fwd(a, cur, k, v, qpos, kpos, so, sl);
      } else {  // the kernel writes the run dtype; the partial is float32
        b.attn_fwd(a, cur, k, v, qpos, kpos, o_blk_, sl);
        b.convert(so, o_blk_);
      }
    }
    if (i > 0) {
      c.wait(part_hop.recv);
      if (visible) b.attn_merge(a, so, sl, part_o(incoming), part_lse(incoming));
      else b.copy_2d(scratch, part_n, incoming, part_n, 1, part_n);  // nothing to add: pass it on
      c.wait(part_hop.send);  // frees part_[(i-1)%2] for step i+1
    }
    const int to = i < h ? prev : (me + h) % R, from = i < h ? next : (me - h + R) % R;
    part_hop = post_hop(c, scratch, to, incoming, from, kTagPartial);
    if (i < h) wait_hop(c, hop);
  }
  c.wait(part_hop.recv);  // this rank's own Q block, with every rank's contribution
  const int64_t rows = s_.B * s_.hq * s_.n;
  b.copy_2d(lse_, rows, part_lse(incoming), rows, 1, rows);
  if (f32) b.copy_2d(o, qn, part_o(incoming), qn, 1, qn);
  else b.convert(o, part_o(incoming));
  c.wait(part_hop.send);
}

void RingCore::forward_pass_q_a2a(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, int hops) {
  Backend& b = *be_;
  Communicator& c = *ring_;
  const int R = c.size(), me = c.rank(), h = resolve_hops(hops);
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  const AttnShape a = attn_shape();
  if (h == 0) {  // this rank's own block only: nothing travels
    b.attn_fwd(a, q, k, v, block_pos_(me), key_pos_(me), o, lse_);
    return;
  }
  if (a2a_send_.empty()) throw std::logic_error("ring core: forward_pass_q_a2a needs setup() with pass_q_a2a");
  const int64_t qn = s_.B * s_.n * s_.hq * s_.d, part_n = partial_elems();
  auto chunk = [&](const Tensor& buf, int j) { return buf.view(int64_t(j) * part_n, {part_n}); };
  // The ring: at step i this rank holds the Q block of position me+i and writes its K,V's
  // contribution into the send chunk for that owner (chunk (me+i) mod R, where an all-to-all
  // takes it), while the next Q block arrives.
  b.copy_2d(qbuf_[0], qn, q, qn, 1, qn);
  for (int i = 0; i <= h; ++i) {
    const Tensor& cur = i == 0 ? q : qbuf_[i % 2];
    Hop hop;
    if (i < h) hop = post_hop(c, qbuf_[i % 2], prev, qbuf_[(i + 1) % 2], next, kTagQ);
    const int j = (me + i) % R;
    Tensor part = chunk(a2a_send_, j);
    q_block(cur, j, k, v, part);
    if (i < h) wait_hop(c, hop);
  }
  // The return: every partial to its owner in one exchange. Chunk j of the receive buffer is the
  // partial position j computed for this rank's Q block (j = me: its own, already here).
  if (h == R - 1) {
    c.all_to_all(a2a_send_, a2a_recv_);
  } else {
    for (int i = 1; i <= h; ++i) {
      Tensor recv = chunk(a2a_recv_, (me - i + R) % R);
      back_[size_t(i)] = post_hop(c, chunk(a2a_send_, (me + i) % R), (me + i) % R, recv, (me - i + R) % R, kTagPartial);
    }
    for (int i = 1; i <= h; ++i) wait_hop(c, back_[size_t(i)]);
  }
  // Merge: the own partial first, then those of the positions the Q block visited (me-1 .. me-h).
  Tensor acc = chunk(a2a_send_, me);
  Tensor ao = part_o(acc), al = part_lse(acc);
  for (int i = 1; i <= h; ++i) {
    const Tensor in = chunk(a2a_recv_, (me - i + R) % R);
    b.attn_merge(a, ao, al, part_o(in), part_lse(in));
  }
  pass_q_end(acc, o);
}

void RingCore::q_block(const Tensor& q, int owner, const Tensor& k, const Tensor& v, Tensor& part) {
  Backend& b = *be_;
  const AttnShape a = attn_shape();
  Tensor so = part_o(part), sl = part_lse(part);
  const Positions qpos = block_pos_(owner), kpos = key_pos_(me_);
  if (invisible(a, qpos, kpos)) {  // nothing to add: the empty partial
    b.fill(so, 0.0f);
    b.fill(sl, -std::numeric_limits<float>::infinity());
    return;
  }
  if (s_.dtype == DType::f32) {
    b.attn_fwd(a, q, k, v, qpos, kpos, so, sl);
  } else {  // the kernel writes the run dtype; the partial is float32
    b.attn_fwd(a, q, k, v, qpos, kpos, o_blk_, sl);
    b.convert(so, o_blk_);
  }
}

void RingCore::merge_partial(Tensor& part, const Tensor& in) {
  Tensor so = part_o(part), sl = part_lse(part);
  be_->attn_merge(attn_shape(), so, sl, part_o(in), part_lse(in));
}

void RingCore::pass_q_end(const Tensor& part, Tensor& o) {
  Backend& b = *be_;
  const int64_t qn = s_.B * s_.n * s_.hq * s_.d, rows = s_.B * s_.hq * s_.n;
  b.copy_2d(lse_, rows, part_lse(part), rows, 1, rows);
  if (s_.dtype == DType::f32) b.copy_2d(o, qn, part_o(part), qn, 1, qn);
  else b.convert(o, part_o(part));
}

int64_t RingCore::activation_bytes(const RingCoreShape& s, int R) {
  const int64_t es = int64_t(dtype_size(s.dtype)), rows = s.B * s.hq * s.n;
  int64_t bytes = 2 * rows * 4;  // lse, delta
  if (R > 1) {
    const int64_t kv = 2 * s.B * s.keys() * s.hk * s.d, o = s.B * s.n * s.hq * s.d;
    bytes += o * es + rows * 4;                      // block o, lse
    if (s.dtype != DType::f32) bytes += 2 * o * 4;   // float32 running and block output
    bytes += 2 * kv * es + 3 * kv * 4;               // k|v double buffer, dk|dv accumulators
    if (s.pass_q) bytes += 2 * o * es + 3 * (o + rows) * 4;  // q double buffer, o|lse partials
    if (s.pass_q_a2a) bytes += 2 * o * es + 2 * int64_t(R) * (o + rows) * 4;  // q double buffer, R partials sent and received
  }
  return bytes;
}

CommPrediction RingCore::predicted_bytes(int64_t tokens, int64_t hk, int R, int64_t elem, int64_t acc,
                                         int hops, const std::string& level) {
  const int h = hops < 0 ? R - 1 : hops;
  CommPrediction p;
  if (R <= 1 || h == 0) return p;
  const int64_t kv = elem * tokens * 2 * hk * h, acc_block = acc * tokens * 2 * hk;
  // K,V go h hops to the next rank, both passes; the dK,dV accumulators travel with them and
  // are then sent back to their owner, h places before (for the full ring: the next rank).
  p.add(level, Phase::fwd, 1, kv).add(level, Phase::bwd, 1, kv + acc_block * h);
  return p.add(level, Phase::bwd, -h, acc_block);
}

CommPrediction RingCore::predicted_bytes_pass_q(int64_t tokens_q, int64_t hq, int64_t heads, int R, int64_t elem,
                                                int64_t acc, int hops, const std::string& level) {
  const int h = hops < 0 ? R - 1 : hops;
  CommPrediction p;
  if (R <= 1 || h == 0) return p;
  // Q moves against the ring's K,V direction (to the previous rank); the partial rides along
  // with it on every hop and one last send returns it to its owner, h places ahead.
  const int64_t q = elem * tokens_q * hq, partial = partial_bytes(tokens_q, hq, heads, acc);
  p.add(level, Phase::fwd, -1, (q + partial) * h);
  return p.add(level, Phase::fwd, h, partial);
}

CommPrediction RingCore::predicted_bytes_pass_q_a2a(int64_t tokens_q, int64_t hq, int64_t heads, int R, int64_t elem,
                                                    int64_t acc, int hops, const std::string& level) {
  const int h = hops < 0 ? R - 1 : hops;
  CommPrediction p;
  if (R <= 1 || h == 0) return p;
  // Q moves against the ring's K,V direction (to the previous rank); each partial goes once to its
  // owner, i places ahead for the Q block of position me+i.
  const int64_t q = elem * tokens_q * hq, partial = partial_bytes(tokens_q, hq, heads, acc);
  p.add(level, Phase::fwd, -1, q * h);
  for (int i = 1; i <= h; ++i) p.add(level, Phase::fwd, i, partial);
  return p;
}

// The farthest hop k (1..R-1) at which some rank's queries, those of ring rank r, meet the keys of
// ring rank r - k: pass-KV's K_eff (the K,V of rank r-k visit rank r) and, re-indexed, pass-Q's
// (the queries of rank r+k visit rank r's keys). 0 if none.
static int farthest_visible_hop(int R, const BlockPositions& q_pos, const BlockPositions& k_pos, const LayerShape& s) {
  if (R <= 1) return 0;
  AttnShape a;
  a.causal = s.causal;
  a.window = s.window;
  a.docs = s.docs;
  const AttnMask mask = a.mask();
  std::vector<Positions> qp, kp;
  for (int j = 0; j < R; ++j) {
    qp.push_back(q_pos(j));
    kp.push_back(k_pos(j));
  }
  for (int k = R - 1; k >= 1; --k)
    for (int r = 0; r < R; ++r)
      if (any_visible_pair(qp[size_t(r)], kp[size_t((r - k + R) % R)], mask)) return k;
  return 0;
}

int RingCore::effective_hops(int R, const BlockPositions& block_pos, const LayerShape& s) {
  return farthest_visible_hop(R, block_pos, block_pos, s);
}

int RingCore::effective_hops(int R, const BlockPositions& q_pos, const BlockPositions& k_pos, const LayerShape& s) {
  return farthest_visible_hop(R, q_pos, k_pos, s);
}

int RingCore::effective_hops_pass_q(int R, const BlockPositions& q_pos, const BlockPositions& k_pos,
                                    const LayerShape& s) {
  return farthest_visible_hop(R, q_pos, k_pos, s);
}

}  // namespace cpbench
