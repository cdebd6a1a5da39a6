#include "bench/parts/ulysses_level.h"

#include <stdexcept>

#include "bench/block/qkv.h"
#include "bench/parts/layout.h"
#include "comm/communicator.h"

namespace cpbench {

void UlyssesLevel::setup(Backend& be, Communicator& group, const UlyssesShape& s) {
  if (group.size() != s.U) throw std::logic_error("UlyssesLevel: the group's size is not U");
  be_ = &be;
  c_ = &group;
  s_ = s;
  const int f = s.kv_copies(), Ge = s.Ge();
  const int64_t a2a = s.B * s.T * int64_t(s.H + 2 * Ge) * s.d;  // the largest exchange: q|k|v
  send_ = be.alloc({a2a}, s.dtype, MemKind::comm);
  recv_ = be.alloc({a2a}, s.dtype, MemKind::comm);
  if (f > 1) {
    k_rep_ = be.alloc({s.B, s.T, Ge, s.d}, s.dtype, MemKind::activations);
    v_rep_ = be.alloc({s.B, s.T, Ge, s.d}, s.dtype, MemKind::activations);
    copy_run_ = be.alloc({s.B, s.T, s.G, s.d}, s.dtype, MemKind::activations);
    if (s.dtype != DType::f32) copy32_ = be.alloc({s.B, s.T, s.G, s.d}, DType::f32, MemKind::activations);
  }
}

void UlyssesLevel::scatter_qkv(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& q_r, Tensor& k_r,
                               Tensor& v_r) {
  const UlyssesShape& s = s_;
  const int f = s.kv_copies(), Ge = s.Ge();
  Backend& b = *be_;
  // (Tensors are handles: the copies below name the same memory, for the exchange's list.)
  Tensor qq = q, kin = k, vin = v;
  Tensor* kk = &kin;
  Tensor* vv = &vin;
  if (f > 1) {  // head g*f + c = copy c of head g
    const int64_t rows = s.B * s.T * s.G;
    for (int cp = 0; cp < f; ++cp) {
      Tensor kd = k_rep_.view(cp * s.d, {k_rep_.numel() - cp * s.d});
      Tensor vd = v_rep_.view(cp * s.d, {v_rep_.numel() - cp * s.d});
      b.copy_2d(kd, int64_t(f) * s.d, k, s.d, rows, s.d);
      b.copy_2d(vd, int64_t(f) * s.d, v, s.d, rows, s.d);
    }
    kk = &k_rep_;
    vv = &v_rep_;
  }
  // q, k, v: my tokens, all heads -> the group's tokens, head slice u
  Tensor send = send_.view(0, {s.B * s.T * int64_t(s.H + 2 * Ge) * s.d});
  Tensor recv = recv_.view(0, {send.numel()});
  pack_heads_to_peers(b, {{&qq, s.H}, {kk, Ge}, {vv, Ge}}, s.B, s.T, s.d, s.U, send);
  c_->all_to_all(send, recv);
  unpack_peers_to_sequence(b, recv, s.B, s.T, s.d, s.U, s.nseg, {{&q_r, s.H}, {&k_r, Ge}, {&v_r, Ge}});
}

void UlyssesLevel::gather_o(const Tensor& o_r, Tensor& o) {
  const UlyssesShape& s = s_;
  // o: back to my tokens, all heads
  Tensor send = send_.view(0, {s.B * s.T * s.H * s.d});
  Tensor recv = recv_.view(0, {send.numel()});
  Tensor oo = o_r;
  pack_sequence_to_peers(*be_, {{&oo, s.H}}, s.B, s.T, s.d, s.U, s.nseg, send);
  c_->all_to_all(send, recv);
  unpack_peers_to_heads(*be_, recv, s.B, s.T, s.d, s.U, {{&o, s.H}});
}

void UlyssesLevel::scatter_do(const Tensor& dout, Tensor& do_r) {
  const UlyssesShape& s = s_;
  Tensor send = send_.view(0, {s.B * s.T * s.H * s.d});
  Tensor recv = recv_.view(0, {send.numel()});
  Tensor dd = dout;
  pack_heads_to_peers(*be_, {{&dd, s.H}}, s.B, s.T, s.d, s.U, send);
  c_->all_to_all(send, recv);
  unpack_peers_to_sequence(*be_, recv, s.B, s.T, s.d, s.U, s.nseg, {{&do_r, s.H}});
}

void UlyssesLevel::sum_kv_copies(const Tensor& copies, Tensor& dst) {
  const UlyssesShape& s = s_;
  const int f = s.kv_copies();
  const int64_t rows = s.B * s.T * s.G;
  Backend& b = *be_;
  for (int cp = 0; cp < f; ++cp) {
    const Tensor src = copies.view(cp * s.d, {copies.numel() - cp * s.d});
    b.copy_2d(copy_run_, s.d, src, int64_t(f) * s.d, rows, s.d);
    const Tensor* term = &copy_run_;
    if (s.dtype != DType::f32) {  // summed in float32
      b.convert(copy32_, copy_run_);
      term = &copy32_;
    }
    if (cp == 0) b.copy_2d(dst, dst.numel(), *term, term->numel(), 1, term->numel());
    else b.add(dst, dst, *term);
  }
}

void UlyssesLevel::gather_grads(const Tensor& dq_r, const Tensor& dk_r, const Tensor& dv_r, Tensor& dq, Tensor& dk,
                                Tensor& dv, Tensor& dq_run, Tensor& dk_run, Tensor& dv_run) {
  const UlyssesShape& s = s_;
  const int f = s.kv_copies(), Ge = s.Ge();
  const bool f32 = s.dtype == DType::f32;
  Backend& b = *be_;
  Tensor send = send_.view(0, {s.B * s.T * int64_t(s.H + 2 * Ge) * s.d});
  Tensor recv = recv_.view(0, {send.numel()});
  Tensor gq = dq_r, gk = dk_r, gv = dv_r;
  pack_sequence_to_peers(b, {{&gq, s.H}, {&gk, Ge}, {&gv, Ge}}, s.B, s.T, s.d, s.U, s.nseg, send);
  c_->all_to_all(send, recv);
  // Where each gradient lands: the float32 result directly (fp32, no replication), else a
  // run-dtype buffer converted or summed over the copies afterwards.
  Tensor& dq_dst = f32 ? dq : dq_run;
  Tensor& dk_dst = f > 1 ? k_rep_ : (f32 ? dk : dk_run);
  Tensor& dv_dst = f > 1 ? v_rep_ : (f32 ? dv : dv_run);
  unpack_peers_to_heads(b, recv, s.B, s.T, s.d, s.U, {{&dq_dst, s.H}, {&dk_dst, Ge}, {&dv_dst, Ge}});
  if (!f32) b.convert(dq, dq_run);
  if (f > 1) {
    sum_kv_copies(k_rep_, dk);
    sum_kv_copies(v_rep_, dv);
  } else if (!f32) {
    b.convert(dk, dk_run);
    b.convert(dv, dv_run);
  }
}

CommPrediction ulysses_level_bytes(const LayerShape& s, int P, int t, int U, int64_t elem) {
  // hk: the KV heads the ranks hold after any replication, d*max(G, t*U), over the whole model
  // (a TP rank's max(G,t)/t heads, replicated again for U: max(G, t*U)/t, times t ranks).
  const int64_t Tn = s.B * s.new_tokens() / P, hq = int64_t(s.H) * s.d;
  const int64_t hk = int64_t(replicated_kv_heads(t * U, s)) * s.d;
  const int64_t a2a = elem * Tn * (2 * hq + 2 * hk) * (U - 1) / U;
  CommPrediction p;
  return p.add("ulysses", Phase::fwd, 0, a2a).add("ulysses", Phase::bwd, 0, a2a);
}

CommPrediction ulysses_decode_bytes(const LayerShape& s, int t, int U, int64_t elem) {
  const int64_t hq = s.H / (int64_t(t) * U);  // query heads of one member of the head group
  CommPrediction p;
  return p.add("ulysses", Phase::fwd, 0, s.pass.steps * elem * s.B * hq * s.d * (U - 1));
}

int64_t ulysses_level_activation_bytes(const UlyssesShape& s) {
  const int64_t es = int64_t(dtype_size(s.dtype)), Ge = s.Ge();
  int64_t rep = 0;
  if (Ge > s.G) rep = s.B * s.T * s.d * (2 * Ge * es + s.G * es + (s.dtype == DType::f32 ? 0 : s.G * 4));
  return 2 * s.B * s.T * (s.H + 2 * Ge) * s.d * es + rep;
}

}  // namespace cpbench
