// usp — Unified Sequence Parallelism (Fang & Zhao 2024, yunchang; LoongTrain's 2D attention):
// the P ranks form a U x R mesh. Inside each Ulysses group of U ranks, an all-to-all turns q, k, v
// from "my tokens, all heads" into "the group's tokens, H/U query heads and G/U kv heads"; across
// the R groups, ring attention (ring_core.h) runs on those tokens over the ring communicator;
// an all-to-all brings o back. Backward mirrors it: do travels like q, the ring backward runs,
// and dq, dk, dv travel back like o (in the run dtype, as ulysses sends them).
//
// Token layout. Ring index rho = mesh().ring->rank() (the position of this rank's Ulysses group
// along the ring), Ulysses index u = mesh().ulysses->rank().
//   zigzag (default when causal): the sequence is cut into 2R chunks of C = N/(2R); ring index
//     rho owns chunks rho and 2R-1-rho, and Ulysses member u holds the u-th 1/U of each:
//     [rho*C + u*C/U, +C/U) and [(2R-1-rho)*C + u*C/U, +C/U). After the all-to-all (nseg = 2)
//     each rank holds both chunks of its ring index in position order, as ring-zigzag does.
//   contiguous: ring index rho owns [rho*N/R, (rho+1)*N/R), member u holds its u-th 1/U.
//     Allowed with causal too (the user's choice), but then the ring is imbalanced like ring's.
//
// Bytes per rank (DESIGN): fwd = s*T*(2hq+2hk)*(U-1)/U + s*T*2hk*(R-1);
// bwd = s*T*(2hq+2hk)*(U-1)/U + s*T*2hk*(R-1) + s_acc*T*2hk*R; ring terms vanish when R = 1,
// Ulysses terms when U = 1.
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "bench/strategies/layout.h"
#include "bench/strategies/ring_core.h"
#include "comm/communicator.h"

namespace cpbench {

namespace {

bool zigzag_layout(RingLayout requested, bool causal) {
  return requested == RingLayout::zigzag || (requested == RingLayout::auto_ && causal);
}

std::string ulysses_hint(int P, const LayerShape& s) {
  const int u = max_ulysses_degree(P, s);
  return u == 1 ? "use ulysses=1 (a pure ring)" : "use ulysses<=" + std::to_string(u);
}

class Usp final : public SeqShardedLayer {
 public:
  std::string name() const override { return "usp"; }
  bool uses_mesh() const override { return true; }
  std::string label(const MeshSpec& m) const override {
    return "usp[u" + std::to_string(m.U) + "xr" + std::to_string(m.R) + "]";
  }

  // Both degrees given: they must multiply to P. One given: the other is P divided by it.
  // Neither: U is the largest degree dividing P, H and G (the all-to-all as wide as the heads
  // allow, the rest ring).
  MeshSpec resolve_mesh(const MeshSpec& req, const LayerShape& s, int P) const override {
    MeshSpec m = req;
    std::ostringstream e;
    if (req.U < 0 || req.R < 0) {
      e << "usp: ulysses=" << req.U << " and ring=" << req.R << " must be positive";
    } else if (req.U > 0 && req.R > 0) {
      if (int64_t(req.U) * req.R != P)
        e << "usp: ulysses=" << req.U << " x ring=" << req.R << " = " << int64_t(req.U) * req.R
          << " ranks, but P=" << P;
    } else if (req.U > 0) {
      if (P % req.U != 0) e << "usp: ulysses=" << req.U << " does not divide P=" << P;
      else m.R = P / req.U;
    } else if (req.R > 0) {
      if (P % req.R != 0) e << "usp: ring=" << req.R << " does not divide P=" << P;
      else m.U = P / req.R;
    } else {
      m.U = max_ulysses_degree(P, s);
      m.R = P / m.U;
    }
    if (!e.str().empty()) throw ConstraintError(e.str());
    return m;
  }

  void check(const LayerShape& s, int P, const MeshSpec& m) const override {
    std::ostringstream e;
    const bool zz = zigzag_layout(m.ring_layout, s.causal);
    if (m.U < 1 || m.R < 1 || int64_t(m.U) * m.R != P)
      e << "usp: ulysses=" << m.U << " x ring=" << m.R << " must equal P=" << P;
    else if (s.H % m.U != 0)
      e << "usp: ulysses=" << m.U << " does not divide heads=" << s.H << "; " << ulysses_hint(P, s);
    else if (s.G % m.U != 0)
      e << "usp: ulysses=" << m.U << " does not divide kv_heads=" << s.G << "; " << ulysses_hint(P, s);
    else if (zz && s.N % (2 * int64_t(P)) != 0)
      e << "usp: seq=" << s.N << " is not divisible by 2*P=" << 2 * P << " (zigzag ring layout: "
        << 2 * m.R << " chunks, each split over ulysses=" << m.U << ")";
    else if (!zz && s.N % P != 0)
      e << "usp: seq=" << s.N << " is not divisible by P=" << P << " (contiguous ring layout)";
    if (!e.str().empty()) throw ConstraintError(e.str());
  }

  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem,
                                 int64_t acc) const override {
    if (m.U < 1 || m.R < 1) throw std::logic_error("usp: predicted_bytes needs a resolved mesh");
    const int64_t T = s.B * s.N / P, hq = int64_t(s.H) * s.d, hk = int64_t(s.G) * s.d;
    const int64_t a2a = elem * T * (2 * hq + 2 * hk) * (m.U - 1) / m.U;
    const CommPrediction ring = RingCore::predicted_bytes(T, hk, m.R, elem, acc);
    return {a2a + ring.fwd, a2a + ring.bwd};
  }

 protected:
  bool zigzag() const { return zigzag_layout(env_.spec.ring_layout, shape().causal); }
  int nseg() const { return zigzag() ? 2 : 1; }

  // The U*T tokens (per batch row) of ring index j, in position order.
  Positions ring_block(int j) const {
    const LayerShape& s = shape();
    const int R = env_.mesh->R;
    if (zigzag()) {
      const int64_t C = s.N / (2 * int64_t(R));
      return Positions::two(j * C, C, (2 * int64_t(R) - 1 - j) * C, C);
    }
    const int64_t L = s.N / R;
    return Positions::contiguous(j * L, L);
  }

  Positions token_positions(const LayerShape& s, const Mesh& m) const override {
    const int64_t U = m.U, R = m.R, u = m.ulysses->rank(), rho = m.ring->rank();
    if (zigzag()) {
      const int64_t C = s.N / (2 * R), c = C / U;
      return Positions::two(rho * C + u * c, c, (2 * R - 1 - rho) * C + u * c, c);
    }
    const int64_t L = s.N / R, T = L / U;
    return Positions::contiguous(rho * L + u * T, T);
  }

  void core_setup() override {
    const LayerShape& s = shape();
    const int U = mesh().U, hl = s.H / U, gl = s.G / U;
    const int64_t n = int64_t(U) * T_;  // tokens per batch row of this rank's ring index
    q_r_ = alloc({s.B, n, hl, s.d});
    k_r_ = alloc({s.B, n, gl, s.d});
    v_r_ = alloc({s.B, n, gl, s.d});
    o_r_ = alloc({s.B, n, hl, s.d});
    do_r_ = alloc({s.B, n, hl, s.d});
    dq_r_ = alloc_f32({s.B, n, hl, s.d});
    dk_r_ = alloc_f32({s.B, n, gl, s.d});
    dv_r_ = alloc_f32({s.B, n, gl, s.d});
    const int64_t a2a = s.B * T_ * s.qkv_cols();  // the largest exchange: q|k|v of my tokens
    send_ = alloc({a2a}, MemKind::comm);
    recv_ = alloc({a2a}, MemKind::comm);
    RingCoreShape cs;
    cs.B = s.B; cs.n = n; cs.hq = hl; cs.hk = gl; cs.d = s.d; cs.causal = s.causal; cs.dtype = s.dtype;
    ring_.setup(be(), *mesh().ring, cs, [this](int j) { return ring_block(j); });
  }

  void core_forward() override {
    const LayerShape& s = shape();
    Communicator& c = *mesh().ulysses;
    const int U = c.size();
    // q, k, v: my tokens, all heads -> my ring index's tokens, head slice u
    Tensor send = send_.view(0, {s.B * T_ * s.qkv_cols()});
    Tensor recv = recv_.view(0, {send.numel()});
    pack_heads_to_peers(be(), {{&q_, s.H}, {&k_, s.G}, {&v_, s.G}}, s.B, T_, s.d, U, send);
    c.all_to_all(send, recv);
    unpack_peers_to_sequence(be(), recv, s.B, T_, s.d, U, nseg(), {{&q_r_, s.H}, {&k_r_, s.G}, {&v_r_, s.G}});
    ring_.forward(q_r_, k_r_, v_r_, o_r_);
    // o: back to my tokens, all heads
    Tensor send_o = send_.view(0, {s.B * T_ * s.H * s.d});
    Tensor recv_o = recv_.view(0, {send_o.numel()});
    pack_sequence_to_peers(be(), {{&o_r_, s.H}}, s.B, T_, s.d, U, nseg(), send_o);
    c.all_to_all(send_o, recv_o);
    unpack_peers_to_heads(be(), recv_o, s.B, T_, s.d, U, {{&o_, s.H}});
  }

  void core_backward() override {
    const LayerShape& s = shape();
    Communicator& c = *mesh().ulysses;
    const int U = c.size();
    Tensor send_do = send_.view(0, {s.B * T_ * s.H * s.d});
    Tensor recv_do = recv_.view(0, {send_do.numel()});
    pack_heads_to_peers(be(), {{&do_, s.H}}, s.B, T_, s.d, U, send_do);
    c.all_to_all(send_do, recv_do);
    unpack_peers_to_sequence(be(), recv_do, s.B, T_, s.d, U, nseg(), {{&do_r_, s.H}});
    ring_.backward(q_r_, k_r_, v_r_, o_r_, do_r_, dq_r_, dk_r_, dv_r_);
    // dq, dk, dv: back to my tokens (sent in the run dtype)
    Tensor dq = in_run_dtype(dq_r_), dk = in_run_dtype(dk_r_), dv = in_run_dtype(dv_r_);
    Tensor send = send_.view(0, {s.B * T_ * s.qkv_cols()});
    Tensor recv = recv_.view(0, {send.numel()});
    pack_sequence_to_peers(be(), {{&dq, s.H}, {&dk, s.G}, {&dv, s.G}}, s.B, T_, s.d, U, nseg(), send);
    c.all_to_all(send, recv);
    if (s.dtype == DType::f32) {
      unpack_peers_to_heads(be(), recv, s.B, T_, s.d, U, {{&dq_, s.H}, {&dk_, s.G}, {&dv_, s.G}});
    } else {
      Tensor dq_t = alloc(dq_.shape), dk_t = alloc(dk_.shape), dv_t = alloc(dv_.shape);
      unpack_peers_to_heads(be(), recv, s.B, T_, s.d, U, {{&dq_t, s.H}, {&dk_t, s.G}, {&dv_t, s.G}});
      be().convert(dq_, dq_t);
      be().convert(dk_, dk_t);
      be().convert(dv_, dv_t);
    }
  }

  void core_teardown() override {
    ring_.teardown();
    for (Tensor* t : {&q_r_, &k_r_, &v_r_, &o_r_, &do_r_, &dq_r_, &dk_r_, &dv_r_, &send_, &recv_})
      *t = Tensor{};
  }

  void export_lse(std::vector<float>& global) override {
    // The ring core's lse [B, H/U, U*T] covers query heads [u*H/U, (u+1)*H/U) of the tokens of
    // this rank's ring index.
    const LayerShape& s = shape();
    const int hl = s.H / mesh().U;
    add_lse_rows(global, be().download(ring_.lse()), s.B, s.H, s.N, mesh().ulysses->rank() * hl, hl,
                 ring_block(mesh().ring->rank()));
  }

  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const override {
    // The ring index's tokens for the local heads: q, k, v, o, do (run dtype; kept for backward)
    // and dq, dk, dv (float32); two all-to-all buffers; the ring core's own buffers.
    const int64_t es = int64_t(dtype_size(s.dtype)), T = s.N / P, n = int64_t(m.U) * T;
    const int64_t hl = s.H / m.U, gl = s.G / m.U;
    RingCoreShape cs;
    cs.B = s.B; cs.n = n; cs.hq = int(hl); cs.hk = int(gl); cs.d = s.d; cs.dtype = s.dtype;
    return s.B * n * s.d * ((3 * hl + 2 * gl) * es + (hl + 2 * gl) * 4) +
           2 * s.B * T * s.qkv_cols() * es + RingCore::activation_bytes(cs, m.R);
  }

  RingCore ring_;
  Tensor q_r_, k_r_, v_r_, o_r_, do_r_, dq_r_, dk_r_, dv_r_;  // this ring index's tokens, local heads
  Tensor send_, recv_;
};

}  // namespace

std::unique_ptr<Strategy> make_usp() { return std::make_unique<Usp>(); }

}  // namespace cpbench
