// megatron-sp — Megatron-LM tensor parallelism with sequence parallelism (Korthikanti et al.
// 2022) over the P ranks of the CP group, as the reference point for the CP strategies: it
// shards the WEIGHTS (by heads) as well as the token-local activations, at the price of moving
// the model dimension D instead of only K,V.
//   x, y, dx, dy are sequence shards [B, N/P, D] (contiguous tokens); rmsnorm is local.
//   f: all_gather xn -> [B,N,D]; column-parallel QKV with this rank's columns of w_qkv (query
//      heads [r*H/P, (r+1)*H/P) and kv heads [r*G/P, (r+1)*G/P): the GQA mapping stays local;
//      when P > G (G divides P), kv head r*G/P: its columns replicated on P/G ranks, as
//      Megatron replicates KV heads for tensor parallelism beyond the KV head count);
//      RoPE at global positions; attention over the whole sequence for those heads;
//      row-parallel w_o (rows of this rank's heads) -> partial [B,N,D] -> reduce_scatter.
//   b: all_gather dy; do = dy_full w_o_shard^T, dw_o_shard; attention backward; inverse RoPE;
//      dxn partial = dqkv w_qkv_shard^T -> reduce_scatter; xn is all-gathered AGAIN for
//      dw_qkv_shard = xn_full^T dqkv (the forward dropped its gathered copy: Megatron's
//      activation-memory saving); rmsnorm backward local.
// All of this is the block (block.h) on the mesh {tp = P}: the whole CP group is its tensor-
// parallel group (its collectives' group is named "tp", result mesh.tp = P), the
// block shards the weights by heads and wraps its column- and row-parallel GEMMs in the gather
// and reduce-scatter; this file adds only the token layout and the attention core (one local
// attention over the whole sequence for this rank's heads).
// Weights and their gradients exist only as shards (MemKind::weights), which is what the
// memory report shows; dnorm_w is a per-rank partial sum (verification sums it), and so are the
// gradients of replicated KV columns. The timed step allocates nothing: the gathered and
// reduce-scattered [B,N,D] buffers are the block's TP slots, allocated in setup.
// Bytes per rank: fwd = 2*s*T*D*(P-1); bwd = 3*s*T*D*(P-1); under --block full the MLP's
// all-gather of hn, reduce-scatter after w_down (and in backward all-gather of dy, reduce-scatter
// of dhn, re-gather of hn) add as much again.
#include <sstream>

#include "bench/block/block.h"
#include "bench/parts/layout.h"
#include "bench/parts/sublayer_mesh.h"
#include "comm/communicator.h"

namespace cpbench {

namespace {

class MegatronSP final : public Block {
 public:
  StrategyDesc describe() const override {
    StrategyDesc d{"megatron-sp",
                   "Megatron-LM tensor + sequence parallelism, the mesh {tp = P}: all-gather xn, head-sharded\n"
                   "QKV, attention and w_o, reduce-scatter back to token shards; weights sharded.",
                   "P divides heads; P divides kv_heads or is a multiple (kv heads replicated); P divides seq; P divides "
                   "ffn_dim (--block full)",
                   "all-gather/reduce-scatter over all P ranks: tensor parallelism, keep its P ranks inside one node",
                   {}};
    // --pass decode: tensor-parallel decode (the serving baseline CP is compared with): every rank
    // holds the whole cache for its H/P query heads and max(G,P)/P KV heads; nothing is merged,
    // each sub-layer all-reduces its B x D output (bench/parts/tp_level.h TpLevel).
    d.can.decode = true;
    d.can.mla = true;  // MLA's up-projections split by heads over its tp level (bench/block/mla.h)
    return d;
  }

  // The mesh {tp = P} (DESIGN "Tensor parallelism inside the CP mesh": megatron-sp is t = P).
  MeshSpec resolve_mesh(const MeshSpec& req, const LayerShape&, int P) const override {
    MeshSpec m;
    m.tp = P;
    m.U = 1;
    m.R = 1;
    m.placement = req.placement;
    return m;
  }
  MeshDesc mesh_desc(const MeshSpec& m) const override {
    MeshDesc d;
    d.levels = {{"tp", m.tp}};
    return d;
  }

  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    std::ostringstream e;
    const std::string heads = head_sharding_error(P, s, "P");
    if (s.decode()) {  // the heads over the P tp ranks, the whole cache on each
      if (!heads.empty())
        e << "megatron-sp: " << heads << " (--pass decode shards the heads over the P tp ranks)";
      else if (s.full_block && s.F % P != 0)
        e << "megatron-sp: P=" << P << " does not divide ffn_dim=" << s.F << " (w_gate, w_up split by columns)";
      else if (s.D % P != 0)
        e << "megatron-sp: P=" << P << " does not divide dim=" << s.D
          << " (--pass decode all-reduces each sub-layer's output as D/P columns per rank)";
    } else if (!heads.empty() && s.uneven_heads)  // a tp level splits w_qkv by heads: --uneven-heads does not apply
      e << "megatron-sp: " << heads << " (its tp level splits w_qkv by heads; --uneven-heads splits a Ulysses "
        << "level only: use ulysses or usp)";
    else if (!heads.empty())  // train, prefill: the sequence over the P ranks too
      e << "megatron-sp: " << heads << "; "
        << (max_ulysses_degree(P, s) == 1 ? std::string("use a ring strategy (or usp with ulysses=1)")
                                          : "use usp with ulysses<=" + std::to_string(max_ulysses_degree(P, s)));
    else if (s.N % P != 0)
      e << "megatron-sp: seq=" << s.N << " is not divisible by P=" << P;
    else if (s.full_block && s.F % P != 0)
      e << "megatron-sp: P=" << P << " does not divide ffn_dim=" << s.F << " (w_gate, w_up split by columns)";
    if (!e.str().empty()) throw ConstraintError(e.str());
  }

  // All collectives over the tp level, the whole CP group (the MLP's: the block's term).
  CommPrediction attention_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                 int) const override {
    if (s.decode()) return decode_prediction(s, P, m, {}, 1, elem, acc);
    return tp_sublayer_bytes(s, P, P, "tp", elem);
  }

  int64_t activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const override {
    if (s.decode()) return Block::activation_bytes_estimate(s, P, m);  // the mesh {tp = P}
    // Token-local, kept: x, dy, xn, y, dxn, dx (run dtype), rstd (float32).
    // Whole sequence for this rank's heads, kept: qkv, dqkv, q, k, v, o, do (run dtype); dq, dk,
    // dv, lse, delta (float32).
    // Transient [B,N,D] buffers at the backward's peak: the re-gathered xn and the dgrad partial
    // sum, plus the reduce_scatter's reordered send buffer when B > 1.
    const int64_t es = int64_t(dtype_size(s.dtype)), T = s.N / P, BT = s.B * T, BN = s.B * s.N;
    const int64_t hl = s.H / P, gl = replicated_kv_heads(P, s) / P;
    const int64_t local = BT * 6 * s.D * es + BT * 4;
    const int64_t heads = tp_heads_activation_bytes(s, BN, hl, gl) + 2 * s.B * hl * s.N * 4;
    const int64_t transient = (s.B > 1 ? 3 : 2) * BN * s.D * es;
    return local + heads + transient + mlp_activation_bytes(s, BT, m);
  }

 protected:
  // Contiguous token shards; the whole CP group is the tensor-parallel group, so the attention
  // core sees the whole sequence for this rank's heads.
  Positions token_positions(const LayerShape& s, const Mesh& m) const override {
    const int64_t T = s.N / m.P;
    return Positions::contiguous(m.cp->rank() * T, T);
  }
  Communicator* tp_group() override { return &env_.mesh->group("tp"); }
  DecodeGroups decode_groups() override { return {}; }  // the heads are the tp level's: no merge
  Positions wide_positions() const override { return Positions::contiguous(0, env_.shape.N); }

  void core_setup() override {
    const LayerShape& s = shape();
    lse_ = alloc_f32({s.B, hl_, s.N});
    delta_ = alloc_f32({s.B, hl_, s.N});
  }
  void core_forward() override {
    const Positions all = wide_positions();
    be().attn_fwd(attn_shape(), q_, k_, v_, all, all, o_, lse_);
    sinks_.forward(be(), attn_shape(), o_, lse_);
  }
  void core_backward() override {
    const Positions all = wide_positions();
    Backend& b = be();
    sinks_.backward(b, attn_shape(), o_, do_, lse_);
    b.attn_bwd_delta(attn_shape(), o_, do_, delta_);
    b.fill(dq_, 0.0f);
    b.fill(dk_, 0.0f);
    b.fill(dv_, 0.0f);
    b.attn_bwd(attn_shape(), q_, k_, v_, do_, lse_, delta_, all, all, dq_, dk_, dv_);
  }
  void export_lse(std::vector<float>& global) override {
    const LayerShape& s = shape();
    add_lse_rows(global, be().download(lse_), s.B, s.H, s.N, tp_.rank() * hl_, hl_, wide_positions());
  }
  int64_t core_activation_bytes(const LayerShape&, int, const MeshSpec&) const override { return 0; }

 private:
  AttnShape attn_shape() const {
    const LayerShape& s = env_.shape;
    AttnShape a;
    a.B = s.B; a.nq = s.N; a.nk = s.N; a.hq = hl_; a.hk = gl_; a.d = s.d; a.d_v = s.d_v; a.causal = s.mask.causal;
    a.window = s.mask.window; a.docs = s.mask.docs;
    return a;
  }

  Tensor lse_, delta_;  // this rank's heads over the whole sequence
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_megatron_sp() { return std::make_unique<MegatronSP>(); }

}  // namespace cpbench
