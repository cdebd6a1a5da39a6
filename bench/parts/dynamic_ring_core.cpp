#include "bench/parts/dynamic_ring_core.h"

#include <algorithm>
#include <stdexcept>

namespace cpbench {

namespace {
// K,V blocks of both passes and the backward's accumulators: separate streams (ring_core.cpp).
constexpr int kTagFwdKV = 111, kTagBwdKV = 112, kTagBwdAcc = 113;
}  // namespace

void DynamicRingCore::setup(Backend& be, Communicator& cp, const RingCoreShape& s, const Positions& mine,
                            std::vector<DynamicRing> rings) {
  be_ = &be;
  cp_ = &cp;
  s_ = s;
  mine_ = mine;
  rings_ = std::move(rings);
  transfers_.clear();
  int64_t largest = 0;
  for (size_t r = 0; r < rings_.size(); ++r) {
    const DynamicRing& ring = rings_[r];
    if (ring.c < 2 || int64_t(ring.pos.size()) != ring.c || ring.member < 0 || ring.member >= ring.c)
      throw std::logic_error("dynamic ring core: ring " + std::to_string(r) + " is not a group of c >= 2 members");
    for (int hop = 1; hop < ring.c; ++hop) transfers_.push_back({int(r), hop});
    for (int m = 0; m < ring.c; ++m) largest = std::max(largest, ring.tokens(m));
  }
  // The steps on this rank's rows: positions `mine` whatever block the caller names.
  const Positions me = mine;
  steps_.setup_steps(be, 0, rings_.empty() ? 1 : 2, s, [me](int) { return me; });
  if (!transfers_.empty()) {
    const int64_t kv = s.B * std::max<int64_t>(largest, 1) * s.hk * (s.d + s.vdim());
    for (Tensor& t : kv_) t = be.alloc({kv}, s.dtype, MemKind::comm);
    for (Tensor& t : acc_) t = be.alloc({kv}, DType::f32, MemKind::comm);
  }
}

int64_t DynamicRingCore::comm_buffer_bytes(const RingCoreShape& s, int64_t max_block) {
  if (max_block <= 0) return 0;
  const int64_t kv = s.B * max_block * s.hk * (s.d + s.vdim());
  return 3 * kv * int64_t(dtype_size(s.dtype)) + 3 * kv * 4;
}

int DynamicRingCore::src_member(const Transfer& x) const {
  const DynamicRing& r = rings_[size_t(x.ring)];
  return (r.member - x.hop + r.c) % r.c;
}

Tensor DynamicRingCore::kv_half(const Tensor& buf, int64_t tokens, int which) const {
  const int64_t e = s_.B * tokens * s_.hk * s_.d;  // k's elements; v (d_v wide) follows
  if (which == 0) return buf.view(0, {s_.B, tokens, s_.hk, s_.d});
  return buf.view(e, {s_.B, tokens, s_.hk, s_.vdim()});
}

int64_t DynamicRingCore::kv_block_elems(int64_t tokens) const { return s_.B * tokens * s_.hk * (s_.d + s_.vdim()); }

void DynamicRingCore::pack_own(const Tensor& k, const Tensor& v, const DynamicRing& r, Tensor& buf) {
  // Batch row b's rows [offset, offset + n) of [B, n_all, hk, d] (v: d_v): one strided copy per tensor.
  const int64_t n = r.tokens(r.member), row = s_.hk * s_.d, vrow = int64_t(s_.hk) * s_.vdim();
  if (n == 0) return;
  Tensor kd = kv_half(buf, n, 0), vd = kv_half(buf, n, 1);
  const Tensor ks = k.view(r.offset * row, {k.numel() - r.offset * row});
  const Tensor vs = v.view(r.offset * vrow, {v.numel() - r.offset * vrow});
  be_->copy_2d(kd, n * row, ks, s_.n * row, s_.B, n * row);
  be_->copy_2d(vd, n * vrow, vs, s_.n * vrow, s_.B, n * vrow);
}

RingCore::Hop DynamicRingCore::post(size_t t, int send, int recv, int tag) {
  const Transfer& x = transfers_[t];
  const DynamicRing& r = rings_[size_t(x.ring)];
  const int64_t out = r.tokens((r.member - x.hop + 1 + r.c) % r.c), in = r.tokens(src_member(x));
  // A member holding no token of the ring's documents sends and receives nothing for it: every
  // rank knows every block's size from the layout, so both sides skip the same messages.
  RingCore::Hop h;
  if (in > 0) {
    Tensor rv = kv_[recv].view(0, {kv_block_elems(in)});
    h.recv = cp_->irecv(rv, prev_rank(r), tag);
  }
  if (out > 0) h.send = cp_->isend(kv_[send].view(0, {kv_block_elems(out)}), next_rank(r), tag);
  return h;
}

void DynamicRingCore::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o) {
  steps_.fwd_begin();
  if (transfers_.empty()) {  // every document of this rank is local
    steps_.fwd_keys(q, k, v, mine_, o);
    steps_.fwd_end(o);
    return;
  }
  pack_own(k, v, rings_[0], kv_[0]);
  RingCore::Hop hop = post(0, 0, 1, kTagFwdKV);
  int cur = 1;
  steps_.fwd_keys(q, k, v, mine_, o);  // every document's own part, while the first block travels
  for (size_t t = 0; t < transfers_.size(); ++t) {
    steps_.wait_hop(*cp_, hop);
    const Transfer& x = transfers_[t];
    int next = cur;
    if (t + 1 < transfers_.size()) {
      const Transfer& y = transfers_[t + 1];
      if (y.ring == x.ring) {  // the block in hand goes on
        next = (cur + 1) % 3;
        hop = post(t + 1, cur, next, kTagFwdKV);
      } else {  // the next ring starts with this rank's own block
        const int own = (cur + 1) % 3;
        next = (cur + 2) % 3;
        pack_own(k, v, rings_[size_t(y.ring)], kv_[own]);
        hop = post(t + 1, own, next, kTagFwdKV);
      }
    }
    const DynamicRing& r = rings_[size_t(x.ring)];
    const int src = src_member(x);
    const int64_t n = r.tokens(src);
    if (n > 0) steps_.fwd_keys(q, kv_half(kv_[cur], n, 0), kv_half(kv_[cur], n, 1), r.pos[size_t(src)], o);
    cur = next;
  }
  steps_.fwd_end(o);
}

void DynamicRingCore::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                               const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  Backend& b = *be_;
  Communicator& c = *cp_;
  steps_.bwd_begin(o, dout, dq);
  b.fill(dk, 0.0f);
  b.fill(dv, 0.0f);
  if (transfers_.empty()) {
    steps_.bwd_keys(q, k, v, mine_, dout, dq, dk, dv);
    return;
  }
  pack_own(k, v, rings_[0], kv_[0]);
  RingCore::Hop hop = post(0, 0, 1, kTagBwdKV);
  int cur = 1;
  steps_.bwd_keys(q, k, v, mine_, dout, dq, dk, dv);  // every document's own part
  // The accumulators of one ring: step `hop` computes this rank's contribution to the block of
  // member m-hop into acc_[hop % 2], adds the one the previous member built (arrived in
  // acc_[2]; none at hop 1) and sends the sum to the next member; after the last hop the sum
  // for this rank's own block arrives from the previous member and is added into its rows.
  RingCore::Hop acc_hop;
  for (size_t t = 0; t < transfers_.size(); ++t) {
    steps_.wait_hop(c, hop);
    const Transfer& x = transfers_[t];
    int next = cur;
    if (t + 1 < transfers_.size()) {
      const Transfer& y = transfers_[t + 1];
      if (y.ring == x.ring) {
        next = (cur + 1) % 3;
        hop = post(t + 1, cur, next, kTagBwdKV);
      } else {
        const int own = (cur + 1) % 3;
        next = (cur + 2) % 3;
        pack_own(k, v, rings_[size_t(y.ring)], kv_[own]);
        hop = post(t + 1, own, next, kTagBwdKV);
      }
    }
    const DynamicRing& r = rings_[size_t(x.ring)];
    const int src = src_member(x);
    const int64_t n = r.tokens(src), e = kv_block_elems(n);
    Tensor scratch = acc_[x.hop % 2].view(0, {std::max<int64_t>(e, 1)});
    if (n > 0) {
      Tensor dkb = kv_half(acc_[x.hop % 2], n, 0), dvb = kv_half(acc_[x.hop % 2], n, 1);
      b.fill(scratch, 0.0f);
      steps_.bwd_keys(q, kv_half(kv_[cur], n, 0), kv_half(kv_[cur], n, 1), r.pos[size_t(src)], dout, dq, dkb, dvb);
    }
    if (x.hop > 1) {
      c.wait(acc_hop.recv);
      if (n > 0) {
        Tensor in = acc_[2].view(0, {e});
        Tensor sum = acc_[x.hop % 2].view(0, {e});
        b.add(sum, sum, in);
      }
      c.wait(acc_hop.send);  // frees acc_[(hop-1) % 2] for the next hop
    }
    // Send the sum on; receive what the next step adds to (or, after the last hop, the sum for
    // this rank's own block).
    acc_hop = RingCore::Hop{};
    const int64_t in_tokens = x.hop < r.c - 1 ? r.tokens((r.member - x.hop - 1 + r.c) % r.c) : r.tokens(r.member);
    if (in_tokens > 0) {
      Tensor in = acc_[2].view(0, {kv_block_elems(in_tokens)});
      acc_hop.recv = c.irecv(in, prev_rank(r), kTagBwdAcc);
    }
    if (n > 0) acc_hop.send = c.isend(acc_[x.hop % 2].view(0, {e}), next_rank(r), kTagBwdAcc);
    if (x.hop == r.c - 1) {  // the ring ends: this rank's own block comes home
      c.wait(acc_hop.recv);
      const int64_t own = r.tokens(r.member), row = s_.hk * s_.d, vrow = int64_t(s_.hk) * s_.vdim();
      for (int64_t bi = 0; bi < s_.B && own > 0; ++bi) {
        const int64_t at = (bi * s_.n + r.offset) * row, from = bi * own * row;
        const int64_t vat = (bi * s_.n + r.offset) * vrow, vfrom = bi * own * vrow;
        Tensor dkr = dk.view(at, {own * row}), dvr = dv.view(vat, {own * vrow});
        const Tensor ka = kv_half(acc_[2], own, 0).view(from, {own * row});
        const Tensor va = kv_half(acc_[2], own, 1).view(vfrom, {own * vrow});
        b.add(dkr, dkr, ka);
        b.add(dvr, dvr, va);
      }
      c.wait(acc_hop.send);
      acc_hop = RingCore::Hop{};
    }
    cur = next;
  }
}

}  // namespace cpbench
