// ulysses — DeepSpeed Ulysses (Jacobs et al. 2023). Rank r holds tokens [r*N/P, (r+1)*N/P).
// Forward: one all-to-all turns q, k, v from "my tokens, all heads" into "all tokens, my H/P
// query heads and G/P kv heads"; attention runs on the whole sequence for those heads; a second
// all-to-all brings o back to "my tokens, all heads". Backward mirrors it: do travels like q,
// and dq, dk, dv travel back like o.
// Bytes per rank (fwd = bwd): s*T*(2hq + 2hk)*(P-1)/P.
#include <sstream>

#include "bench/strategies/layout.h"
#include "bench/strategies/seq_sharded_layer.h"
#include "comm/communicator.h"

namespace cpbench {

namespace {

class Ulysses final : public SeqShardedLayer {
 public:
  std::string name() const override { return "ulysses"; }

  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    std::ostringstream e;
    if (s.H % P != 0)
      e << "ulysses: P=" << P << " does not divide heads=" << s.H;
    else if (s.G % P != 0)
      e << "ulysses: P=" << P << " does not divide kv_heads=" << s.G << "; use usp with ulysses<="
        << max_ulysses_degree(P, s);
    else if (s.N % P != 0)
      e << "ulysses: P=" << P << " does not divide seq=" << s.N;
    if (!e.str().empty()) throw ConstraintError(e.str());
  }

  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec&, int64_t elem,
                                 int64_t) const override {
    const int64_t T = s.B * s.N / P, hq = int64_t(s.H) * s.d, hk = int64_t(s.G) * s.d;
    const int64_t b = elem * T * (2 * hq + 2 * hk) * (P - 1) / P;
    return {b, b};
  }

 protected:
  Positions token_positions(const LayerShape& s, const Mesh& m) const override {
    const int64_t T = s.N / m.P;
    return Positions::contiguous(m.cp->rank() * T, T);
  }

  AttnShape attn_shape() const {
    const LayerShape& s = shape();
    const int P = mesh().P;
    AttnShape a;
    a.B = s.B; a.nq = s.N; a.nk = s.N; a.hq = s.H / P; a.hk = s.G / P; a.d = s.d; a.causal = s.causal;
    return a;
  }

  void core_setup() override {
    const LayerShape& s = shape();
    const int P = mesh().P;
    const int hl = s.H / P, gl = s.G / P;
    const int64_t cols_qkv = int64_t(hl + 2 * gl) * s.d;  // per peer chunk row: q|k|v head slices
    q_full_ = alloc({s.B, s.N, hl, s.d});
    k_full_ = alloc({s.B, s.N, gl, s.d});
    v_full_ = alloc({s.B, s.N, gl, s.d});
    o_full_ = alloc({s.B, s.N, hl, s.d});
    do_full_ = alloc({s.B, s.N, hl, s.d});
    lse_ = alloc_f32({s.B, hl, s.N});
    delta_ = alloc_f32({s.B, hl, s.N});
    dq_full_ = alloc_f32({s.B, s.N, hl, s.d});
    dk_full_ = alloc_f32({s.B, s.N, gl, s.d});
    dv_full_ = alloc_f32({s.B, s.N, gl, s.d});
    send_ = alloc({int64_t(P) * s.B * T_ * cols_qkv}, MemKind::comm);
    recv_ = alloc({int64_t(P) * s.B * T_ * cols_qkv}, MemKind::comm);
  }

  void core_forward() override {
    const LayerShape& s = shape();
    Communicator& c = *mesh().cp;
    const int P = c.size();
    // q, k, v: tokens -> heads
    Tensor send = send_.view(0, {int64_t(P) * s.B * T_ * int64_t(s.H / P + 2 * (s.G / P)) * s.d});
    Tensor recv = recv_.view(0, {send.numel()});
    pack_heads_to_peers(be(), {{&q_, s.H}, {&k_, s.G}, {&v_, s.G}}, s.B, T_, s.d, P, send);
    c.all_to_all(send, recv);
    unpack_peers_to_sequence(be(), recv, s.B, T_, s.d, P, 1, {{&q_full_, s.H}, {&k_full_, s.G}, {&v_full_, s.G}});
    const Positions all = Positions::contiguous(0, s.N);
    be().attn_fwd(attn_shape(), q_full_, k_full_, v_full_, all, all, o_full_, lse_);
    // o: heads -> tokens
    Tensor send_o = send_.view(0, {int64_t(P) * s.B * T_ * (s.H / P) * s.d});
    Tensor recv_o = recv_.view(0, {send_o.numel()});
    pack_sequence_to_peers(be(), {{&o_full_, s.H}}, s.B, T_, s.d, P, 1, send_o);
    c.all_to_all(send_o, recv_o);
    unpack_peers_to_heads(be(), recv_o, s.B, T_, s.d, P, {{&o_, s.H}});
  }

  void core_backward() override {
    const LayerShape& s = shape();
    Communicator& c = *mesh().cp;
    const int P = c.size();
    // do: tokens -> heads
    Tensor send_do = send_.view(0, {int64_t(P) * s.B * T_ * (s.H / P) * s.d});
    Tensor recv_do = recv_.view(0, {send_do.numel()});
    pack_heads_to_peers(be(), {{&do_, s.H}}, s.B, T_, s.d, P, send_do);
    c.all_to_all(send_do, recv_do);
    unpack_peers_to_sequence(be(), recv_do, s.B, T_, s.d, P, 1, {{&do_full_, s.H}});
    const Positions all = Positions::contiguous(0, s.N);
    be().attn_bwd_delta(attn_shape(), o_full_, do_full_, delta_);
    be().fill(dq_full_, 0.0f);
    be().fill(dk_full_, 0.0f);
    be().fill(dv_full_, 0.0f);
    be().attn_bwd(attn_shape(), q_full_, k_full_, v_full_, do_full_, lse_, delta_, all, all,
                  dq_full_, dk_full_, dv_full_);
    // dq, dk, dv: heads -> tokens (sent in the run dtype)
    Tensor dq = in_run_dtype(dq_full_), dk = in_run_dtype(dk_full_), dv = in_run_dtype(dv_full_);
    Tensor send = send_.view(0, {int64_t(P) * s.B * T_ * int64_t(s.H / P + 2 * (s.G / P)) * s.d});
    Tensor recv = recv_.view(0, {send.numel()});
    pack_sequence_to_peers(be(), {{&dq, s.H}, {&dk, s.G}, {&dv, s.G}}, s.B, T_, s.d, P, 1, send);
    c.all_to_all(send, recv);
    if (s.dtype == DType::f32) {
      unpack_peers_to_heads(be(), recv, s.B, T_, s.d, P, {{&dq_, s.H}, {&dk_, s.G}, {&dv_, s.G}});
    } else {
      Tensor dq_r = alloc(dq_.shape), dk_r = alloc(dk_.shape), dv_r = alloc(dv_.shape);
      unpack_peers_to_heads(be(), recv, s.B, T_, s.d, P, {{&dq_r, s.H}, {&dk_r, s.G}, {&dv_r, s.G}});
      be().convert(dq_, dq_r);
      be().convert(dk_, dk_r);
      be().convert(dv_, dv_r);
    }
  }

  void core_teardown() override {
    for (Tensor* t : {&q_full_, &k_full_, &v_full_, &o_full_, &do_full_, &lse_, &delta_, &dq_full_,
                      &dk_full_, &dv_full_, &send_, &recv_})
      *t = Tensor{};
  }

  void export_lse(std::vector<float>& global) override {
    // lse_ [B, H/P, N] holds query heads [r*H/P, (r+1)*H/P) for the whole sequence.
    const LayerShape& s = shape();
    const int P = mesh().P, r = mesh().cp->rank(), hl = s.H / P;
    std::vector<float> h = be().download(lse_);
    for (int64_t b = 0; b < s.B; ++b)
      for (int j = 0; j < hl; ++j)
        for (int64_t n = 0; n < s.N; ++n)
          global[static_cast<size_t>((b * s.H + r * hl + j) * s.N + n)] += h[static_cast<size_t>((b * hl + j) * s.N + n)];
  }

  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec&) const override {
    // full-sequence q, k, v, o, do for H/P (G/P) heads, fp32 dq, dk, dv, lse, delta, two comm buffers
    const int64_t es = int64_t(dtype_size(s.dtype)), BN = s.B * s.N;
    const int64_t hl = s.H / P, gl = s.G / P, T = s.N / P;
    return BN * s.d * (3 * hl + 2 * gl) * es + BN * s.d * (hl + 2 * gl) * 4 + 2 * s.B * hl * s.N * 4 +
           2 * P * s.B * T * (hl + 2 * gl) * s.d * es;
  }

  Tensor q_full_, k_full_, v_full_, o_full_, do_full_, lse_, delta_, dq_full_, dk_full_, dv_full_;
  Tensor send_, recv_;
};

}  // namespace

std::unique_ptr<Strategy> make_ulysses() { return std::make_unique<Ulysses>(); }

}  // namespace cpbench
