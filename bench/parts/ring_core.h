// The ring-attention core (Liu et al. 2023; the ring-flash-attention algorithm) shared by ring,
// ring-zigzag, ring-striped and usp (through the schedule part, bench/parts/ring_schedule.h).
//
// R ranks of a ring each hold the q, k, v of n tokens per batch row. Forward: the K,V blocks
// (k|v packed in one run-dtype buffer) travel `hops` hops (R-1 for the full ring) to the next
// rank while the block in hand is computed; partial (o, lse) are merged online, the running
// output kept in float32 for bf16/fp16 runs and converted once at the end. Backward
// (FlashAttention-2, with the FINAL o and lse): K,V travel the ring again, and the float32 dK,dV
// accumulator of each block travels WITH it: every rank adds its contribution to the
// accumulator of the block it holds and passes it on; after the last hop one more send returns
// it to the block's owner (for the full ring that send is the R-th hop to the next rank). The
// causal mask comes from the global positions of query rows and key columns only, so the token
// layout alone decides the work balance.
//
// Both loops are compositions of the steps below (post a hop, compute the block in hand and
// merge it, wait for the hop): a truncated ring runs fewer hops (K_eff, DESIGN's ring hop
// truncation), a two-level ring composes the same steps over two communicators. forward() runs
// the shape's travel policy (ring_travel.h): the K,V loop here, or a policy whose queries travel
// (ring_travel_q.cpp, ring_travel_q_a2a.cpp) built on the same steps.
//
// Bytes per rank (DESIGN, with T the B*n tokens of a ring rank, 2hk = kv heads * (d + d_v) its
// k|v elements per token (2 * kv heads * d without MLA), h = hops):
//   fwd = s*T*2hk*h;  bwd = s*T*2hk*h + s_acc*T*2hk*(h+1 if h > 0 else 0);  h = R-1 gives
//   DESIGN's full-ring terms (both 0 when R = 1). Under MLA's latent travel (latent_keys.h) 2hk is
//   the latent's r_kv + d_rope: the block and its accumulator are the latent and its gradient.
//   Under --comm-dtype s*T*2hk is the encoded block's kv_transit_bytes(T*2hk): 2 bytes a value as
//   bf16; as fp8 1 a value plus a scale byte per 32 values, or one per block.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "bench/parts/balance.h"
#include "bench/parts/latent_keys.h"
#include "bench/parts/ring_travel.h"
#include "bench/block/block.h"
#include "comm/communicator.h"

namespace cpbench {

// What one ring rank works on. Heads are the LOCAL head counts (usp: H/U, max(G,U)/U).
struct RingCoreShape {
  int64_t B = 1, n = 0;  // batch, tokens per batch row on each ring rank
  int hq = 0, hk = 0, d = 0;
  int d_v = 0;             // the values' (and o's) head dim (MLA); 0: d
  int rep = 0, head0 = 0;  // a head slice's GQA map (AttnShape; --uneven-heads); 0, 0: hq / hk
  bool causal = true;
  int64_t window = 0;  // sliding window (0 = none)
  DocStarts docs;      // packed documents (null = one)
  DType dtype = DType::f32;
  // --partial-dtype, --acc-dtype (16-bit runs): bf16 keeps the running merged output in the run
  // dtype (rounded at every merge, no float32 copy) and rounds the dK,dV accumulators to bf16
  // at every hop (they travel at s_acc = 2). Float32 (default) is the rounding points of DESIGN.
  DType partial_dtype = DType::f32, acc_dtype = DType::f32;
  bool running_f32() const { return dtype != DType::f32 && partial_dtype == DType::f32; }
  // The travel policy (ring_travel.h): setup also allocates its buffers, forward() runs it.
  RingTravel travel = RingTravel::kv;
  // Keys (and values) per batch row on each ring rank: under --cached a rank's cache shard and
  // its n new tokens (the K,V blocks that circulate, and the keys a visiting Q meets); 0 = n.
  // Forward only: backward needs nk = n.
  int64_t nk = 0;
  int64_t keys() const { return nk > 0 ? nk : n; }
  int vdim() const { return d_v > 0 ? d_v : d; }
  // Elements of this rank's tensors: q, o (and a partial's o) over its n queries; k, v and the
  // packed k|v (or dk|dv) block over its keys.
  int64_t q_elems() const { return B * n * hq * d; }
  int64_t o_elems() const { return B * n * hq * vdim(); }
  int64_t k_elems() const { return B * keys() * hk * d; }
  int64_t v_elems() const { return B * keys() * hk * vdim(); }
  int64_t kv_elems() const { return k_elems() + v_elems(); }
  // --mla-travel latent (latent_keys.h): the values per token of the block that travels instead of
  // k|v (r_kv + d_rope); 0: k|v travels. The traveling block and its accumulator hold
  // travel_elems() elements.
  int latent = 0;
  int64_t travel_elems() const { return latent > 0 ? B * keys() * latent : kv_elems(); }
  // --comm-dtype: what travels, encoded (kv_transit_bytes bytes; fp8: u8 codes and scales): the
  // k|v block under K,V travel (encoded()), the Q block under a policy whose queries travel
  // (q_encoded(); ring_travel_q.cpp, ring_travel_q_a2a.cpp).
  KvTransit transit = KvTransit::run;
  Fp8Scaling transit_scaling = Fp8Scaling::block;
  bool encoded() const { return transit != KvTransit::run && !ring_travel(travel).queries_travel; }
  bool q_encoded() const { return transit != KvTransit::run && ring_travel(travel).queries_travel; }
  // Bytes of a block of `elems` values as it travels: encoded (kv_transit_bytes) or in the run
  // dtype; a K,V block (travel_elems, encoded()) and a Q block (q_elems, q_encoded()).
  int64_t travel_bytes(int64_t elems, bool enc) const {
    return enc ? kv_transit_bytes(elems, int64_t(dtype_size(dtype)), transit, transit_scaling)
               : elems * int64_t(dtype_size(dtype));
  }
  int64_t kv_block_bytes() const { return travel_bytes(travel_elems(), encoded()); }
  int64_t q_block_bytes() const { return travel_bytes(q_elems(), q_encoded()); }
};

// Global positions of the n tokens ring rank j holds, in storage order.
using BlockPositions = std::function<Positions(int j)>;

// One hop in flight: a send and a receive.
struct RingHop {
  Request recv, send;
};

// A travel policy's own buffers (ring_travel.h), allocated by its setup: tensors, and the hops
// it keeps in flight at once.
struct RingTravelBuffers {
  std::vector<Tensor> t;
  std::vector<RingHop> hops;
};

class RingCore {
 public:
  // Allocates the core's buffers (lse, delta, one block result, the float32 running output for
  // bf16/fp16, comm buffers when R > 1). All allocation happens here: the loops allocate nothing.
  // `key_pos`: the positions of ring rank j's keys when they differ from its queries' (--cached:
  // its cache shard, then its new tokens); empty = block_pos.
  // `latent` (s.latent > 0): MLA's latent travel (latent_keys.h): the latent travels and each
  // receiver up-projects it; backward() then leaves this rank's latent gradient in latent.grad
  // and writes no dk, dv (k, v: the own block, which the caller expanded).
  void setup(Backend& be, Communicator& ring, const RingCoreShape& s, BlockPositions block_pos,
             BlockPositions key_pos = {}, const LatentBlock& latent = {});
  // For a composition that runs its own loop (double_ring_core.h): the step buffers only (no
  // comm buffers), this rank at ring position `position` of R. forward()/backward() need setup().
  void setup_steps(Backend& be, int position, int R, const RingCoreShape& s, BlockPositions block_pos,
                   BlockPositions key_pos = {}, const LatentBlock& latent = {});
  // q [B,n,hq,d], k [B,n,hk,d], v [B,n,hk,dv] (run dtype) -> o [B,n,hq,dv] (run dtype); lse()
  // [B,hq,n] f32 (dv = the shape's vdim(): d unless MLA).
  // `hops` in [0, R-1] (-1: R-1): the blocks of the ranks up to `hops` places before this one
  // (kv), or the positions up to `hops` places ahead whose queries visit (q, q-a2a). Runs the
  // shape's travel policy (ring_travel.h).
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, int hops = -1);
  // kv's forward: K,V blocks travel to the next rank while the block in hand is computed.
  void forward_kv(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, int hops = -1);
  // With the forward's final o (and lse, kept here) and dout [B,n,hq,dv]:
  // dq [B,n,hq,d], dk [B,n,hk,d], dv [B,n,hk,dv] float32, overwritten. Same `hops` as the forward.
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, int hops = -1);
  const Tensor& lse() const { return lse_; }
  // Frees the buffers (a fresh core), for a test that sets one core object up again; a core
  // inside a strategy is freed with it.
  void teardown();

  // ---- steps ------------------------------------------------------------------------------------
  // One hop in flight: `send` to group rank `to`, `recv` from group rank `from`.
  using Hop = RingHop;
  static constexpr int kTagFwdKV = 101, kTagBwdKV = 102, kTagBwdAcc = 103, kTagQ = 104, kTagPartial = 105;
  Hop post_hop(Communicator& c, const Tensor& send, int to, Tensor& recv, int from, int tag);
  void wait_hop(Communicator& c, Hop& h);
  // Positions of the tokens ring position j holds (the layout given to setup).
  Positions block_positions(int j) const { return block_pos_(j); }
  // Forward: start a fresh running result; add the block k|v `kv` of ring rank `owner` (skipped
  // when no query sees it); write the result to o (converted from float32 when bf16/fp16).
  void fwd_begin();
  void fwd_block(const Tensor& q, const Tensor& kv, int owner, Tensor& o);
  // The same for any keys: k [B, nk, hk, d], v [B, nk, hk, dv] (nk from k's shape) at positions kpos (the
  // dynamic ring's blocks differ in size from one member to the next).
  void fwd_keys(const Tensor& q, const Tensor& k, const Tensor& v, const Positions& kpos, Tensor& o);
  void fwd_end(Tensor& o);
  // Backward: delta from the final o and dout, dq zeroed (before the first bwd_block).
  void bwd_begin(const Tensor& o, const Tensor& dout, Tensor& dq);
  // Backward: this rank's contribution to block `owner`'s dK|dV, written (not added) into the
  // float32 accumulator `acc` [kv_elems()]; dq accumulates.
  // (Under latent travel `kv` is a block's latent: fwd_block and bwd_block up-project it, or use
  // the own k, v pack_block was given, and bwd_block writes the latent's gradient: bwd_latent.)
  void bwd_block(const Tensor& q, const Tensor& kv, int owner, const Tensor& dout, Tensor& dq, Tensor& acc);
  // Any keys k, v (as fwd_keys) at kpos: dq and dk, dv of their shapes (float32) accumulate
  // (nothing when no pair is visible).
  void bwd_keys(const Tensor& q, const Tensor& k, const Tensor& v, const Positions& kpos, const Tensor& dout,
                Tensor& dq, Tensor& dk, Tensor& dv);
  // Latent travel: the block `lat` of ring rank `owner` as the kernels' keys: this rank's own k,
  // v (pack_block's) when it is the owner, else `lat` up-projected into the core's block buffers
  // (kb, vb: views of either). False, with nothing expanded, when no query here sees the block.
  bool latent_block(const Tensor& lat, int owner, Tensor& kb, Tensor& vb);
  // Latent travel's bwd_block: this rank's contribution to block `owner`'s latent gradient, written
  // into the float32 `acc` [travel_elems()]; dq accumulates.
  void bwd_latent(const Tensor& q, const Tensor& lat, int owner, const Tensor& dout, Tensor& dq, Tensor& acc);
  // The accumulator steps under --acc-dtype (the traveling dK|dV buffers are in s.acc_dtype; with
  // bf16 a block's contribution and the sums are float32 and each hop rounds once):
  // acc_sum: where a block's float32 contribution is computed, for the traveling buffer `acc`
  // (acc itself when float32, else a float32 scratch of its size); add_arrived: sum += an arrived
  // accumulator (widened); store_acc: the sum into the buffer that travels (rounded; nothing when
  // float32); acc_to_grads: dk [B,n,hk,d], dv [B,n,hk,dv] float32 from the last one.
  Tensor acc_sum(Tensor& acc);
  void add_arrived(Tensor& sum, const Tensor& arrived);
  void store_acc(Tensor& acc, const Tensor& sum);
  void acc_to_grads(const Tensor& acc, Tensor& dk, Tensor& dv);
  // The k or v part of a packed k|v (or dk|dv) buffer, shaped [B,n,hk,d] or [B,n,hk,dv].
  Tensor kv_view(const Tensor& buf, int which) const;
  // k and v into one packed k|v buffer (the block that travels).
  void pack_kv(const Tensor& k, const Tensor& v, Tensor& buf);
  // The block this rank sends first: k|v packed, or under latent travel its latent (and k, v
  // kept as this rank's own expanded block for fwd_block, bwd_block: a loop packs before them).
  void pack_block(const Tensor& k, const Tensor& v, Tensor& buf);
  // pass-Q steps, for a composition that runs its own Q schedule (double_ring_core.h). A partial
  // is [o B*n*hq*dv | lse B*hq*n], one buffer of partial_elems() elements of partial_dtype(): o in
  // float32, or under --partial-dtype bf16 in bf16 (rounded at every merge), its lse float32
  // either way (a float32 view of the elements after o; an even head dim keeps it aligned), so a
  // partial travels as one message of s_part*o + 4*lse bytes. q_block: this rank's K,V
  // contribution to the Q block `q` of ring position `owner`, written into `part` (o = 0,
  // lse = -inf when no pair is visible); merge_partial: `in` merged into `part` (online
  // softmax); pass_q_end: the final partial to o (run dtype) and lse(), as forward() leaves them.
  DType partial_dtype() const { return s_.partial_dtype; }
  int64_t partial_elems() const { return partial_elems(s_.o_elems(), s_.B * s_.hq * s_.n, s_.partial_dtype); }
  // The format itself, shared with decode's partials (Block): the elements of a partial of `o` o
  // elements and `rows` lse rows in dtype dt, and the float32 view of its lse at element `offset`
  // of `buf` (a 16-bit buffer: the 2*rows elements there, reinterpreted; the offset must be even).
  static int64_t partial_elems(int64_t o, int64_t rows, DType dt) { return o + rows * 4 / int64_t(dtype_size(dt)); }
  static Tensor lse_view(const Tensor& buf, int64_t offset, int64_t rows, std::vector<int64_t> shape);
  void q_block(const Tensor& q, int owner, const Tensor& k, const Tensor& v, Tensor& part);
  void merge_partial(Tensor& part, const Tensor& in);
  void pass_q_end(const Tensor& part, Tensor& o);
  // The Q block in transit (the policies whose queries travel; --comm-dtype: s_.q_encoded()): a
  // buffer for it (the run dtype, or the encoding's dtype and bytes), this rank's own q into one
  // (encoded once, by its owner), and an arrived one as the kernels take it (decoded into the
  // core's q_dec_, or itself). q_travel_bytes: the bytes of one such buffer, and the decoded one.
  Tensor alloc_q_travel();
  // A buffer for a K,V block in transit (the travel elements in the run dtype, or encoded under
  // s_.encoded()): the single ring's double buffer and the double ring's four.
  Tensor alloc_kv_travel();
  Tensor alloc_travel(int64_t elems, bool enc);  // both: a block of elems values as it travels
  void q_depart(const Tensor& q, Tensor& buf);
  const Tensor& q_in_hand(const Tensor& arrived);
  static int64_t q_travel_bytes(const RingCoreShape& s, int buffers);

  // For the travel policies' loops (ring_travel_*.cpp): what the core was set up with.
  Backend& backend() const { return *be_; }
  Communicator& ring() const { return *ring_; }
  const RingCoreShape& shape() const { return s_; }
  AttnShape attn_shape() const;
  int resolve_hops(int hops) const;  // -1: R-1; throws beyond R-1
  Positions key_positions(int j) const { return key_pos_(j); }
  bool any_visible(const Positions& qpos, const Positions& kpos) const;
  Tensor& lse_out() { return lse_; }     // the forward's lse, written by a policy
  Tensor& block_out() { return o_blk_; }  // one block's output in the run dtype (R > 1)
  Tensor part_o(const Tensor& buf) const;    // a partial's o half, [B,n,hq,dv] (partial_dtype())
  Tensor part_lse(const Tensor& buf) const;  // its lse half, [B,hq,n] float32

  // DESIGN's ring hop truncation: K_eff, the farthest hop k (1..R-1) at which some ring rank r
  // receives a block (that of rank r-k) it has a visible pair with; 0 if none. R-1 without a
  // window or documents. A pure function of the blocks' positions and the mask.
  static int effective_hops(int R, const BlockPositions& block_pos, const LayerShape& s);
  // The same with the keys' positions apart from the queries' (--cached: rank r's keys are its
  // cache shard plus its new tokens).
  static int effective_hops(int R, const BlockPositions& q_pos, const BlockPositions& k_pos, const LayerShape& s);
  // pass-Q's K_eff is the same number (DESIGN: pass-KV's rule with queries and keys swapped):
  // at hop k rank r holds the query block of rank r+k against its own keys, the same pairs as
  // pass-KV's rank r+k holding rank r's keys; under --cached the keys are the cache shard plus the
  // new tokens, the queries the new tokens only (the unit test scans pass-Q's pairs literally).
  // Bytes the core keeps allocated per rank: lse, delta, block o and lse, the float32 running
  // and block output for bf16/fp16, and when R > 1 two k|v buffers (run dtype; --comm-dtype: encoded,
  // with the own block and a decoded one in the run dtype) and three dk|dv
  // accumulators (float32) (latent travel: of the latent, plus one expanded block k, v in the run
  // dtype and its dk, dv in float32), and the travel policy's buffers.
  static int64_t activation_bytes(const RingCoreShape& s, int R);
  // DESIGN's ring terms for R ranks, `tokens` = B*n per rank, `kv` = its k|v elements per token
  // (kv heads * (d + d_v): 2 * kv heads * d for GQA), `hops` hops (-1: R-1, the full ring).
  // `level`: the mesh level the ring runs on ("cp" or "ring"), for the per-tier prediction.
  // `transit`/`scaling` (--comm-dtype): a block's bytes are kv_transit_bytes of its T*kv values.
  static CommPrediction predicted_bytes(int64_t tokens, int64_t kv, int R, int64_t elem, int64_t acc,
                                        int hops = -1, const std::string& level = "ring",
                                        KvTransit transit = KvTransit::run, Fp8Scaling scaling = Fp8Scaling::block);
  // One Q block's partial (the pass-Q policies): o (`ho` = query heads * d_v per token; `acc` =
  // s_part bytes per element: 4, or 2 under --partial-dtype bf16) and lse (float32) over `heads`
  // rows per token.
  static int64_t partial_bytes(int64_t tokens_q, int64_t ho, int64_t heads, int64_t acc) {
    return acc * tokens_q * ho + 4 * tokens_q * heads;
  }
 private:
  Backend* be_ = nullptr;
  Communicator* ring_ = nullptr;
  RingCoreShape s_;
  BlockPositions block_pos_, key_pos_;
  Tensor lse_, delta_, o_blk_, lse_blk_;
  Tensor o_acc32_, o_blk32_;  // bf16/fp16: running and block output in float32
  bool have_ = false;         // the running result holds a block (fwd_begin resets it)
  int me_ = 0;                // this rank's ring position
  Tensor kv_[2];   // k|v blocks, run dtype (double buffer: one computed on, one arriving)
  Tensor acc_[3];  // dk|dv accumulators (acc_dtype): [0],[1] computed on / in flight, [2] arriving
  Tensor acc32_[2];  // acc_dtype bf16: the float32 contribution of the block in hand, the arriving sum widened
  LatentBlock latent_;            // latent travel (latent_keys.h); off: k|v travel
  Tensor lk_, lv_, ldk_, ldv_;    // latent travel: a received block expanded (run dtype), its dk, dv (float32)
  Tensor own_k_, own_v_;          // latent travel: this rank's own k, v (views of the caller's, from pack_block)
  // --comm-dtype (s_.encoded()): kv_ hold the encoded block (bf16, or u8 under fp8); own_kv_ is this
  // rank's k|v as formed (what it computes its own block on), dec_ a received block decoded.
  Tensor own_kv_, dec_;
  Tensor q_dec_;  // --comm-dtype under pass-Q (s_.q_encoded()): an arrived Q block decoded
  const Tensor& block_in_hand(const Tensor& kv, int owner);  // kv, or its decoded values
  RingTravelBuffers travel_;  // the travel policy's (ring_travel.h)
};

}  // namespace cpbench
