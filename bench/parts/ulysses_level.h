// The Ulysses level of a mesh (DeepSpeed Ulysses; usp's "ulysses" level): inside a group of U
// ranks, an all-to-all turns q, k, v from "my tokens, all heads" into "the group's tokens, H/U
// query heads and Ge/U KV heads"; after the core, an all-to-all brings o back. Backward mirrors
// it: do travels like q, and dq, dk, dv travel back like o (in the run dtype).
//
// KV replication (U > G, G divides U; DeepSpeed / verl): the G kv heads are replicated
// f = U/G times before the all-to-all (copy c of head g is head g*f + c, so rank u receives a
// copy of head u/f, the one its query heads [u*H/U, (u+1)*H/U) use) and their gradients summed
// back over the f copies (in float32) after the backward all-to-all.
//
// Uneven heads (--uneven-heads; DeepSpeed #6392, verl #1226): member u takes query heads
// [floor(u*H/U), floor((u+1)*H/U)) and the KV heads those use, [first/rep, (last-1)/rep] with
// rep = H/G; a KV head whose query heads straddle two members goes to both (no replication
// factor: U need not divide H or G). The all-to-alls then move uneven amounts: U-1 sends and
// receives per member (comm/'s point-to-point, what NCCL's all-to-all is) and a local copy of its
// own chunk; the members' dk, dv of a shared KV head are summed in float32 after the backward
// exchange. The member's attention runs on its slice with AttnShape's head-slice map (rep, head0).
//
// MLA's latent travel (--mla-travel latent; latent_keys.h): q goes by all-to-all as always, but
// the keys and values do not: the members all-gather the latent [c_kv | k_R] of the group's tokens
// (r_kv + d_rope values per token) and each up-projects it for its own heads; o comes back by
// all-to-all. Backward: do out and dq back by all-to-all, and each member's latent gradient (its
// heads' share, float32) reduce-scattered back to the tokens' owners, which sums the shares.
//
// Token order: a member's T tokens are `nseg` equal segments (the zigzag's two chunks, else
// one), and the group's tokens after the all-to-all are the members' segments interleaved so
// that the sequence is in position order (bench/parts/layout.h's pack/unpack).
//
// Here: the running level (setup allocates, the steps allocate nothing), its term of the byte
// model and the memory it keeps. The strategy composes it with a ring level
// (bench/strategies/ulysses_ring_layer.cpp) and, under a tp level, runs it on the TP rank's heads.
#pragma once
#include <cstdint>

#include "bench/parts/layout.h"
#include "bench/strategy.h"
#include "kernels/backend.h"

namespace cpbench {

class Communicator;

// What one member gives the level: B batch rows of T tokens, H query heads and G KV heads of d
// values (a TP rank's heads under a tp level), split over U members; `nseg` segments per member.
struct UlyssesShape {
  int64_t B = 1, T = 0;
  int H = 0, G = 0, d = 0, U = 1, nseg = 1;
  int d_v = 0;  // v's and o's elements per head (MLA's d_v); 0: d
  int vdim() const { return d_v > 0 ? d_v : d; }
  DType dtype = DType::f32;
  bool uneven = false;  // --uneven-heads: the split above (no replication)
  int latent = 0;       // --mla-travel latent: the latent's values per token (r_kv + d_rope); 0: k, v travel
  int kv_copies() const { return uneven ? 1 : (G >= U ? G : U) / G; }  // f
  int Ge() const { return G * kv_copies(); }               // KV heads after replication
  int64_t group_tokens() const { return int64_t(U) * T; }  // tokens per batch row after the exchange
  // Which heads each member takes: query heads over H; KV heads over Ge (even: slice j of the
  // copies) or over G (uneven: the ranges its query heads use, which may overlap).
  HeadSplit q_split() const;
  HeadSplit kv_split() const;
  // Member u's attention problem: its query and KV head counts and the GQA map of its slice
  // (AttnShape's rep and head0; 0, 0 when even).
  int hq(int u) const { return q_split().count[size_t(u)]; }
  int hk(int u) const { return kv_split().count[size_t(u)]; }
  int head_rep() const { return uneven ? H / G : 0; }
  int head0(int u) const { return uneven ? q_split().first[size_t(u)] % (H / G) : 0; }
  int kv_slots() const;  // uneven: the KV heads the members hold together (sum of hk(u))
  // Elements of the largest exchange, q|k|v: every member's heads of my tokens (send) or my heads
  // of every member's tokens (receive).
  int64_t exchange_elems() const;
  // The uneven split of H query and G KV heads over U members alone (for decode and the models).
  static UlyssesShape uneven_split(int H, int G, int U);
};

class UlyssesLevel {
 public:
  // Allocates the exchange buffers (and the copies' under replication).
  void setup(Backend& be, Communicator& group, const UlyssesShape& s);
  const UlyssesShape& shape() const { return s_; }

  // Forward, before the core: q [B,T,H,d], k, v [B,T,G,d] -> q_r [B,U*T,H/U,d], k_r, v_r
  // [B,U*T,Ge/U,d] (run dtype). v, o, do and dv here are d_v wide per head (vdim(): MLA's d_v).
  void scatter_qkv(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& q_r, Tensor& k_r, Tensor& v_r);
  // After the core: o_r [B,U*T,H/U,d] -> o [B,T,H,d].
  void gather_o(const Tensor& o_r, Tensor& o);
  // Latent travel (s.latent > 0), instead of scatter_qkv: q [B,T,H,d] -> q_r [B,U*T,H/U,d] by
  // all-to-all; this member's latent [B*T, latent] -> the group's lat_r [B*U*T, latent] (run dtype,
  // position order) by all-gather.
  void scatter_q(const Tensor& q, Tensor& q_r);
  void gather_latent(const Tensor& lat, Tensor& lat_r);
  // Latent travel, instead of gather_grads: dq_r [B,U*T,H/U,d] (run dtype) -> dq [B,T,H,d] float32
  // (`dq_run`: run-dtype scratch of dq's size); this member's latent gradient dlat_r [B*U*T,
  // latent] (float32, its heads' share) -> the sum over the members for this member's tokens,
  // dlat [B*T, latent] (float32), by reduce-scatter.
  void gather_dq(const Tensor& dq_r, Tensor& dq, Tensor& dq_run);
  void scatter_latent_grad(const Tensor& dlat_r, Tensor& dlat);
  // Backward, before the core: dout [B,T,H,d] -> do_r [B,U*T,H/U,d].
  void scatter_do(const Tensor& dout, Tensor& do_r);
  // After the core: the gradients in the run dtype (dq_r, dk_r, dv_r [B,U*T,*,d]) -> dq [B,T,H,d],
  // dk, dv [B,T,G,d] in float32 (the f copies summed). `dq_run`, `dk_run`, `dv_run` are run-dtype
  // scratch of dq's, dk's, dv's element counts (unused when the run dtype is f32).
  void gather_grads(const Tensor& dq_r, const Tensor& dk_r, const Tensor& dv_r, Tensor& dq, Tensor& dk, Tensor& dv,
                    Tensor& dq_run, Tensor& dk_run, Tensor& dv_run);

 private:
  // dk or dv of the f copies [B,T,G*f,w] (run dtype) summed into `dst` [B,T,G,w] float32.
  void sum_kv_copies(const Tensor& copies, Tensor& dst, int w);  // w: elements per head (d for k, d_v for v)
  // Uneven: the members' dk or dv [B,T,kv_slots,w] (run dtype; member 0's heads first) summed
  // per KV head into `dst` [B,T,G,w] float32.
  void sum_kv_slots(const Tensor& slots, Tensor& dst, int w);
  // One exchange's chunks (elements, member order), fixed at setup: from the tokens side each
  // member gets its heads (send sizes `n`, every receive this member's n[me]), or back (the reverse).
  struct Chunks {
    std::vector<int64_t> send_off, send_n, recv_off, recv_n;
    static Chunks to_heads(const std::vector<int64_t>& n, int me);
    static Chunks to_tokens(const std::vector<int64_t>& n, int me);
  };
  // The exchange: all_to_all when the members' chunks are equal, else (uneven) one send and one
  // receive per other member and a copy of this member's own chunk.
  void exchange(const Tensor& send, const Chunks& c, Tensor& recv);

  Backend* be_ = nullptr;
  Communicator* c_ = nullptr;
  UlyssesShape s_;
  Tensor send_, recv_;        // the largest exchange: q|k|v of T tokens
  Tensor k_rep_, v_rep_;      // f > 1: the replicated k, v [B,T,G*f,d]; in backward dk, dv copies
                              // uneven: the members' dk, dv [B,T,kv_slots,d]
  Tensor copy_run_, copy32_;  // f > 1: one copy [B,T,G,d] (run dtype; float32 when not f32)
                              // uneven: one slot [B,T,1,d]; acc32_ the sum of a head's slots
  Tensor acc32_;
  Tensor lat_all_, lat_grad_;  // latent travel: the all-gather's [U,B,T,latent] (run dtype), the reduce-scatter's (float32)
  // The splits (query heads; KV heads; under uneven heads the members' KV slots of the backward),
  // this member's head counts and the exchanges' chunks, from setup: the steps compute none.
  HeadSplit q_split_, kv_split_, slot_split_;
  int hq_ = 0, hk_ = 0;
  Chunks qkv_, o_, do_, grads_;
  Chunks q_, dq_;  // latent travel: q alone to heads, dq alone back
};

// The exchange of uneven chunks: `send` elements [send_off[j], +send_n[j]) go to member j of `c`,
// member i's arrive at `recv` [recv_off[i], +recv_n[i]); U-1 receives and sends (point-to-point,
// tag 0; NCCL posts them as one group) and a local copy of this member's own chunk. An all-gather
// of uneven shares is the case of equal send offsets.
void exchange_uneven(Backend& be, Communicator& c, const Tensor& send, const std::vector<int64_t>& send_off,
                     const std::vector<int64_t>& send_n, Tensor& recv, const std::vector<int64_t>& recv_off,
                     const std::vector<int64_t>& recv_n);

// ---- the byte model's terms (bytes sent per rank per layer) ------------------------------------
// Train and prefill: q, k, v out and o back in forward, do out and dq, dk, dv back in backward,
// each an all-to-all keeping 1/U: s*Tn*(H + Ge)*(d + d_v)*(U-1)/U per direction (2*(H + Ge)*d
// without MLA), Tn = B*(N-C)/P
// new tokens per rank, Ge = max(G, t*U) the KV heads held after replication over the whole model
// (DESIGN's usp model). U = 1: nothing.
CommPrediction ulysses_level_bytes(const LayerShape& s, int P, int t, int U, int64_t elem);
// --uneven-heads: member u's bytes, to each other member j (shares to one member, for the tiers):
// forward its tokens' q, k, v of j's heads and o of its own heads for j's tokens, backward do of
// j's heads and dq, dk, dv of its own: s*Tw*(hq(j)*d + hk(j)*(d + d_v) + hq(u)*d_v) forward,
// s*Tw*(hq(j)*d_v + hq(u)*d + hk(u)*(d + d_v)) backward, Tw = t*B*(N-C)/P the tokens it exchanges
// (the TP group's under a tp level, whose rank's heads the split is over).
CommPrediction ulysses_level_bytes_uneven(const LayerShape& s, int P, int t, const UlyssesShape& us, int u, int64_t elem);
// --mla-travel latent (U | H/t): forward q's all-to-all s*Tn*H*d*(U-1)/U, the latent's
// all-gather s*t*Tn*(r_kv + d_rope)*(U-1) and o's all-to-all s*Tn*H*d_v*(U-1)/U; backward do's and
// dq's all-to-alls s*Tn*H*(d_v + d)*(U-1)/U and the latent gradients' reduce-scatter
// 4*t*Tn*(r_kv + d_rope)*(U-1) (float32). Under a tp level of t the exchanges carry the TP group's
// t*Tn rows: for H/t heads the all-to-alls are the same bytes, but every tp member gathers the
// whole latent of those rows (the down-projections are replicated over tp: mla.h).
CommPrediction ulysses_latent_bytes(const LayerShape& s, int P, int t, int U, int64_t elem);
// Decode: each step the head group's merged o (B rows x H/(t*U) heads of d, run dtype) all-gathered
// over the U members: S * s*B*(H/(t*U))*d*(U-1).
// Under --uneven-heads member u's own hq(u) heads: S * s*B*hq(u)*d*(U-1) (`hq` > 0 gives it).
CommPrediction ulysses_decode_bytes(const LayerShape& s, int t, int U, int64_t elem, int hq = 0);
// Bytes the level keeps allocated per rank: the two exchange buffers (q|k|v of T tokens) and,
// under replication, the replicated k, v and one copy's buffers.
int64_t ulysses_level_activation_bytes(const UlyssesShape& s);

}  // namespace cpbench
