// allgather-kv — Llama 3's context parallelism (Dubey et al. 2024; TransformerEngine's
// all_gather CP mode). Queries stay sharded in the zigzag layout (the sequence cut into 2P chunks
// of N/(2P); rank r holds chunks r and 2P-1-r, which balances the causal work); K,V are
// all-gathered, put in natural order, and each rank runs one attention of its two query chunks
// against the whole sequence (the kernel skips the keys its queries cannot see). Nothing
// overlaps: for GQA, K,V are small next to Q, and the gather is one collective per layer.
// Backward: K,V are gathered again (the gathered copy is not kept across the layer: that is
// the memory the method saves), attention backward accumulates float32 dK,dV for the whole
// sequence, and a reduce_scatter returns each rank the sum for its own tokens.
// Bytes per rank: fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*(P-1).
#include <algorithm>
#include <sstream>

#include "bench/strategies/layout.h"
#include "bench/strategies/seq_sharded_layer.h"
#include "comm/communicator.h"

namespace cpbench {

namespace {

class AllgatherKV final : public SeqShardedLayer {
 public:
  std::string name() const override { return "allgather-kv"; }

  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    if (s.N % (2 * int64_t(P)) != 0) {
      std::ostringstream e;
      e << "allgather-kv: seq=" << s.N << " is not divisible by 2*P=" << 2 * P;
      throw ConstraintError(e.str());
    }
  }

  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec&, int64_t elem,
                                 int64_t acc) const override {
    const int64_t T = s.B * s.N / P, hk = int64_t(s.G) * s.d;
    const int64_t gather = elem * T * 2 * hk * (P - 1);
    return {gather, gather + acc * T * 2 * hk * (P - 1)};
  }

 protected:
  Positions token_positions(const LayerShape& s, const Mesh& m) const override {
    const int64_t P = m.P, r = m.cp->rank(), c = s.N / (2 * P);
    return Positions::two(r * c, c, (2 * P - 1 - r) * c, c);
  }

  AttnShape attn_shape() const {
    const LayerShape& s = shape();
    AttnShape a;
    a.B = s.B; a.nq = T_; a.nk = s.N; a.hq = s.H; a.hk = s.G; a.d = s.d; a.causal = s.causal;
    return a;
  }

  int64_t kv_elems() const { return shape().B * T_ * shape().G * shape().d; }  // one of k, v

  void core_setup() override {
    const LayerShape& s = shape();
    lse_ = alloc_f32({s.B, s.H, T_});
    delta_ = alloc_f32({s.B, s.H, T_});
    kv_send_ = alloc({2 * kv_elems()}, MemKind::comm);
  }

  // All-gathers this rank's k|v and returns the whole K and V, [B,N,G,d] each, in natural order.
  void gather_kv(Tensor& k_full, Tensor& v_full) {
    const LayerShape& s = shape();
    Communicator& c = *mesh().cp;
    const int P = c.size();
    const int64_t e = kv_elems(), Gd = int64_t(s.G) * s.d;
    Tensor kd = kv_send_.view(0, {e}), vd = kv_send_.view(e, {e});
    be().copy_2d(kd, e, k_, e, 1, e);
    be().copy_2d(vd, e, v_, e, 1, e);
    Tensor gathered = alloc({int64_t(P) * 2 * e}, MemKind::comm);  // [P][k | v], rank order
    c.all_gather(kv_send_, gathered);
    k_full = alloc({s.B, s.N, s.G, s.d});
    v_full = alloc({s.B, s.N, s.G, s.d});
    gathered_to_natural(be(), gathered, s.B, T_, Gd, P, RankChunks::zigzag, k_full, 2 * e);
    gathered_to_natural(be(), gathered.view(e, {gathered.numel() - e}), s.B, T_, Gd, P,
                        RankChunks::zigzag, v_full, 2 * e);
  }

  void core_forward() override {
    const Positions all = Positions::contiguous(0, shape().N);
    Tensor k_full, v_full;  // dropped on return
    gather_kv(k_full, v_full);
    be().attn_fwd(attn_shape(), q_, k_full, v_full, pos_, all, o_, lse_);
  }

  void core_backward() override {
    const LayerShape& s = shape();
    Communicator& c = *mesh().cp;
    const int P = c.size();
    const int64_t e = kv_elems(), Gd = int64_t(s.G) * s.d, full = s.B * s.N * Gd;
    const Positions all = Positions::contiguous(0, s.N);
    be().attn_bwd_delta(attn_shape(), o_, do_, delta_);
    Tensor dkv_full;  // dK | dV of the whole sequence, natural order, float32
    {
      Tensor k_full, v_full;
      gather_kv(k_full, v_full);  // allocated after it, so never live with the gathered copy
      dkv_full = alloc_f32({2 * full});
      Tensor dk_full = dkv_full.view(0, {s.B, s.N, s.G, s.d}), dv_full = dkv_full.view(full, {s.B, s.N, s.G, s.d});
      be().fill(dq_, 0.0f);
      be().fill(dkv_full, 0.0f);
      be().attn_bwd(attn_shape(), q_, k_full, v_full, do_, lse_, delta_, pos_, all, dq_, dk_full, dv_full);
    }
    // Rank j's tokens (zigzag chunks j, 2P-1-j) of dK|dV go to chunk j; the sum over ranks of
    // chunk j lands on rank j. Float32 (s_acc) like the ring strategies' accumulators.
    Tensor rs_send = alloc_f32({int64_t(P) * 2 * e}, MemKind::comm);
    natural_to_gathered(be(), dkv_full.view(0, {full}), s.B, T_, Gd, P, RankChunks::zigzag, rs_send, 2 * e);
    Tensor rs_send_v = rs_send.view(e, {rs_send.numel() - e});
    natural_to_gathered(be(), dkv_full.view(full, {full}), s.B, T_, Gd, P, RankChunks::zigzag, rs_send_v, 2 * e);
    dkv_full = Tensor{};
    Tensor rs_recv = alloc_f32({2 * e}, MemKind::comm);
    c.reduce_scatter(rs_send, rs_recv);
    be().copy_2d(dk_, e, rs_recv.view(0, {e}), e, 1, e);
    be().copy_2d(dv_, e, rs_recv.view(e, {e}), e, 1, e);
  }

  void core_teardown() override { lse_ = delta_ = kv_send_ = Tensor{}; }

  void export_lse(std::vector<float>& global) override {
    const LayerShape& s = shape();
    add_lse_rows(global, be().download(lse_), s.B, s.H, s.N, 0, s.H, pos_);
  }

  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec&) const override {
    // Kept: lse, delta (float32) and the k|v send buffer. Transient, the largest of three
    // moments: gathered k|v + natural-order K,V (reordering); K,V + float32 dK,dV of the whole
    // sequence (attention backward); dK,dV + the reduce_scatter's send buffer (reordering; dK,dV
    // are dropped before the small receive buffer is allocated).
    const int64_t es = int64_t(dtype_size(s.dtype)), T = s.N / P;
    const int64_t e = s.B * T * s.G * s.d, full = 2 * s.B * s.N * s.G * s.d;
    const int64_t kept = 2 * s.B * s.H * T * 4 + 2 * e * es;
    const int64_t reorder = 2 * full * es, attn = full * es + full * 4, rs = 2 * full * 4;
    return kept + std::max({reorder, attn, rs});
  }

  Tensor lse_, delta_, kv_send_;
};

}  // namespace

std::unique_ptr<Strategy> make_allgather_kv() { return std::make_unique<AllgatherKV>(); }

}  // namespace cpbench
