#include "bench/parts/ring_core.h"

#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "bench/parts/layout.h"

namespace cpbench {

// One tag per message stream (RingCore::kTag*). K,V of the backward and the dK,dV accumulators
// arrive from the same neighbour at the same time (and have the same size in fp32 runs), so they
// must not share a tag; within a stream, MPI's non-overtaking order matches step i's message to
// step i's recv.

namespace {
// A block none of whose pairs is visible (causal, window, documents) contributes nothing:
// skipping it (instead of calling the kernel, which would skip its tiles anyway) also skips the
// merge. any_visible_pair is closed-form, not a scan.
bool invisible(const AttnShape& a, const Positions& qpos, const Positions& kpos) {
  return !any_visible_pair(qpos, kpos, a.mask());
}
}  // namespace

AttnShape RingCore::attn_shape() const {
  AttnShape a;
  a.B = s_.B; a.nq = s_.n; a.nk = s_.keys(); a.hq = s_.hq; a.hk = s_.hk; a.d = s_.d; a.d_v = s_.d_v; a.causal = s_.causal;
  a.rep = s_.rep; a.head0 = s_.head0;
  a.window = s_.window; a.docs = s_.docs;
  return a;
}

Tensor RingCore::kv_view(const Tensor& buf, int which) const {
  if (which == 0) return buf.view(0, {s_.B, s_.keys(), s_.hk, s_.d});
  return buf.view(s_.k_elems(), {s_.B, s_.keys(), s_.hk, s_.vdim()});  // v after k: d_v wide
}

void RingCore::pack_kv(const Tensor& k, const Tensor& v, Tensor& buf) {
  const int64_t ek = s_.k_elems(), ev = s_.v_elems();
  Tensor kd = kv_view(buf, 0), vd = kv_view(buf, 1);
  be_->copy_2d(kd, ek, k, ek, 1, ek);
  be_->copy_2d(vd, ev, v, ev, 1, ev);
}

void RingCore::pack_block(const Tensor& k, const Tensor& v, Tensor& buf) {
  if (s_.encoded()) {  // --comm-dtype: encoded here, by the owner, once per pass
    pack_kv(k, v, own_kv_);
    encode_kv_transit(*be_, s_.transit, s_.transit_scaling, own_kv_, buf);
    return;
  }
  if (!latent_.on()) return pack_kv(k, v, buf);
  own_k_ = k;
  own_v_ = v;
  const int64_t e = s_.travel_elems();
  be_->copy_2d(buf, e, latent_.local, e, 1, e);
}

int RingCore::resolve_hops(int hops) const {
  const int R = ring_->size();
  if (hops < 0) return R - 1;
  if (hops > R - 1)
    throw std::logic_error("ring core: hops=" + std::to_string(hops) + " exceeds R-1=" + std::to_string(R - 1));
  return hops;
}

void RingCore::setup(Backend& be, Communicator& ring, const RingCoreShape& s, BlockPositions block_pos,
                     BlockPositions key_pos, const LatentBlock& latent) {
  setup_steps(be, ring.rank(), ring.size(), s, std::move(block_pos), std::move(key_pos), latent);
  ring_ = &ring;
  if (ring.size() > 1) {
    const int64_t kv = s.travel_elems();
    for (Tensor& t : kv_) t = alloc_kv_travel();  // (--comm-dtype: encoded; setup_steps holds the decoded)
    if (s.q_encoded()) q_dec_ = be.alloc({s.q_elems()}, s.dtype, MemKind::activations);
    for (Tensor& t : acc_) t = be.alloc({kv}, s.acc_dtype, MemKind::comm);
    ring_travel(s.travel).setup(*this, travel_, ring.size());
  }
}

bool RingCore::any_visible(const Positions& qpos, const Positions& kpos) const {
  return !invisible(attn_shape(), qpos, kpos);
}

Tensor RingCore::part_o(const Tensor& buf) const { return buf.view(0, {s_.B, s_.n, s_.hq, s_.vdim()}); }
Tensor RingCore::part_lse(const Tensor& buf) const {
  return lse_view(buf, s_.o_elems(), s_.B * s_.hq * s_.n, {s_.B, s_.hq, s_.n});
}

Tensor RingCore::lse_view(const Tensor& buf, int64_t offset, int64_t rows, std::vector<int64_t> shape) {
  if (buf.dtype == DType::f32) return buf.view(offset, std::move(shape));
  // A 16-bit partial: the float32 lse in 2*rows elements (an even offset: 4-byte aligned).
  if (offset % 2 != 0) throw std::logic_error("partial: a 16-bit partial's lse at an odd offset (an odd head dim)");
  Tensor l = buf.view(offset, {rows * 4 / int64_t(dtype_size(buf.dtype))});
  l.dtype = DType::f32;
  l.shape = std::move(shape);
  return l;
}

void RingCore::setup_steps(Backend& be, int position, int R, const RingCoreShape& s, BlockPositions block_pos,
                           BlockPositions key_pos, const LatentBlock& latent) {
  if ((s.latent > 0) != latent.on() ||
      (latent.on() && (latent.keys->width() != s.latent || s.travel != RingTravel::kv || latent.heads != s.hk)))
    throw std::logic_error("ring core: latent travel needs its LatentBlock of width s.latent for its hk heads and K,V travel");
  latent_ = latent;
  if (latent.on()) {  // one received block, expanded, and its gradients (the own block's too: bwd_latent)
    lk_ = be.alloc({s.B, s.keys(), s.hk, s.d}, s.dtype, MemKind::activations);
    lv_ = be.alloc({s.B, s.keys(), s.hk, s.vdim()}, s.dtype, MemKind::activations);
    ldk_ = be.alloc({s.B, s.keys(), s.hk, s.d}, DType::f32, MemKind::activations);
    ldv_ = be.alloc({s.B, s.keys(), s.hk, s.vdim()}, DType::f32, MemKind::activations);
  }
  be_ = &be;
  ring_ = nullptr;
  s_ = s;
  block_pos_ = std::move(block_pos);
  key_pos_ = key_pos ? std::move(key_pos) : block_pos_;
  me_ = position;
  lse_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
  delta_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
  if (s.encoded()) {  // --comm-dtype: this rank's own k|v as formed, and a received block decoded
    if (s.latent > 0) throw std::logic_error("ring core: --comm-dtype encodes k|v blocks, not a latent");
    own_kv_ = be.alloc({s.kv_elems()}, s.dtype, MemKind::activations);
    dec_ = be.alloc({s.kv_elems()}, s.dtype, MemKind::activations);
  }
  if (s.acc_dtype != DType::f32) {  // the float32 side of bf16 accumulators (acc_sum, add_arrived)
    const int64_t kv = s.travel_elems();
    for (Tensor& t : acc32_) t = be.alloc({kv}, DType::f32, MemKind::activations);
  }
  if (R > 1) {
    o_blk_ = be.alloc({s.B, s.n, s.hq, s.vdim()}, s.dtype, MemKind::activations);
    lse_blk_ = be.alloc({s.B, s.hq, s.n}, DType::f32, MemKind::activations);
    if (s.running_f32()) {
      o_acc32_ = be.alloc({s.B, s.n, s.hq, s.vdim()}, DType::f32, MemKind::activations);
      o_blk32_ = be.alloc({s.B, s.n, s.hq, s.vdim()}, DType::f32, MemKind::activations);
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

Tensor RingCore::alloc_travel(int64_t elems, bool enc) {
  const DType td = enc ? kv_transit_dtype(s_.transit) : s_.dtype;
  return be_->alloc({s_.travel_bytes(elems, enc) / int64_t(dtype_size(td))}, td, MemKind::comm);
}

Tensor RingCore::alloc_kv_travel() { return alloc_travel(s_.travel_elems(), s_.encoded()); }
Tensor RingCore::alloc_q_travel() { return alloc_travel(s_.q_elems(), s_.q_encoded()); }

void RingCore::q_depart(const Tensor& q, Tensor& buf) {
  if (s_.q_encoded()) return encode_kv_transit(*be_, s_.transit, s_.transit_scaling, q, buf);
  const int64_t qn = s_.q_elems();
  be_->copy_2d(buf, qn, q, qn, 1, qn);
}

const Tensor& RingCore::q_in_hand(const Tensor& arrived) {
  if (!s_.q_encoded()) return arrived;
  decode_kv_transit(*be_, s_.transit, s_.transit_scaling, arrived, q_dec_);
  return q_dec_;
}

int64_t RingCore::q_travel_bytes(const RingCoreShape& s, int buffers) {
  // in transit, and under --comm-dtype one decoded (q_dec_)
  return buffers * s.q_block_bytes() + (s.q_encoded() ? s.q_elems() * int64_t(dtype_size(s.dtype)) : 0);
}

void RingCore::fwd_begin() { have_ = false; }

// --comm-dtype: this rank's own block as formed, another's decoded (once per block in hand; not
// when no query here sees it).
const Tensor& RingCore::block_in_hand(const Tensor& kv, int owner) {
  if (!s_.encoded()) return kv;
  if (owner == me_) return own_kv_;
  if (invisible(attn_shape(), block_pos_(me_), key_pos_(owner))) return own_kv_;  // (skipped by the caller)
  decode_kv_transit(*be_, s_.transit, s_.transit_scaling, kv, dec_);
  return dec_;
}

void RingCore::fwd_block(const Tensor& q, const Tensor& kv_in, int owner, Tensor& o) {
  const Tensor& kv = block_in_hand(kv_in, owner);
  if (!latent_.on()) return fwd_keys(q, kv_view(kv, 0), kv_view(kv, 1), key_pos_(owner), o);
  Tensor kb, vb;  // latent travel: up-projected here (the own block: the k, v its caller expanded)
  if (latent_block(kv, owner, kb, vb)) fwd_keys(q, kb, vb, key_pos_(owner), o);
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
  if (f32 || o_acc32_.empty()) {  // (--partial-dtype bf16: in the run dtype, rounded at every merge)
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

void RingCore::bwd_block(const Tensor& q, const Tensor& kv_in, int owner, const Tensor& dout, Tensor& dq,
                         Tensor& acc) {
  if (latent_.on()) return bwd_latent(q, kv_in, owner, dout, dq, acc);
  const Tensor& kv = block_in_hand(kv_in, owner);
  Backend& b = *be_;
  const AttnShape a = attn_shape();
  const Positions qpos = block_pos_(me_), kpos = block_pos_(owner);
  b.fill(acc, 0.0f);
  if (invisible(a, qpos, kpos)) return;
  Tensor dkb = kv_view(acc, 0), dvb = kv_view(acc, 1);
  b.attn_bwd(a, q, kv_view(kv, 0), kv_view(kv, 1), dout, lse_, delta_, qpos, kpos, dq, dkb, dvb);
}

bool RingCore::latent_block(const Tensor& lat, int owner, Tensor& kb, Tensor& vb) {
  if (invisible(attn_shape(), block_pos_(me_), key_pos_(owner))) return false;
  if (owner == me_) {  // the caller expanded this rank's own block already
    kb = own_k_;
    vb = own_v_;
    return true;
  }
  latent_.expand(*be_, lat, lk_, lv_, 0.0);
  kb = lk_;
  vb = lv_;
  return true;
}

void RingCore::bwd_latent(const Tensor& q, const Tensor& lat, int owner, const Tensor& dout, Tensor& dq, Tensor& acc) {
  Backend& b = *be_;
  b.fill(acc, 0.0f);
  Tensor kb, vb;
  if (!latent_block(lat, owner, kb, vb)) return;
  b.fill(ldk_, 0.0f);
  b.fill(ldv_, 0.0f);
  b.attn_bwd(attn_shape(), q, kb, vb, dout, lse_, delta_, block_pos_(me_), block_pos_(owner), dq, ldk_, ldv_);
  // The owner's own block is the layer's backward GEMMs (model FLOPs); the others' are hardware only.
  latent_.contract(b, lat, ldk_, ldv_, acc, owner == me_ ? 1.0 : 0.0);
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
  ring_travel(s_.travel).forward(*this, travel_, q, k, v, o, hops);
}

void RingCore::forward_kv(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, int hops) {
  Backend& b = *be_;
  Communicator& c = *ring_;
  const int R = c.size(), me = c.rank(), h = resolve_hops(hops);
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  fwd_begin();
  if (h == 0) {  // this rank's own block only: nothing travels
    b.attn_fwd(attn_shape(), q, k, v, block_pos_(me), key_pos_(me), o, lse_);
    return;
  }
  pack_block(k, v, kv_[0]);
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
    if (latent_.on())  // dk, dv: scratch here
      latent_.contract(b, latent_.local, dk, dv, latent_.grad, 1.0);
    return;
  }
  // Step i: this rank holds block j = me-i (its K,V, and in acc_[2] the dK,dV accumulated by the
  // i ranks before it). It computes its own contribution into a scratch (acc_[i%2]) while that
  // accumulator is still arriving, then adds it in and sends the sum on: to the next rank while
  // the block travels on, and after the last step (i = h) back to the block's owner me-h (for
  // the full ring, h = R-1, that is the next rank). What arrives last, from rank me+h, is this
  // rank's own block with every rank's contribution.
  // (--acc-dtype bf16: the contribution and the sum in float32, rounded once into the buffer that
  // travels: acc_sum, add_arrived, store_acc.)
  pack_block(k, v, kv_[0]);
  Tensor& incoming = acc_[2];
  Hop acc_hop;
  for (int i = 0; i <= h; ++i) {
    Tensor& cur = kv_[i % 2];
    Hop hop;
    if (i < h) hop = post_hop(c, cur, next, kv_[(i + 1) % 2], prev, kTagBwdKV);
    Tensor& scratch = acc_[i % 2];  // its send (step i-2) was waited for at step i-1
    Tensor sum = acc_sum(scratch);
    bwd_block(q, cur, (me - i + R) % R, dout, dq, sum);
    if (i > 0) {
      c.wait(acc_hop.recv);
      add_arrived(sum, incoming);
      c.wait(acc_hop.send);  // frees acc_[(i-1)%2] for step i+1
    }
    store_acc(scratch, sum);
    const int to = i < h ? next : (me - h + R) % R, from = i < h ? prev : (me + h) % R;
    acc_hop = post_hop(c, scratch, to, incoming, from, kTagBwdAcc);
    if (i < h) wait_hop(c, hop);
  }
  c.wait(acc_hop.recv);  // this rank's own block, with every rank's contribution
  acc_to_grads(incoming, dk, dv);
  c.wait(acc_hop.send);
}

Tensor RingCore::acc_sum(Tensor& acc) { return s_.acc_dtype == DType::f32 ? acc : acc32_[0].view(0, {acc.numel()}); }

void RingCore::add_arrived(Tensor& sum, const Tensor& arrived) {
  if (s_.acc_dtype == DType::f32) {
    be_->add(sum, sum, arrived);
    return;
  }
  Tensor wide = acc32_[1].view(0, {arrived.numel()});
  be_->convert(wide, arrived);
  be_->add(sum, sum, wide);
}

void RingCore::store_acc(Tensor& acc, const Tensor& sum) {
  if (s_.acc_dtype != DType::f32) be_->convert(acc, sum);
}

void RingCore::acc_to_grads(const Tensor& acc, Tensor& dk, Tensor& dv) {
  if (latent_.on()) {  // the latent's gradient, for the projections' backward (dk, dv are not formed)
    Tensor& g = latent_.grad;
    const int64_t e = s_.travel_elems();
    if (s_.acc_dtype == DType::f32) be_->copy_2d(g, e, acc, e, 1, e);
    else be_->convert(g, acc);
    return;
  }
  const int64_t ek = s_.k_elems(), ev = s_.v_elems();
  if (s_.acc_dtype == DType::f32) {
    be_->copy_2d(dk, ek, kv_view(acc, 0), ek, 1, ek);
    be_->copy_2d(dv, ev, kv_view(acc, 1), ev, 1, ev);
  } else {
    be_->convert(dk, kv_view(acc, 0));
    be_->convert(dv, kv_view(acc, 1));
  }
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
  if (so.dtype == s_.dtype) {  // the kernel writes the partial's dtype (fp32, or bf16 partials of a bf16 run)
    b.attn_fwd(a, q, k, v, qpos, kpos, so, sl);
  } else {  // the kernel writes the run dtype, converted to the partial's
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
  const int64_t qn = s_.o_elems(), rows = s_.B * s_.hq * s_.n;
  b.copy_2d(lse_, rows, part_lse(part), rows, 1, rows);
  if (o.dtype == part.dtype) b.copy_2d(o, qn, part_o(part), qn, 1, qn);
  else b.convert(o, part_o(part));
}

int64_t RingCore::activation_bytes(const RingCoreShape& s, int R) {
  const int64_t es = int64_t(dtype_size(s.dtype)), rows = s.B * s.hq * s.n;
  int64_t bytes = 2 * rows * 4;  // lse, delta
  if (s.acc_dtype != DType::f32) bytes += 2 * s.travel_elems() * 4;  // acc32_: contribution, widened sum
  if (R > 1) {
    const int64_t kv = s.travel_elems(), o = s.o_elems();
    bytes += o * es + rows * 4;                      // block o, lse
    if (s.running_f32()) bytes += 2 * o * 4;         // float32 running and block output
    bytes += 2 * s.kv_block_bytes() + 3 * kv * int64_t(dtype_size(s.acc_dtype));  // k|v double buffer, dk|dv accumulators
    bytes += ring_travel(s.travel).buffer_bytes(s, R);
  }
  if (s.encoded()) bytes += 2 * s.kv_elems() * es;  // --comm-dtype: this rank's own block as formed, one decoded
  if (s.latent > 0) bytes += s.kv_elems() * (es + 4);  // one block expanded (lk_, lv_), its dk, dv
  return bytes;
}

CommPrediction RingCore::predicted_bytes(int64_t tokens, int64_t kv_row, int R, int64_t elem, int64_t acc,
                                         int hops, const std::string& level, KvTransit transit, Fp8Scaling scaling) {
  const int h = hops < 0 ? R - 1 : hops;
  CommPrediction p;
  if (R <= 1 || h == 0) return p;
  const int64_t kv = kv_transit_bytes(tokens * kv_row, elem, transit, scaling) * h, acc_block = acc * tokens * kv_row;
  // K,V go h hops to the next rank, both passes; the dK,dV accumulators travel with them and
  // are then sent back to their owner, h places before (for the full ring: the next rank).
  p.add(level, Phase::fwd, 1, kv).add(level, Phase::bwd, 1, kv + acc_block * h);
  return p.add(level, Phase::bwd, -h, acc_block);
}

// ---- the kv travel policy (ring_travel.h): the core's own loops -------------------------------------

void travel_kv_setup(RingCore&, RingTravelBuffers&, int) {}  // the core's k|v and accumulator buffers

void travel_kv_forward(RingCore& core, RingTravelBuffers&, const Tensor& q, const Tensor& k, const Tensor& v,
                       Tensor& o, int hops) {
  core.forward_kv(q, k, v, o, hops);
}

CommPrediction travel_kv_bytes(const RingBlockSizes& b, int R, int64_t elem, int64_t acc, int hops,
                               const std::string& level) {
  return RingCore::predicted_bytes(b.tokens_kv, b.kv, R, elem, acc, hops, level, b.transit, b.scaling);
}

int64_t travel_kv_buffer_bytes(const RingCoreShape&, int) { return 0; }

// The farthest hop k (1..R-1) at which some rank's queries, those of ring rank r, meet the keys of
// ring rank r - k: pass-KV's K_eff (the K,V of rank r-k visit rank r) and, re-indexed, pass-Q's
// (the queries of rank r+k visit rank r's keys). 0 if none.
static int farthest_visible_hop(int R, const BlockPositions& q_pos, const BlockPositions& k_pos, const LayerShape& s) {
  if (R <= 1) return 0;
  const AttnMask mask = s.mask.attn();
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

}  // namespace cpbench
