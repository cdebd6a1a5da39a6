// The transformer block of DESIGN, written once for every strategy: an ordered sequence of
// sub-layers over ONE registry of named tensors.
//
//   attention sub-layer:  xn = rmsnorm(x)*norm_w; qkv = xn @ w_qkv; rope(q, k); o = CORE(q, k, v);
//                         h = x + o @ w_o                      (y = h under --block attn)
//   MLP sub-layer (--block full): hn = rmsnorm(h)*norm2_w; a = hn @ w_gate; b = hn @ w_up;
//                         y = h + (silu(a)*b) @ w_down
//   (and their mirror backward, in reverse order)
//
// The registry (TensorRegistry) says, for every tensor, its name, shape, dtype, what it holds
// (weight, activation, gradient, communication buffer), its dump name and how its share is
// exported for verification (token rows, a slice of a replicated or partial-sum tensor, column
// blocks of a weight shard). It allocates the tensors and frees them when the block goes away;
// export_tensor() and the dump are driven by it. Nothing keeps a hand-written list of buffers.
//
// A strategy differs from another only in how it shards and communicates:
//  - where its tokens are (token_positions) and the attention core on them (core_forward /
//    core_backward, where ulysses, the rings and allgather-kv communicate);
//  - optionally a tensor-parallel group (tp_group: the mesh's "tp" level, megatron-sp's {tp = P}
//    and usp --tp t, ulysses_ring_layer.h): the block then holds 1/t
//    of the projection weights (by heads: H/t query heads, max(G,t)/t KV heads, replicated when
//    t > G) and wraps each column-parallel GEMM in an all-gather of its normed input over the
//    group and each row-parallel GEMM in a reduce-scatter of its output (TpLevel, bench/parts/tp_level.h). The
//    attention core then runs on the group's gathered tokens ("wide" rows) for the local heads.
// With no TP group (t = 1) the gather and reduce-scatter are nothing at all: the same code runs
// the sequence-sharded strategies and single.
//
// Of Strategy's twelve virtual methods (bench/strategy.h) the block implements, once, the ones
// that run it (setup, forward, backward, export_tensor) and predicted_bytes (the attention's
// plus the MLP's), and gives activation_bytes_estimate a default; a strategy on it states the
// rest (describe, its mesh, check) and supplies the protected virtuals below.
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/block/kv_cache.h"
#include "bench/block/qkv.h"
#include "bench/parts/attn_sinks.h"
#include "bench/parts/latent_keys.h"
#include "bench/parts/ring_layout.h"
#include "bench/parts/tp_level.h"
#include "bench/strategy.h"

namespace cpbench {

// What a registered tensor holds; decides the allocator's memory kind (gradients of weights are
// counted with the weights, as the report always did).
enum class Held { weight, activation, grad, comm };

// How one rank's share of a tensor is added into the global (natural order, float32) array of
// DESIGN's dump. Summing every rank's share must give the global tensor: replicated data is
// added by one rank only (this_rank false on the others); weight gradients are partial sums.
struct ExportRule {
  enum class How { none, token_rows, slice, columns };
  struct ColBlock {     // local columns [local0, local0 + width) -> global [global0, ...)
    int64_t global0 = 0, local0 = 0, width = 0;
    bool this_rank = true;  // replicated columns (KV heads) are added by one of their holders
  };
  How how = How::none;
  bool this_rank = true;
  // token_rows: local [B, pos.count(), width] -> global [B, N, global_cols], columns from col0.
  Positions pos;
  int64_t global_cols = 0, col0 = 0, width = 0;
  // slice: local elements added at global[offset, ...) (a whole tensor: offset 0).
  int64_t offset = 0;
  // columns: local [rows, local_cols] -> global [rows, global_cols] by blocks.
  int64_t rows = 0, local_cols = 0;
  std::vector<ColBlock> blocks;

  static ExportRule tokens(const Positions& pos, int64_t global_cols, int64_t col0, int64_t width,
                           bool this_rank = true);
  static ExportRule slice(int64_t offset, bool this_rank = true);
};

class TensorRegistry {
 public:
  struct Entry {
    std::string name;   // the block's name for it ("xn", "w_qkv")
    Held held = Held::activation;
    std::string dump;   // DESIGN's dump name ("" = not exported)
    ExportRule rule;
    Tensor t;
  };
  explicit TensorRegistry(Backend* be = nullptr) : be_(be) {}
  // Allocates and registers a tensor. The name must be new.
  Tensor& add(const std::string& name, std::vector<int64_t> shape, DType dt, Held held,
              const std::string& dump = "", ExportRule rule = {});
  // Registers an existing tensor (a view of another's memory: no allocation of its own).
  Tensor& add_view(const std::string& name, Tensor t, Held held, const std::string& dump = "",
                   ExportRule rule = {});
  Tensor& operator[](const std::string& name);  // throws std::logic_error when unknown
  bool has(const std::string& name) const;
  // Elements of the tensors that hold `held` (Held::weight: the parameters this rank holds).
  int64_t elements(Held held) const;
  const Entry* by_dump(const std::string& dump) const;
  // Adds this rank's share of dump tensor `dump` into `global` (see ExportRule). Returns false
  // when no entry has that dump name.
  bool export_share(const std::string& dump, std::vector<float>& global, const LayerShape& s);

 private:
  Entry* find(const std::string& name);
  Backend* be_;
  std::deque<Entry> entries_;  // stable addresses: strategies keep references
};

class Block : public Strategy {
 public:
  Block();
  ~Block() override;
  void setup(StrategyEnv& env) final;
  void forward() final;
  void backward() final;
  void export_tensor(const std::string& name, std::vector<float>& global) final;
  int64_t activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const override;
  // The layer's bytes: the attention sub-layer's (the strategy's attention_bytes below) plus the
  // MLP sub-layer's on its own mesh (bench/parts/sublayer_mesh.h mlp_bytes). The sub-layer count
  // is written nowhere else.
  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                 int rank = kBusiestRank) const final;
  // After setup, for the whole-model memory estimate (metrics.h model_estimate): the parameters
  // this rank holds of the block (its registry's weight elements: 1/t of the projections under
  // a TP group of t), of which the norms' and the MLP's, the bytes of its input x [B, T, D], the
  // TP degree t and the MLP's; and, under
  // --cached, the bytes of its KV cache shard (the cached rows of k_cache and v_cache, its
  // heads) and the cached tokens they hold.
  struct HeldShare {
    int64_t parameters = 0, input_bytes = 0;
    int64_t norm_parameters = 0, mlp_parameters = 0;  // of `parameters` (norms: every weight held whole by every rank)
    int tp = 1, mlp_tp = 1;
    int64_t kv_cache_bytes = 0;
    int64_t cache_tokens = 0;  // the cached tokens (per sequence) whose k, v it holds
    // The activation bytes its attention core allocated at setup (lse, received or gathered K,V
    // blocks, a Ulysses member's heads): the state --recompute selective rebuilds instead of keeping.
    int64_t core_activations = 0;
  };
  HeldShare held_share();
  // DESIGN's decode bytes of the attention sub-layer (--pass decode), per step x S: each merge
  // level of R ranks all-gathers every member's partial for its H/U query heads (o float32, lse
  // float32) on its level, then (U > 1) the head group all-gathers the merged o (run dtype) on
  // "ulysses"; under a TP level of t = m.tp (H/(tU) query heads per member) w_o's output is
  // all-reduced on "tp". Helix (sublayer_mesh.h): one all-to-all over the merge level instead,
  // and w_o's all-reduce over all P. `merges`: the merge levels in order, (level, size) (a double
  // ring: inner, then outer).
  struct MergeLevel {
    std::string level;
    int size = 1;
  };
  // `member`: under --uneven-heads the rank's Ulysses index (its own query heads set its partial
  // and its share of the gather; kBusiestRank: the member with the most).
  static CommPrediction decode_prediction(const LayerShape& s, int P, const MeshSpec& m,
                                          const std::vector<MergeLevel>& merges, int U, int64_t elem, int64_t acc,
                                          int member = kBusiestRank);

  class SubLayer;  // one sub-layer of the block (block.cpp: attention, the MLP)

 protected:
  // ---- what a strategy supplies -----------------------------------------------------------------
  // DESIGN's analytic model of the attention sub-layer, from the shape alone (Strategy::
  // predicted_bytes adds the MLP's): world rank `rank`'s bytes, or the busiest rank's
  // (kBusiestRank); they differ only where Capabilities::bytes_per_rank says so.
  virtual CommPrediction attention_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                         int rank) const = 0;
  // Global positions of this rank's T tokens, in the order they are stored.
  virtual Positions token_positions(const LayerShape& s, const Mesh& mesh) const = 0;
  // The tensor-parallel group (null: none). Its members' tokens, gathered in member order, are
  // the rows the attention core sees (wide_positions).
  virtual Communicator* tp_group() { return nullptr; }
  // Positions of the rows the core sees: this rank's tokens, or the TP group's gathered tokens.
  virtual Positions wide_positions() const { return pos_; }
  // Allocate the core's own buffers (called at the end of setup).
  virtual void core_setup() {}
  // q_ [B,n,hl,d], k_, v_ [B,n,gl,d] (q, k roped; n = wide rows) -> o_ [B,n,hl,d]; keep what
  // backward needs.
  virtual void core_forward() = 0;
  // do_ [B,n,hl,d] -> dq_ [B,n,hl,d], dk_, dv_ [B,n,gl,d] (float32, overwritten).
  virtual void core_backward() = 0;
  // Add this rank's share of lse [B,H,N] (the core knows where its rows live).
  virtual void export_lse(std::vector<float>& global) = 0;
  // Extra bytes the core keeps live per rank beyond the token-local activations (estimate).
  virtual int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const = 0;
  // Every rank holds the whole block (single): only rank 0 exports.
  virtual bool replicated() const { return false; }
  // --cached C: the positions of this rank's shard of the KV cache (positions [0, C)), in the
  // order it is stored. Default: the CP group's contiguous split, C/P per rank.
  virtual Positions cache_positions(const LayerShape& s, const Mesh& mesh) const;
  // --pass decode: `merge` is the group the cache's tokens are sharded over and the partials are
  // merged in (default the CP group; null: this rank holds the whole cache, as single does);
  // `heads` the group the heads are sharded over (usp's Ulysses level: each member attends H/U
  // query heads with max(G,U)/U KV heads, and the merged o is all-gathered over it; null: none).
  // `merge_outer`: a second merge level after `merge` (usp's double ring level: the inner ring,
  // then across the inner rings); the cache's tokens are split over both, member
  // outer.rank() * merge.size() + merge.rank() holding shard r of merge.size() * outer.size().
  struct DecodeGroups {
    Communicator* merge = nullptr;
    Communicator* heads = nullptr;
    Communicator* merge_outer = nullptr;
  };
  virtual DecodeGroups decode_groups();
  // --cached prefill with the cache in the strategy's core (usp: a cache per ring index for the
  // heads Ulysses gives the rank, filled after the all-to-all) instead of the block's kc_, vc_.
  virtual bool core_holds_cache() const { return false; }
  // The KV cache this rank holds: its k and v bytes and the cached tokens (per sequence) they
  // cover (default: the block's kc_, vc_ rows of cache_pos_).
  struct CacheHeld {
    int64_t bytes = 0, tokens = 0;
  };
  virtual CacheHeld cache_held();
  // The first original KV head of member r of a TP group of t: its max(G,t)/t KV heads (one
  // head's copy when t > G) start there.
  static int64_t first_kv_head(const LayerShape& s, int t, int r) {
    const int64_t held = replicated_kv_heads(t, s);
    return int64_t(r) * (held / t) / (held / s.G);
  }
  // The activations per rank under --pass decode: R ranks share the cache's tokens, t x U its
  // heads (single: R = U = t = 1).
  static int64_t decode_activation_bytes(const LayerShape& s, int R, int U = 1, int t = 1);
  // The MLP sub-layer's activations per rank under --block full (0 otherwise): `local_rows`
  // B*T tokens, N x as many rows seen by its GEMMs on its TP level of N (sublayer_mesh.h).
  static int64_t mlp_activation_bytes(const LayerShape& s, int64_t local_rows, const MeshSpec& m);
  // The attention's per-head tensors over `rows` token rows (a TP group's gathered rows) for hl
  // query and gl KV heads: q, k, v, o, do (run dtype; v, o, do d_v wide), dq, dk, dv (float32), and
  // the projections' buffers: qkv and dqkv, or MLA's (mla.h) with, in a 16-bit run, dq, dk, dv's
  // run-dtype copies (`latent_rows`: MLA's latent_rows, mla.h).
  static int64_t tp_heads_activation_bytes(const LayerShape& s, int64_t rows, int64_t hl, int64_t gl,
                                           int64_t latent_rows = 0);

  // ---- for the cores --------------------------------------------------------------------------
  Backend& be() { return *env_.be; }
  Mesh& mesh() { return *env_.mesh; }
  const Mesh& mesh() const { return *env_.mesh; }
  const LayerShape& shape() const { return env_.shape; }
  Tensor alloc(std::vector<int64_t> shape, MemKind kind = MemKind::activations);
  Tensor alloc_f32(std::vector<int64_t> shape, MemKind kind = MemKind::activations);

  StrategyEnv env_;
  TensorRegistry reg_;
  TpLevel tp_;
  // The MLP sub-layer's TP group on its own mesh (--mlp-tp, MeshSpec::mlp_tp > 0; mlp_group()
  // is tp_ otherwise). helix_: Helix decode (sublayer_mesh.h), w_o on this group too.
  TpLevel mlp_own_;
  bool mlp_own_mesh_ = false, helix_ = false;
  TpLevel& mlp_group() { return mlp_own_mesh_ ? mlp_own_ : tp_; }
  Positions pos_;  // this rank's tokens
  int64_t T_ = 0;  // tokens per batch row on this rank
  int hl_ = 0, gl_ = 0;  // query and KV heads on this rank (H/t, max(G,t)/t)
  // The model's share of this rank's QKV GEMMs: 1, or with a tp level wider than the KV heads
  // (t > G: each KV head's projection runs on t/G ranks) (hl + 2G/t) / (hl + 2): the repeated
  // columns are hardware FLOPs, not model FLOPs, so the ranks' model FLOPs sum to the layer's.
  double qkv_model_share_ = 1.0;
  // The attention core's tensors: views of registry entries (the registry owns them).
  Tensor q_, k_, v_, o_, do_, dq_, dk_, dv_;
  // --sinks (attn_sinks.h): the logits [H] (replicated) and this rank's share of their gradient
  // [H] (registry entries "sinks", "dsinks"); sinks_ their views for this rank's hl_ query heads,
  // which a core applies (or narrows to its level's heads) where its rows' o and lse are final.
  // Off (the default SinkHeads) without --sinks.
  Tensor sink_logits_, sink_grad_;
  SinkHeads sinks_;
  // --cached C: the keys and values the queries attend, [B, Cr + n, gl, d] per batch row this
  // rank's Cr cached tokens (seeded at setup, never rewritten) then its n new ones (k_, v_
  // copied in every forward, as an engine appends them to its cache): cache_'s k and v (kv_cache.h;
  // a strategy whose core holds the cache, usp, owns its own KvCache). key_pos_ their positions.
  // Without a cache kc_, vc_ are k_ and v_ themselves and key_pos_ is the rows' positions.
  Positions cache_pos_, key_pos_;
  KvCache cache_;
  Tensor kc_, vc_;
  // --pass decode (decode_step below): step_ is the running step; decode_p_, decode_r_ the size
  // of the decode group and this rank's place in it (the owner of step i's cache slot is rank
  // i % decode_p_, its slot Cr + i / decode_p_); o_steps_, lse_steps_ keep every step's merged
  // output [B, S, hl, d] and lse [B, hl, S] for verification.
  // decode_u_, decode_ui_ the head group's size and this rank's index; dhq_ query heads from
  // dq0_, dgk_ KV heads (replicated when U > G) from original head dkv0_, exported by the first
  // of their copies (dkv_exporter_). --uneven-heads (ulysses_level.h's split): dgrep_, dhead0_ the
  // slice's GQA map, dkv_skip_ its leading KV heads an earlier member exports (a straddled head).
  int64_t step_ = 0;
  DecodeGroups decode_groups_;  // decode_groups(), looked up once at setup (the steps use it)
  int decode_p_ = 1, decode_r_ = 0, decode_u_ = 1, decode_ui_ = 0;
  int dhq_ = 0, dq0_ = 0, dgk_ = 0, dkv0_ = 0, dkv_local_ = 0;  // dkv_local_: dkv0_ in k_'s heads
  bool dkv_exporter_ = true;
  int dgrep_ = 0, dhead0_ = 0, dkv_skip_ = 0;
  // --uneven-heads: the head group's gather of the merged o in uneven shares (exchange_uneven's
  // offsets and sizes, elements), fixed at setup.
  std::vector<int64_t> ogather_send_off_, ogather_send_n_, ogather_recv_off_, ogather_recv_n_;
  // A partial is [o | lse] in one buffer of the partial dtype (--partial-dtype: o float32, or bf16
  // rounded at every merge; lse float32 either way): RingCore's format (ring_core.h,
  // partial_elems, lse_view); o_acc_ the running merge in the partial dtype.
  Tensor part_, gathered_, o_acc_, lse_acc_, o_steps_, lse_steps_;
  // Helix: this rank owns hx_ = H/P query heads from global head hx0_ (slice decode_r_ of its
  // member's dhq_); the partials travel by destination (helix_send_, one chunk per merge-group
  // member) and arrive in helix_recv_.
  int hx_ = 0, hx0_ = 0;
  Tensor helix_send_, helix_recv_;
  Tensor q_heads_, o_part_run_, o_heads_;  // U > 1 (or a non-f32 partial): this member's heads
  // MLA's decode (absorbed_attention): this member's absorbed queries and their latent output.
  Tensor q_abs_, o_lat_;
  // bf16/fp16 runs: dq, dk, dv in the run dtype, in qkv's memory (dead once q, k, v are split
  // out of it; nothing exports them), so the conversion allocates nothing and adds no memory.
  Tensor dq_run_, dk_run_, dv_run_;
  // --mla-travel latent: what a ring level moves instead of k_, v_ (MLA's projections, set before
  // core_setup; latent_keys.h); null otherwise. The core's backward then leaves the latent's
  // gradient there and does not write dk_, dv_.
  LatentKeys* latent_keys_ = nullptr;
  // Under latent travel, whether the core uses this rank's own tokens' expanded k_, v_ (and dk_,
  // dv_): a ring of the ring family expands its own block into them; a Ulysses member expands its
  // heads of the group's latent into its own buffers, and then the block allocates none.
  virtual bool latent_keeps_local_kv() const { return true; }
  // Whether the block holds k_, v_, dk_, dv_ for shape s (all but a Ulysses member's latent travel
  // and MLA's decode, whose cache takes the latent).
  bool holds_local_kv(const LayerShape& s) const {
    return !s.latent_cache() && !(s.mla_latent && describe().can.mla_latent && !latent_keeps_local_kv());
  }

 private:
  class AttentionSubLayer;
  class MlpSubLayer;
  // --pass decode: the buffers of decode_attention (after the sub-layers' setup), one step's
  // attention on this rank's shard with the partials merged over the merge group (and o gathered
  // over the head group), the export of what the ranks hold (k, v from the slots they own).
  void decode_setup();
  void decode_attention();
  // --recompute: runs `forward` again inside the backward with the comm log and the compute
  // records on Phase::recompute (then back to the phase it interrupted); in verify (the backend
  // poisons) the registry's tensors `regenerated` are NaN first, so the backward reads only what
  // the repeated forward wrote.
  void recompute_forward(std::initializer_list<const char*> regenerated, const std::function<void()>& forward);
  // MLA's absorbed decode of this member's query heads q [B, 1, dhq_, d] over the latent cache:
  // writes the partial's o (po, d_v wide) and lse (pl).
  void absorbed_attention(const AttnShape& a, const Tensor& q, Tensor& po, Tensor& pl);
  void export_decode(const std::string& name, std::vector<float>& global);  // k, v, o, lse
  // Helix: this rank's partial (part_) to the heads' owners in one all-to-all over the merge
  // group, and the merge of the R partials of the hx_ heads it owns into o_ (and the kept steps).
  void helix_merge(const AttnShape& a);
  std::vector<std::unique_ptr<SubLayer>> sublayers_;
  int64_t core_activations_ = 0;  // HeldShare::core_activations, measured around core_setup
};

}  // namespace cpbench
