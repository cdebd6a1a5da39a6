#include "bench/parts/ulysses_level.h"

#include <algorithm>
#include <stdexcept>

#include "bench/block/qkv.h"
#include "bench/parts/layout.h"
#include "comm/communicator.h"

namespace cpbench {

HeadSplit UlyssesShape::q_split() const {
  if (!uneven) return HeadSplit::even(H, U);
  HeadSplit sp;
  sp.heads = H;
  for (int j = 0; j < U; ++j) {
    sp.first.push_back(int(int64_t(j) * H / U));
    sp.count.push_back(int(int64_t(j + 1) * H / U) - sp.first.back());
  }
  return sp;
}

HeadSplit UlyssesShape::kv_split() const {
  if (!uneven) return HeadSplit::even(Ge(), U);
  const HeadSplit q = q_split();
  const int rep = H / G;
  HeadSplit sp;
  sp.heads = G;
  for (int j = 0; j < U; ++j) {  // the KV heads of query heads [first, first + count)
    const int g0 = q.first[size_t(j)] / rep, g1 = (q.first[size_t(j)] + q.count[size_t(j)] - 1) / rep;
    sp.first.push_back(g0);
    sp.count.push_back(g1 - g0 + 1);
  }
  return sp;
}

int UlyssesShape::kv_slots() const {
  int n = 0;
  for (int c : kv_split().count) n += c;
  return n;
}

int64_t UlyssesShape::exchange_elems() const {
  // Per token: q's heads of d, k's of d and v's of d_v; o's (the other direction) H of d_v.
  const int64_t dv = vdim(), o = int64_t(H) * dv;
  if (!uneven) return B * T * std::max(int64_t(H) * d + int64_t(Ge()) * (d + dv), o);
  int64_t most = 0;
  for (int j = 0; j < U; ++j) most = std::max(most, int64_t(hq(j)) * d + int64_t(hk(j)) * (d + dv));
  return B * T * std::max({int64_t(H) * d + int64_t(kv_slots()) * (d + dv), int64_t(U) * most, o});
}

UlyssesShape UlyssesShape::uneven_split(int H, int G, int U) {
  UlyssesShape s;
  s.H = H; s.G = G; s.U = U; s.uneven = true;
  return s;
}

void UlyssesLevel::setup(Backend& be, Communicator& group, const UlyssesShape& s) {
  if (group.size() != s.U) throw std::logic_error("UlyssesLevel: the group's size is not U");
  if (s.uneven && (s.H < s.U || s.H % s.G != 0))
    throw std::logic_error("UlyssesLevel: uneven heads need H >= U and G dividing H");
  be_ = &be;
  c_ = &group;
  s_ = s;
  const int f = s.kv_copies(), Ge = s.Ge();
  const int64_t a2a = s.exchange_elems();
  send_ = be.alloc({a2a}, s.dtype, MemKind::comm);
  recv_ = be.alloc({a2a}, s.dtype, MemKind::comm);
  const int w = std::max(s.d, s.vdim());  // the sums' scratch serves k (d) and v (d_v)
  if (f > 1) {
    k_rep_ = be.alloc({s.B, s.T, Ge, s.d}, s.dtype, MemKind::activations);
    v_rep_ = be.alloc({s.B, s.T, Ge, s.vdim()}, s.dtype, MemKind::activations);
    copy_run_ = be.alloc({s.B, s.T, s.G, w}, s.dtype, MemKind::activations);
    if (s.dtype != DType::f32) copy32_ = be.alloc({s.B, s.T, s.G, w}, DType::f32, MemKind::activations);
  }
  if (s.uneven) {
    k_rep_ = be.alloc({s.B, s.T, s.kv_slots(), s.d}, s.dtype, MemKind::activations);
    v_rep_ = be.alloc({s.B, s.T, s.kv_slots(), s.vdim()}, s.dtype, MemKind::activations);
    copy_run_ = be.alloc({s.B, s.T, 1, w}, s.dtype, MemKind::activations);
    if (s.dtype != DType::f32) copy32_ = be.alloc({s.B, s.T, 1, w}, DType::f32, MemKind::activations);
    acc32_ = be.alloc({s.B, s.T, 1, w}, DType::f32, MemKind::activations);
  }
  const int me = group.rank();
  q_split_ = s.q_split();
  kv_split_ = s.kv_split();
  hq_ = q_split_.count[size_t(me)];
  hk_ = kv_split_.count[size_t(me)];
  // The backward's KV heads: uneven, member j's go to slots [earlier members' counts, + count j)
  // of the members' dk, dv (summed per head afterwards); even, where the forward took them.
  slot_split_ = kv_split_;
  if (s.uneven) {
    int slot = 0;
    slot_split_.heads = s.kv_slots();
    for (int j = 0; j < s.U; ++j) {
      slot_split_.first[size_t(j)] = slot;
      slot += slot_split_.count[size_t(j)];
    }
  }
  const int dv = s.vdim();  // v, o, do: d_v elements per head
  const std::vector<int64_t> o_n = chunk_elems({{nullptr, &q_split_, dv}}, s.B, s.T, s.d);
  qkv_ = Chunks::to_heads(chunk_elems({{nullptr, &q_split_}, {nullptr, &kv_split_}, {nullptr, &kv_split_, dv}}, s.B, s.T, s.d), me);
  o_ = Chunks::to_tokens(o_n, me);
  do_ = Chunks::to_heads(o_n, me);
  if (s.latent > 0) {
    const std::vector<int64_t> q_n = chunk_elems({{nullptr, &q_split_}}, s.B, s.T, s.d);
    q_ = Chunks::to_heads(q_n, me);
    dq_ = Chunks::to_tokens(q_n, me);
    lat_all_ = be.alloc({int64_t(s.U) * s.B * s.T * s.latent}, s.dtype, MemKind::comm);
    lat_grad_ = be.alloc({int64_t(s.U) * s.B * s.T * s.latent}, DType::f32, MemKind::comm);
  }
  grads_ = Chunks::to_tokens(
      chunk_elems({{nullptr, &q_split_}, {nullptr, &slot_split_}, {nullptr, &slot_split_, dv}}, s.B, s.T, s.d), me);
}

UlyssesLevel::Chunks UlyssesLevel::Chunks::to_heads(const std::vector<int64_t>& n, int me) {
  Chunks c;
  c.send_n = n;
  c.recv_n.assign(n.size(), n[size_t(me)]);
  for (size_t j = 0; j < n.size(); ++j) {  // one chunk after another
    c.send_off.push_back(j == 0 ? 0 : c.send_off[j - 1] + c.send_n[j - 1]);
    c.recv_off.push_back(j == 0 ? 0 : c.recv_off[j - 1] + c.recv_n[j - 1]);
  }
  return c;
}

UlyssesLevel::Chunks UlyssesLevel::Chunks::to_tokens(const std::vector<int64_t>& n, int me) {
  Chunks c = to_heads(n, me);
  std::swap(c.send_n, c.recv_n);
  std::swap(c.send_off, c.recv_off);
  return c;
}

void exchange_uneven(Backend& be, Communicator& c, const Tensor& send, const std::vector<int64_t>& send_off,
                     const std::vector<int64_t>& send_n, Tensor& recv, const std::vector<int64_t>& recv_off,
                     const std::vector<int64_t>& recv_n) {
  const int U = c.size(), me = c.rank();
  // Receives posted first, then the sends; my own chunk is a local copy.
  std::vector<Tensor> rbuf(static_cast<size_t>(U)), sbuf(static_cast<size_t>(U));
  std::vector<Request> reqs;
  for (int j = 0; j < U; ++j)
    if (j != me && recv_n[size_t(j)] > 0) {
      rbuf[size_t(j)] = recv.view(recv_off[size_t(j)], {recv_n[size_t(j)]});
      reqs.push_back(c.irecv(rbuf[size_t(j)], j, 0));
    }
  for (int j = 0; j < U; ++j)
    if (j != me && send_n[size_t(j)] > 0) {
      sbuf[size_t(j)] = send.view(send_off[size_t(j)], {send_n[size_t(j)]});
      reqs.push_back(c.isend(sbuf[size_t(j)], j, 0));
    }
  if (recv_n[size_t(me)] > 0) {
    Tensor mine = recv.view(recv_off[size_t(me)], {recv_n[size_t(me)]});
    be.copy_2d(mine, mine.numel(), send.view(send_off[size_t(me)], {send_n[size_t(me)]}), mine.numel(), 1,
               mine.numel());
  }
  for (Request& r : reqs) c.wait(r);
}

void UlyssesLevel::exchange(const Tensor& send, const Chunks& c, Tensor& recv) {
  if (!s_.uneven) {
    const int64_t n = c.send_n[0] * s_.U;
    Tensor r = recv.view(0, {n});
    c_->all_to_all(send.view(0, {n}), r);
    return;
  }
  exchange_uneven(*be_, *c_, send, c.send_off, c.send_n, recv, c.recv_off, c.recv_n);
}

void UlyssesLevel::scatter_qkv(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& q_r, Tensor& k_r,
                               Tensor& v_r) {
  const UlyssesShape& s = s_;
  const int f = s.kv_copies();
  Backend& b = *be_;
  // (Tensors are handles: the copies below name the same memory, for the exchange's list.)
  Tensor qq = q, kin = k, vin = v;
  Tensor* kk = &kin;
  Tensor* vv = &vin;
  if (f > 1) {  // head g*f + c = copy c of head g
    const int64_t rows = s.B * s.T * s.G;
    const int64_t dv = s.vdim();
    for (int cp = 0; cp < f; ++cp) {
      Tensor kd = k_rep_.view(cp * s.d, {k_rep_.numel() - cp * s.d});
      Tensor vd = v_rep_.view(cp * dv, {v_rep_.numel() - cp * dv});
      b.copy_2d(kd, int64_t(f) * s.d, k, s.d, rows, s.d);
      b.copy_2d(vd, int64_t(f) * dv, v, dv, rows, dv);
    }
    kk = &k_rep_;
    vv = &v_rep_;
  }
  // q, k, v: my tokens, all heads -> the group's tokens, my heads
  const int dv = s.vdim();
  pack_heads_to_peers(b, {{&qq, &q_split_}, {kk, &kv_split_}, {vv, &kv_split_, dv}}, s.B, s.T, s.d, send_);
  exchange(send_, qkv_, recv_);
  unpack_peers_to_sequence(b, recv_, s.B, s.T, s.d, s.U, s.nseg, {{&q_r, hq_}, {&k_r, hk_}, {&v_r, hk_, dv}});
}

void UlyssesLevel::gather_o(const Tensor& o_r, Tensor& o) {
  const UlyssesShape& s = s_;
  // o: back to my tokens, all heads
  Tensor oo = o_r;
  pack_sequence_to_peers(*be_, {{&oo, hq_, s.vdim()}}, s.B, s.T, s.d, s.U, s.nseg, send_);
  exchange(send_, o_, recv_);
  unpack_peers_to_heads(*be_, recv_, s.B, s.T, s.d, {{&o, &q_split_, s.vdim()}});
}

void UlyssesLevel::scatter_do(const Tensor& dout, Tensor& do_r) {
  const UlyssesShape& s = s_;
  Tensor dd = dout;
  pack_heads_to_peers(*be_, {{&dd, &q_split_, s.vdim()}}, s.B, s.T, s.d, send_);
  exchange(send_, do_, recv_);
  unpack_peers_to_sequence(*be_, recv_, s.B, s.T, s.d, s.U, s.nseg, {{&do_r, hq_, s.vdim()}});
}

void UlyssesLevel::scatter_q(const Tensor& q, Tensor& q_r) {
  const UlyssesShape& s = s_;
  Tensor qq = q;
  pack_heads_to_peers(*be_, {{&qq, &q_split_}}, s.B, s.T, s.d, send_);
  exchange(send_, q_, recv_);
  unpack_peers_to_sequence(*be_, recv_, s.B, s.T, s.d, s.U, s.nseg, {{&q_r, hq_}});
}

void UlyssesLevel::gather_latent(const Tensor& lat, Tensor& lat_r) {
  const UlyssesShape& s = s_;
  c_->all_gather(lat, lat_all_);  // [U, B, T, latent]: member j's tokens from j
  Tensor r = lat_r;  // one "head" of `latent` values per token, in position order
  unpack_peers_to_sequence(*be_, lat_all_, s.B, s.T, s.latent, s.U, s.nseg, {{&r, 1}});
}

void UlyssesLevel::gather_dq(const Tensor& dq_r, Tensor& dq, Tensor& dq_run) {
  const UlyssesShape& s = s_;
  const bool f32 = s.dtype == DType::f32;
  Tensor gq = dq_r;
  Tensor& dst = f32 ? dq : dq_run;
  pack_sequence_to_peers(*be_, {{&gq, hq_}}, s.B, s.T, s.d, s.U, s.nseg, send_);
  exchange(send_, dq_, recv_);
  unpack_peers_to_heads(*be_, recv_, s.B, s.T, s.d, {{&dst, &q_split_}});
  if (!f32) be_->convert(dq, dq_run);
}

void UlyssesLevel::scatter_latent_grad(const Tensor& dlat_r, Tensor& dlat) {
  const UlyssesShape& s = s_;
  Tensor g = dlat_r;  // back to the members' token order, chunk j = member j's tokens
  pack_sequence_to_peers(*be_, {{&g, 1}}, s.B, s.T, s.latent, s.U, s.nseg, lat_grad_);
  c_->reduce_scatter(lat_grad_, dlat);  // summed over the members' heads
}

void UlyssesLevel::sum_kv_copies(const Tensor& copies, Tensor& dst, int w) {
  const UlyssesShape& s = s_;
  const int f = s.kv_copies();
  const int64_t rows = s.B * s.T * s.G;
  Backend& b = *be_;
  Tensor run = copy_run_.view(0, {rows * w}), wide = s.dtype != DType::f32 ? copy32_.view(0, {rows * w}) : Tensor{};
  for (int cp = 0; cp < f; ++cp) {
    const Tensor src = copies.view(int64_t(cp) * w, {copies.numel() - int64_t(cp) * w});
    b.copy_2d(run, w, src, int64_t(f) * w, rows, w);
    const Tensor* term = &run;
    if (s.dtype != DType::f32) {  // summed in float32
      b.convert(wide, run);
      term = &wide;
    }
    if (cp == 0) b.copy_2d(dst, dst.numel(), *term, term->numel(), 1, term->numel());
    else b.add(dst, dst, *term);
  }
}

void UlyssesLevel::sum_kv_slots(const Tensor& slots, Tensor& dst, int w) {
  const UlyssesShape& s = s_;
  const HeadSplit& kv = kv_split_;
  const int S = slot_split_.heads;
  const int64_t rows = s.B * s.T;
  Backend& b = *be_;
  Tensor run = copy_run_.view(0, {rows * w}), acc = acc32_.view(0, {rows * w});
  Tensor wide = s.dtype != DType::f32 ? copy32_.view(0, {rows * w}) : Tensor{};
  // Slot order: member 0's heads, then member 1's, ...; KV head g is in the slots of the members
  // whose range holds it, summed in member order.
  for (int g = 0; g < s.G; ++g) {
    int slot = 0, terms = 0;
    for (int j = 0; j < s.U; ++j) {
      const int first = kv.first[size_t(j)], cnt = kv.count[size_t(j)];
      if (g >= first && g < first + cnt) {
        const int64_t c0 = int64_t(slot + g - first) * w;
        b.copy_2d(run, w, slots.view(c0, {slots.numel() - c0}), int64_t(S) * w, rows, w);
        const Tensor* term = &run;
        if (s.dtype != DType::f32) {  // summed in float32
          b.convert(wide, run);
          term = &wide;
        }
        if (terms++ == 0) b.copy_2d(acc, acc.numel(), *term, term->numel(), 1, term->numel());
        else b.add(acc, acc, *term);
      }
      slot += cnt;
    }
    Tensor col = dst.view(int64_t(g) * w, {dst.numel() - int64_t(g) * w});
    b.copy_2d(col, int64_t(s.G) * w, acc, w, rows, w);
  }
}

void UlyssesLevel::gather_grads(const Tensor& dq_r, const Tensor& dk_r, const Tensor& dv_r, Tensor& dq, Tensor& dk,
                                Tensor& dv, Tensor& dq_run, Tensor& dk_run, Tensor& dv_run) {
  const UlyssesShape& s = s_;
  const int f = s.kv_copies();
  const bool f32 = s.dtype == DType::f32;
  Backend& b = *be_;
  Tensor gq = dq_r, gk = dk_r, gv = dv_r;
  // Where each gradient lands: the float32 result directly (fp32, no replication), else a
  // run-dtype buffer converted or summed over the copies (uneven: over the members' slots) afterwards.
  Tensor& dq_dst = f32 ? dq : dq_run;
  Tensor& dk_dst = f > 1 || s.uneven ? k_rep_ : (f32 ? dk : dk_run);
  Tensor& dv_dst = f > 1 || s.uneven ? v_rep_ : (f32 ? dv : dv_run);
  const int w = s.vdim();  // dv's elements per head
  pack_sequence_to_peers(b, {{&gq, hq_}, {&gk, hk_}, {&gv, hk_, w}}, s.B, s.T, s.d, s.U, s.nseg, send_);
  exchange(send_, grads_, recv_);
  unpack_peers_to_heads(b, recv_, s.B, s.T, s.d,
                        {{&dq_dst, &q_split_}, {&dk_dst, &slot_split_}, {&dv_dst, &slot_split_, w}});
  if (!f32) b.convert(dq, dq_run);
  if (s.uneven) {
    sum_kv_slots(k_rep_, dk, s.d);
    sum_kv_slots(v_rep_, dv, w);
  } else if (f > 1) {
    sum_kv_copies(k_rep_, dk, s.d);
    sum_kv_copies(v_rep_, dv, w);
  } else if (!f32) {
    b.convert(dk, dk_run);
    b.convert(dv, dv_run);
  }
}

CommPrediction ulysses_level_bytes(const LayerShape& s, int P, int t, int U, int64_t elem) {
  // hk: the KV heads the ranks hold after any replication, d*max(G, t*U), over the whole model
  // (a TP rank's max(G,t)/t heads, replicated again for U: max(G, t*U)/t, times t ranks).
  // Per direction q, k, v and o (forward), do, dq, dk, dv (backward): (H + Ge)*(d + d_v) per token.
  const int64_t Tn = s.B * s.new_tokens() / P;
  const int64_t heads = int64_t(s.H) + replicated_kv_heads(t * U, s);
  const int64_t a2a = elem * Tn * heads * (s.d + s.vdim()) * (U - 1) / U;
  CommPrediction p;
  return p.add("ulysses", Phase::fwd, 0, a2a).add("ulysses", Phase::bwd, 0, a2a);
}

CommPrediction ulysses_level_bytes_uneven(const LayerShape& s, int P, int t, const UlyssesShape& us, int u,
                                          int64_t elem) {
  const int64_t Tw = int64_t(t) * s.B * s.new_tokens() / P, d = s.d, dv = s.vdim();
  CommPrediction p;
  for (int j = 0; j < us.U; ++j) {
    if (j == u) continue;
    p.add("ulysses", Phase::fwd, j - u, elem * Tw * (us.hq(j) * d + us.hk(j) * (d + dv) + us.hq(u) * dv));
    p.add("ulysses", Phase::bwd, j - u, elem * Tw * (us.hq(j) * dv + us.hq(u) * d + us.hk(u) * (d + dv)));
  }
  return p;
}

CommPrediction ulysses_latent_bytes(const LayerShape& s, int P, int t, int U, int64_t elem) {
  const int64_t Tn = s.B * s.new_tokens() / P, H = s.H, w = int64_t(t) * s.ring_block_row();  // t: the TP group's rows
  const int64_t q = elem * Tn * H * s.d * (U - 1) / U, o = elem * Tn * H * s.vdim() * (U - 1) / U;
  CommPrediction p;
  p.add("ulysses", Phase::fwd, 0, q).add("ulysses", Phase::fwd, 0, elem * Tn * w * (U - 1)).add("ulysses", Phase::fwd, 0, o);
  return p.add("ulysses", Phase::bwd, 0, o + q).add("ulysses", Phase::bwd, 0, 4 * Tn * w * (U - 1));
}

CommPrediction ulysses_decode_bytes(const LayerShape& s, int t, int U, int64_t elem, int hq_member) {
  const int64_t hq = hq_member > 0 ? hq_member : s.H / (int64_t(t) * U);  // query heads of one member of the head group
  CommPrediction p;
  return p.add("ulysses", Phase::fwd, 0, s.pass.steps * elem * s.B * hq * s.vdim() * (U - 1));
}

int64_t ulysses_level_activation_bytes(const UlyssesShape& s) {
  const int64_t es = int64_t(dtype_size(s.dtype)), Ge = s.Ge(), d = s.d, dv = s.vdim(), w = std::max(d, dv);
  if (s.uneven)  // setup's exchange buffers, the members' dk, dv slots and one slot's scratch
    return 2 * s.exchange_elems() * es + s.B * s.T * (s.kv_slots() * (d + dv) * es + w * (es + (s.dtype == DType::f32 ? 0 : 4) + 4));
  int64_t rep = 0;
  if (Ge > s.G) rep = s.B * s.T * (Ge * (d + dv) * es + s.G * w * (es + (s.dtype == DType::f32 ? 0 : 4)));
  const int64_t latent = s.latent > 0 ? int64_t(s.U) * s.B * s.T * s.latent * (es + 4) : 0;  // the gather's, the scatter's
  return 2 * s.exchange_elems() * es + rep + latent;
}

}  // namespace cpbench
