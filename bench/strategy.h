// The strategy plug-in interface. A strategy is one file in bench/strategies/ that plans its
// shards, runs forward and backward of DESIGN's block (every strategy does it through the one
// Block of bench/block/block.h, supplying its sharding and communication), states its analytic
// communication model, its summary, constraints and meshes, and exports its share of the global
// tensors for verification. Adding one touches no other file but its registration line in
// bench/registry.cpp (CMake picks up every bench/strategies/*.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/parts/ring_travel.h"
#include "comm/communicator.h"
#include "comm/world.h"
#include "kernels/backend.h"

namespace cpbench {

// A shape or mesh a strategy cannot run. The message names the constraint and the values.
struct ConstraintError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --balance (DESIGN "Balancing packed documents"): none keeps a strategy's static layout; the
// others map document tokens to ring positions (bench/parts/balance.h).
enum class BalanceScheme { none, doc_zigzag, greedy, dynamic };
const char* balance_name(BalanceScheme b);
BalanceScheme parse_balance(const std::string& s);  // throws std::invalid_argument

// Which keys a query of the layer sees (DESIGN "Masks, documents and passes"): the causal rule,
// a sliding window, packed documents. attn() is the kernels' form (kernels/backend.h AttnMask).
struct LayerMask {
  bool causal = true;
  int64_t window = 0;             // sliding window W (0 = none)
  std::vector<int64_t> doc_lens;  // packed documents, summing to N; empty = one document
  DocStarts docs;                 // their start positions (null = one document), for the kernels
  AttnMask attn() const { return AttnMask{causal, window, docs}; }
};

// The pass a layer runs (DESIGN "Inference passes"): train (forward and backward); prefill
// (forward only) {cached, travel}; decode {cached, steps}.
enum class PassKind { train, prefill, decode };
struct LayerPass {
  PassKind kind = PassKind::train;
  // --cached C: positions [0, C) are already in a KV cache sharded over the CP ranks (their
  // roped k, v seeded, not computed). Prefill: the N - C new tokens at [C, N) are this layer's
  // tokens, their queries attend the cache and, causally, each other (persistent-KV prefill).
  // Decode: N = C. 0 = no cache.
  int64_t cached = 0;
  RingTravel travel = RingTravel::kv;  // prefill: --ring-pass, what a ring level moves (ring_travel.h)
  // Decode (--decode-steps S): one forward runs S decode steps, step i adding one token per
  // sequence at position C + i (its x replicated on every rank).
  int64_t steps = 0;
};

// --recompute (DESIGN "Recompute", Megatron's meaning): what the backward runs again before it
// needs it. selective: the attention core (Block::core_forward, where the levels communicate)
// before its backward; full: every sub-layer's forward before the block's backward. The repeated
// communication is Phase::recompute; its model is the forward's shares of what is repeated.
enum class Recompute { none, selective, full };

// One layer's problem: its sizes (DESIGN notation), its mask, its pass, and the layout and block
// choices.
// --attention mla (DeepSeek-V2/V3, arXiv:2405.04434 and 2412.19437; bench/block/mla.h): the
// compressed ranks and head dims of multi-head latent attention. The attention core then sees H
// query and H key/value heads (G = H), scores over d = d_nope + d_rope, values d_v wide.
struct MlaDims {
  int q_rank = 0;  // the query's compressed rank; 0: no query compression (q = xn·W_UQ | xn·W_QR)
  int kv_rank = 0, d_nope = 0, d_rope = 0, d_v = 0;
};

struct LayerShape {
  int64_t B = 1, N = 0;
  int H = 0, G = 0, d = 0, D = 0;
  int d_v = 0;  // the values' (and o's) head dim; 0: d (every GQA model)
  int vdim() const { return d_v > 0 ? d_v : d; }
  bool mla = false;  // --attention mla: the projections of bench/block/mla.h instead of w_qkv
  MlaDims mla_dims;
  // --mla-travel latent: a ring or Ulysses level moves MLA's latent [c_kv | k_R] (r_kv + d_rope
  // values per token) and each receiver up-projects it (bench/parts/latent_keys.h); false: expanded heads.
  bool mla_latent = false;
  // The values per token a ring block holds: the latent's, or k|v's G(d + d_v).
  int64_t ring_block_row() const {
    return mla_latent ? int64_t(mla_dims.kv_rank) + mla_dims.d_rope : int64_t(G) * (d + vdim());
  }
  // MLA's decode (absorbed; DESIGN "Decode"): its cache holds the latent [c_kv | k_R] of each
  // token, one row of latent_width() values shared by every head, instead of k, v per KV head.
  bool latent_cache() const { return mla && decode(); }
  int64_t latent_width() const { return int64_t(mla_dims.kv_rank) + mla_dims.d_rope; }
  bool rope = true;
  bool sinks = false;  // --sinks: one learned logit per query head in the softmax (bench/parts/attn_sinks.h)
  // --uneven-heads: a Ulysses level splits heads it does not divide (bench/parts/ulysses_level.h)
  bool uneven_heads = false;
  float eps = 1e-5f;
  double rope_theta = 10000.0;
  DType dtype = DType::f32;
  // --partial-dtype, --acc-dtype: the K,V ring's running merged output and the dK,dV accumulators
  // that travel back to their owner: f32 (default) or bf16 (rounded at every merge / hop).
  DType partial_dtype = DType::f32, acc_dtype = DType::f32;
  // --dtype fp8 (dtype is then bf16): q, k, v and a KV cache quantized to e4m3 with power-of-two
  // scales where they are formed (Backend::quantize_fp8), P in e4m3 (Backend::set_fp8_attention).
  bool fp8 = false;
  Fp8Scaling fp8_scaling = Fp8Scaling::block;
  KvTransit kv_transit = KvTransit::run;  // --comm-dtype (its fp8 takes fp8_scaling's scales)
  // The byte model's s_acc: the dK,dV accumulators' bytes (train), and in a forward-only pass the
  // partials' s_part (pass-Q's and decode's o: --partial-dtype).
  int64_t acc_bytes() const {
    return int64_t(dtype_size(forward_only() ? partial_dtype : acc_dtype));
  }
  LayerMask mask;
  LayerPass pass;
  BalanceScheme balance = BalanceScheme::none;  // --balance: the ring family's token layout
  // --cp-cap under --balance dynamic: tokens per rank a document may fill before it takes a CP
  // group of more ranks (c = min(P, next power of two of ceil(L / cap))); 0 = N/P.
  int64_t cp_cap = 0;
  bool full_block = false;  // --block full: the SwiGLU MLP sub-layer after attention
  int64_t F = 0;            // its width (--ffn-dim), under full_block
  Recompute recompute = Recompute::none;  // --recompute (train): what the backward repeats

  bool prefill() const { return pass.kind == PassKind::prefill; }
  bool decode() const { return pass.kind == PassKind::decode; }
  // Forward only: prefill and decode (no backward runs, no backward bytes are predicted).
  bool forward_only() const { return pass.kind != PassKind::train; }
  bool queries_travel() const { return ring_travel(pass.travel).queries_travel; }
  int64_t new_tokens() const { return N - pass.cached; }
  // Token rows of the global tensors (verify, dump): N, or under decode the S new tokens.
  int64_t token_rows() const { return decode() ? pass.steps : N; }
  // The shape the layouts place under --cached: the N - C new tokens as a sequence of their own
  // (no cache); after_cache (bench/parts/ring_layout.h) moves its positions back to C..N-1.
  LayerShape without_cache() const {
    LayerShape fresh = *this;
    fresh.N = new_tokens();
    fresh.pass.cached = 0;
    return fresh;
  }
  int64_t qkv_cols() const { return int64_t(H + 2 * G) * d; }
};

// The order of usp's ulysses and ring levels (the tp level is always innermost):
// ulysses-inner (default) makes each Ulysses group contiguous ranks, ring-inner each ring group.
enum class Placement { ulysses_inner, ring_inner };
const char* placement_name(Placement p);
Placement parse_placement(const std::string& s);  // throws std::invalid_argument

// The requested mesh; U = R = 0 means "the strategy's default".
enum class RingLayout { auto_, zigzag, contiguous };  // usp's ring layout: auto = zigzag iff causal
enum class UspRing { single, double_ };                // usp's ring level: one ring, or a double ring
struct MeshSpec {
  int U = 0, R = 0;
  // The tensor-parallel level (DESIGN "Tensor parallelism inside the CP mesh"): t ranks,
  // innermost (contiguous world ranks), t*U*R = P. 1 = none (every strategy but usp and
  // megatron-sp, which is the mesh {tp = P}).
  int tp = 1;
  Placement placement = Placement::ulysses_inner;
  RingLayout ring_layout = RingLayout::auto_;
  // Double ring (LoongTrain): ranks per inner ring. Requested: 0 = the ring's members on one
  // node (from ranks_per_node), or R when that is unknown or does not divide R. Resolved: w >= 1
  // for double-ring and for usp with usp_ring = double; 0 for a single ring level.
  int inner_ring = 0;
  UspRing usp_ring = UspRing::single;
  // Ranks per node, for the default inner ring (the harness sets it: --ranks-per-node, or the
  // ranks sharing this host); 0 = unknown.
  int ranks_per_node = 0;
  // The MLP sub-layer's own mesh (--mlp-tp N, DESIGN "Per-sub-layer meshes"): its GEMMs tensor-
  // parallel over N contiguous ranks (the levels {mlp_dp = P/N, mlp_tp = N}) instead of the
  // attention's tp level. Resolved: 0 when the MLP runs on the attention's tp level (no flag, or
  // N equal to it), else N. N = P under --pass decode is Helix (bench/parts/sublayer_mesh.h).
  int mlp_tp = 0;

  // The mesh these degrees and placement describe (Mesh::build builds it), outermost first:
  // {ring, ulysses}, or with a double ring {ring_outer R/w, ring_inner w, ulysses}, the
  // placement's inner level of the two after the other; then "tp" last (contiguous ranks) when
  // tp > 1.
  MeshDesc desc() const;
  // The report's levels, innermost first, size-1 levels included: tp, then the placement's
  // inner and outer level (a double ring as ring_inner, ring_outer).
  std::vector<MeshLevel> levels_innermost_first() const;
};

// The inner ring size for a request (see MeshSpec::inner_ring) on a ring of m.R ranks: the
// explicit value when it divides R, else the default. Throws ConstraintError naming `who` and
// the values when an explicit value does not divide R.
int resolve_inner_ring(const MeshSpec& m, const std::string& who);

// One share of a rank's predicted bytes: sent on `level` of the mesh ("cp": all P ranks) in
// `phase`, spread evenly over the level's other members (to = 0: all-to-all, all-gather,
// reduce-scatter) or to the member `to` places after this rank in the level's group order (a ring
// hop: +1; the dK,dV accumulators of a truncated ring going back to their owner: -hops).
struct CommShare {
  std::string level;
  Phase phase = Phase::fwd;
  int to = 0;
  int64_t bytes = 0;
};

// Bytes sent by one rank per layer (DESIGN's analytic model): the totals, and where they go
// (what the per-tier prediction needs: bench/tiers.h).
struct CommPrediction {
  int64_t fwd = 0, bwd = 0;
  int64_t rec = 0;  // Phase::recompute: the forward's shares that --recompute repeats (Block::predicted_bytes)
  std::vector<CommShare> shares;  // sums to fwd, bwd and rec per phase
  // Adds one share (bytes 0 is dropped) and its bytes to the phase's total.
  CommPrediction& add(const std::string& level, Phase ph, int to, int64_t bytes);
  CommPrediction& add(const CommPrediction& o);  // appends o's shares and totals
};

// What a strategy works with while it runs.
struct StrategyEnv {
  Backend* be = nullptr;
  World* world = nullptr;
  Mesh* mesh = nullptr;
  LayerShape shape;
  uint64_t seed = 0;
  MeshSpec spec;  // the job's resolved mesh (U, R, placement, ring layout, inner ring)
};

// What a strategy can run beyond the training pass of its own layout (plan_jobs refuses the rest
// with one message per capability; `cpbench list --json` prints them).
struct Capabilities {
  // --ulysses/--ring/--placement/--mesh/--tp configure it (usp): --mesh all enumerates its
  // mesh_candidates, a mesh named with those options that it cannot run is an error, not a skip.
  bool mesh = false;
  // --ring-pass q (query blocks circulate): the ring family (bench/strategies/ring_family.h, its
  // travel parts) and usp's ring level; single (nothing circulates) runs unchanged as the reference.
  bool pass_q = false;
  // --balance doc-zigzag|greedy: the strategy places tokens by the balanced layout (ring, the
  // double ring, usp's ring level); dynamic: ring only, whose ring becomes one ring per CP group.
  bool balance = false, balance_dynamic = false;
  // --cached C: its new tokens' queries attend a sharded KV cache (the ring family, the double
  // ring, usp, ulysses and single; Block's cache, block.h, or the core's).
  bool cached = false;
  // --pass decode: the cache sharded over the CP group, partials merged by one all-gather
  // (Block's decode step, block.h): the ring family, the double ring, usp, ulysses, megatron-sp
  // (tensor-parallel decode: heads over its tp level, nothing merged) and single.
  bool decode = false;
  // Under --balance dynamic (train, prefill) its ranks send different amounts (ring: each rank's
  // groups hold different token counts): the harness asks predicted_bytes for each rank.
  bool bytes_per_rank = false;
  // --uneven-heads: its Ulysses level splits heads it does not divide (ulysses, usp); its ranks
  // then send different amounts (the harness asks predicted_bytes for each rank).
  bool uneven_heads = false;
  // --attention mla (bench/block/mla.h): its levels move MLA's expanded heads (H key heads of
  // d_nope + d_rope, values d_v), a tp level splitting the up-projections by heads. Every strategy.
  bool mla = false;
  // --mla-travel latent (bench/parts/latent_keys.h): its levels move MLA's latent and each receiver
  // up-projects it: the ring family (its single and double rings), ulysses and usp.
  bool mla_latent = false;
  // --comm-dtype bf16|fp8: its K,V ring blocks travel encoded (ring_core.h): ring, ring-zigzag,
  // ring-striped (a single ring; not --balance dynamic's groups).
  bool kv_transit = false;
  bool supports(BalanceScheme b) const {
    return b == BalanceScheme::none || (b == BalanceScheme::dynamic ? balance_dynamic : balance);
  }
};

// What a strategy states about itself: its registered name, its description for README and
// `cpbench list`, and what it can run. Data, fixed per strategy (a preset's comes from its data).
struct StrategyDesc {
  std::string name;         // registered name: "ring-zigzag"
  std::string summary;      // two lines for README / `cpbench list`
  std::string constraints;  // human-readable constraints, one line
  std::string tiers;        // where its bytes go on a cluster of nodes (intra- vs inter-node), one line
  Capabilities can;
  // Every rank runs the whole layer on the whole sequence, sharding nothing (single, the
  // reference): its job's FLOPs are P times the layer's, its ranks hold every token and the whole
  // cache, and --mlp-tp leaves it unchanged.
  bool replicated = false;
};

// Under --balance: the ring positions the balanced layout spans and the one each world rank works
// on (Strategy::balance_positions).
struct BalancePositions {
  int count = 0;
  std::vector<int> of_rank;  // [P]
};

// The plug-in interface: twelve virtual methods, each a question whose answer differs between
// strategies. Everything else a caller asks (name, capabilities, label, per-rank bytes, balance
// positions) is derived from them by the non-virtual helpers below.
class Strategy {
 public:
  virtual ~Strategy() = default;

  // ---- what it is ---------------------------------------------------------------------------
  virtual StrategyDesc describe() const = 0;
  std::string name() const { return describe().name; }
  Capabilities capabilities() const { return describe().can; }

  // ---- its mesh -----------------------------------------------------------------------------
  // The mesh this strategy runs on, from the request and world size P. Throws ConstraintError
  // when the request is impossible (U*R != P ...). Default (sequence-sharded over all ranks):
  // U=1, R=P.
  virtual MeshSpec resolve_mesh(const MeshSpec& requested, const LayerShape& s, int P) const;
  // The meshes `--mesh all` runs for this strategy on P ranks: requests to resolve_mesh, each
  // with `base`'s placement and layout. Default: `base` alone; usp: every U x R = P.
  virtual std::vector<MeshSpec> mesh_candidates(const MeshSpec& base, int P) const {
    (void)P;
    return {base};
  }
  // The levels the strategy's communicators come from, for a resolved mesh: what the harness
  // passes to Mesh::build (equal descriptions may share one built mesh). The MLP's own levels
  // (MeshSpec::mlp_tp) are added by job_mesh_desc (bench/parts/sublayer_mesh.h), for every
  // strategy alike.
  virtual MeshDesc mesh_desc(const MeshSpec& m) const { return m.desc(); }
  // Its name plus its mesh when it takes one ("usp[u2xr2]", "double-ring[w4]"); label() adds
  // the MLP's own mesh. --strategies names a mesh by its mesh_label.
  virtual std::string mesh_label(const MeshSpec& m) const { (void)m; return name(); }
  // Label of one result: mesh_label, then the MLP's own mesh when it has one ("ring+mlp4"). The
  // one place a result's label is formatted (reports, tables, dump directories use it).
  std::string label(const MeshSpec& m) const {
    return mesh_label(m) + (m.mlp_tp > 0 ? "+mlp" + std::to_string(m.mlp_tp) : std::string());
  }
  // Under --balance (a strategy with can.balance): the balanced layout spans the ring level's
  // positions (P; usp: its ring level R) and each world rank works on its ring index (the rank
  // itself; usp: its ring index, shared by its t*U ranks), read from mesh_desc.
  BalancePositions balance_positions(const MeshSpec& m, int P) const;

  // ---- what it can run ----------------------------------------------------------------------
  // Throws ConstraintError naming the constraint and values when it cannot run this shape on
  // this mesh of P ranks, for the shape's pass: plan_jobs asks only for the passes its
  // capabilities declare. A strategy dispatches on the pass itself, with the helpers below:
  // under --pass decode the cache's constraints (check_cache_shards: an equal cache shard per
  // rank, or its own), under --cached prefill check_new_tokens (its layout's constraints on the
  // N - C new tokens), else its layout's.
  virtual void check(const LayerShape& s, int P, const MeshSpec& m) const = 0;

  // ---- its model ----------------------------------------------------------------------------
  // DESIGN's analytic model, computed from the shape alone (never from the comm log): bytes sent
  // by world rank `rank`, or with kBusiestRank the busiest rank's (the same for every rank unless
  // can.bytes_per_rank: ring --balance dynamic). elem = s (bytes of the communicated dtype),
  // acc = s_acc (ring gradient accumulators).
  static constexpr int kBusiestRank = -1;
  virtual CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                         int rank = kBusiestRank) const = 0;
  // True when predicted_bytes differs between ranks for this shape (the harness then asks for each).
  bool predicts_per_rank(const LayerShape& s) const {
    if (capabilities().uneven_heads && s.uneven_heads) return true;
    return capabilities().bytes_per_rank && !s.decode() && s.balance == BalanceScheme::dynamic;
  }
  // Analytic activation memory per rank (bytes of tensors saved or live across the layer);
  // reported beside the measured peak.
  virtual int64_t activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const = 0;

  // ---- running it (Block implements these for every strategy) --------------------------------
  // Allocate buffers and fill the seeded inputs and weights of this rank's shard.
  virtual void setup(StrategyEnv& env) = 0;
  virtual void forward() = 0;
  virtual void backward() = 0;
  // Buffers are freed by the destructor (the harness drops the object after each job).

  // Verification: add this rank's share of global tensor `name` (DESIGN's dump list, natural
  // token order, float32) into `global`, which has the full global size and is zero on entry.
  // Summing the arrays of all ranks must give the global tensor: replicated data is written by
  // one rank only; weight gradients are partial sums.
  virtual void export_tensor(const std::string& name, std::vector<float>& global) = 0;

 protected:
  // For check(): --pass decode with an equal cache shard per rank (P | C).
  void check_cache_shards(const LayerShape& s, int P) const {
    if (s.pass.cached % P != 0)
      throw ConstraintError(name() + ": cached=" + std::to_string(s.pass.cached) + " is not divisible by P=" +
                            std::to_string(P) + ": each rank holds an equal cache shard (--pass decode)");
  }
  // For check(): --cached C prefill. An equal cache shard per rank (P | C), then check() of the N - C
  // new tokens as a shape of their own (without_cache: its layout places only them); a message
  // then says so.
  void check_new_tokens(const LayerShape& s, int P, const MeshSpec& m) const;
};

// Registry (bench/registry.cpp): one entry per strategy, its description (the strategy's own
// describe()) and its factory.
struct StrategyInfo : StrategyDesc {
  std::function<std::unique_ptr<Strategy>()> make;
};
const std::vector<StrategyInfo>& strategy_registry();
const StrategyInfo* find_strategy(const std::string& name);  // null if unknown

// Largest u dividing P, H and G: the widest Ulysses all-to-all without KV replication (usp's
// default mesh, and the hint of the head-constrained strategies' errors).
int max_ulysses_degree(int P, const LayerShape& s);

// Head sharding over u ranks (Ulysses groups, Megatron-SP): each rank takes H/u query heads
// and max(G,u)/u KV heads. When u > G (G divides u), the G KV heads are replicated u/G times
// (copy c of head g is head g*(u/G) + c of the replicated set) and their gradients summed back.
// Returns "" when u can shard these heads, else the violated constraint with its values
// ("ulysses=4 does not divide heads=6").
std::string head_sharding_error(int u, const LayerShape& s, const std::string& what);
// KV heads after replication for u ranks: max(G, u).
inline int replicated_kv_heads(int u, const LayerShape& s) { return s.G >= u ? s.G : u; }

// Names and global shapes of the tensors of the dump (DESIGN order; with the MLP's under
// --block full, the sinks' logits and gradient under --sinks, and under --attention mla (`mla`
// non-null) its projections' weights and gradients instead of w_qkv's).
std::vector<std::string> dump_tensor_names(bool full_block = false, bool sinks = false, const MlaDims* mla = nullptr);
std::vector<int64_t> global_tensor_shape(const std::string& name, const LayerShape& s);

}  // namespace cpbench
