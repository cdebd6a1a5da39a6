// The Ulysses level around a ring level: the one composition shared by ulysses (mesh fixed at
// ulysses=P, ring=1) and usp (any U x R; under --tp t, t x U x R).
//
// The P ranks form a U x R mesh (levels "ulysses" and "ring"). Inside each Ulysses group of U
// ranks the Ulysses level (bench/parts/ulysses_level.h: its all-to-alls, KV replication when
// U > G, its byte term) turns q, k, v from "my tokens, all heads" into "the group's tokens,
// H/U query heads and max(G,U)/U kv heads"; across the R groups the ring level
// (bench/parts/ring_schedule.h: layout, schedule, travel policy) runs attention on those tokens;
// the Ulysses level brings o back, and mirrors it all in backward. With R = 1 the ring level is
// one local attention: plain Ulysses.
//
// Token layout. Ring index rho = the rank's index in its ring group, Ulysses index u = its index
// in its Ulysses group.
//   zigzag (default when causal): the sequence is cut into 2R chunks of C = N/(2R); ring index
//     rho owns chunks rho and 2R-1-rho, and Ulysses member u holds the u-th 1/U of each:
//     [rho*C + u*C/U, +C/U) and [(2R-1-rho)*C + u*C/U, +C/U). After the all-to-all (nseg = 2)
//     each rank holds both chunks of its ring index in position order, as ring-zigzag does.
//   contiguous: ring index rho owns [rho*N/R, (rho+1)*N/R), member u holds its u-th 1/U.
//   balanced (--balance doc-zigzag|greedy, balance.h): ring index rho owns position rho of the
//     layout over R positions (N/R tokens in position order, up to two chunks per document and
//     more for greedy), member u holds the u-th 1/U of them in that order; the all-to-all then
//     puts the members' tokens one after another, which is the block in position order. The
//     double ring's ring index o*w + i is the layout's position. Needs P | N.
//
// The ring level is a single ring (ring_core.h) or, with MeshSpec::inner_ring > 0 (usp_ring =
// double), a double ring over the levels ring_outer x ring_inner (double_ring_core.h).
//
// The tp level (usp --tp t; DESIGN "Tensor parallelism inside the CP mesh"): t ranks innermost,
// the block's tensor-parallel group (block.h). The U x R mesh above is then a mesh of TP groups
// ("CP positions"): the tokens listed above for Ulysses member u and ring index rho belong to the
// TP group at (u, rho), and TP member j holds the j-th 1/t of them (in that order); the block
// gathers them ("wide" rows) around its column- and row-parallel GEMMs, so the core below sees
// the TP group's tokens for this TP rank's H/t query heads and max(G,t)/t KV heads, and Ulysses
// and the ring work on those heads exactly as without tp (replicating the KV heads again when U
// exceeds them).
//
// Bytes per rank, with Ge = max(G, U) (max(G, t*U) under tp; T = B*N/P, tp's terms on level "tp":
// 2*s*T*D*(t-1) forward and 3*s*T*D*(t-1) backward per sub-layer): fwd = s*T*(2hq + 2*d*Ge)*(U-1)/U + s*T*2*d*Ge*(R-1);
// bwd = s*T*(2hq + 2*d*Ge)*(U-1)/U + s*T*2*d*Ge*(R-1) + s_acc*T*2*d*Ge*R. Ulysses terms vanish
// when U = 1, ring terms when R = 1 (DESIGN's usp model; Ge = G without replication). Under a
// window or documents the ring runs K_eff hops (ring_core.h's terms with h = K_eff); a double
// ring's terms are double_ring_core.h's, with its truncated schedule.
// MLA's latent travel: the Ulysses terms are ulysses_latent_bytes (q, o by all-to-all, the latent
// all-gathered, its float32 gradient reduce-scattered) and the ring's block is the ring index's
// t*U*T tokens of latent, r_kv + d_rope values each (every tp member holds the TP group's latent).
#pragma once
#include <string>
#include <vector>

#include "bench/parts/ring_schedule.h"
#include "bench/parts/ulysses_level.h"
#include "bench/block/block.h"

namespace cpbench {

class UlyssesRingLayer : public Block {
 public:
  CommPrediction attention_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                 int rank) const override;
  int64_t activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const override;

 protected:
  // What every mesh of this layer runs (ulysses and usp start their Capabilities from it):
  //  - --pass decode (block.h): the cache's tokens split C/R over the ring level, the heads over
  //    Ulysses (H/U query heads, max(G,U)/U KV heads); partials merged over the ring (a double
  //    ring: over the inner ring, then across), o gathered over Ulysses; under a tp level the TP
  //    rank's H/t heads are what Ulysses splits.
  //  - --cached C (prefill): the N - C new tokens take the layout below (shifted to positions
  //    C..N-1); ring index j also holds the cache shard [j*C/R, (j+1)*C/R) for the heads Ulysses
  //    gives its members (core_holds_cache), and its K,V block is that shard then its new tokens;
  //    on either ring level (single, double) and under a tp level (the TP rank's heads).
  static Capabilities layer_capabilities() {
    Capabilities c;
    c.decode = c.cached = c.uneven_heads = true;
    c.mla = true;  // MLA's expanded heads through the Ulysses level's all-to-alls (and its tp level: mla.h)
    c.mla_latent = true;  // or the latent, all-gathered by the Ulysses level and circulated by the ring level
    return c;
  }
  // --mla-travel latent on mesh m ("" when it runs): no uneven heads, K,V travel on the ring level.
  std::string latent_refusal(const LayerShape& s, const MeshSpec& m) const;
  // check() under --pass decode: the mesh, the heads over tp x ulysses, an equal cache shard per
  // ring position, and Helix on a single merge level only.
  void check_decode(const LayerShape& s, int P, const MeshSpec& m) const;
  // The heads error of a t x U mesh ("" when it runs): head_sharding_error over t*U, or under
  // --uneven-heads only t's (a tp level splits w_qkv by heads) and at least one query head per
  // Ulysses member.
  static std::string heads_error(const LayerShape& s, int t, int U);
  // World rank `rank`'s index in its Ulysses group on mesh m (kBusiestRank passes through).
  int ulysses_index(int rank, const MeshSpec& m) const;
  // The attention's bytes of Ulysses member u (-1: every member alike, the even split).
  CommPrediction member_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc, int u) const;
  // Throws ConstraintError "<name>: ..." unless U x R = P, U shards the heads (heads_error)
  // and the layout's chunks divide N. `hint` follows a head error ("use ulysses<=2").
  void check_mesh_and_shape(const LayerShape& s, int P, const MeshSpec& m, const std::string& hint) const;
  static bool zigzag_layout(RingLayout requested, bool causal) {
    return requested == RingLayout::zigzag || (requested == RingLayout::auto_ && causal);
  }
  // The ring level's parts on a resolved mesh: its static order (zigzag or contiguous), its layout
  // over the R ring indices, and its schedule (a single ring, or a double ring of inner rings of w).
  static RingOrder ring_order(const LayerShape& s, const MeshSpec& m) {
    return zigzag_layout(m.ring_layout, s.mask.causal) ? RingOrder::zigzag : RingOrder::contiguous;
  }
  static RingLayoutPart ring_layout(const LayerShape& s, const MeshSpec& m) {
    return RingLayoutPart(ring_order(s, m), s, m.R);
  }
  static RingSchedule ring_schedule(const MeshSpec& m) {
    return m.inner_ring > 0 ? RingSchedule::double_ring(m.R, m.inner_ring) : RingSchedule::single(m.R, "ring");
  }

  bool zigzag() const { return zigzag_layout(env_.spec.ring_layout, shape().mask.causal); }
  // Segments of a member's tokens the all-to-all reorders (layout.h): the zigzag's two chunks;
  // one for the contiguous layout and a balanced one, whose ring block is its members' tokens
  // one after another.
  int nseg() const { return zigzag() && shape().balance == BalanceScheme::none ? 2 : 1; }
  int U() const { return mesh().size_of("ulysses"); }
  // The ring dimension: one "ring" level, or a double ring's ring_outer x ring_inner.
  static int ring_size(const Mesh& m) {
    return m.size_of("ring") * m.size_of("ring_outer") * m.size_of("ring_inner");
  }
  static int ring_position(const Mesh& m);
  int R() const { return ring_size(mesh()); }
  bool double_ring() const { return env_.spec.inner_ring > 0; }
  // The TP group's size t (1 without a tp level) and this rank's member index in it.
  int t() const { return mesh().size_of("tp"); }
  // Tokens per batch row the core sees: the TP group's (t x this rank's).
  int64_t wide_T() const { return T_ * t(); }
  // The tokens (per batch row) of the CP position (Ulysses member, ring index) this rank's TP
  // group occupies, in the order the group's gather puts them: the u-th 1/U of each of the ring
  // index's segments (static orders), or of its rows (a balanced layout).
  static Positions cp_positions(const LayerShape& s, const Mesh& m, RingOrder order);

  Positions token_positions(const LayerShape& s, const Mesh& m) const override;
  bool latent_keeps_local_kv() const override { return false; }  // a member expands into k_r_, v_r_
  Communicator* tp_group() override;
  bool core_holds_cache() const override { return !shape().decode(); }
  CacheHeld cache_held() override;
  DecodeGroups decode_groups() override {
    if (double_ring()) return {&mesh().group("ring_inner"), &mesh().group("ulysses"), &mesh().group("ring_outer")};
    return {&mesh().group("ring"), &mesh().group("ulysses")};
  }
  Positions wide_positions() const override;
  void core_setup() override;
  void core_forward() override;
  void core_backward() override;
  void export_lse(std::vector<float>& global) override;
  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const override;

 private:
  // The Ulysses level's shape: T tokens per batch row of H query and G KV heads (a TP rank's).
  static UlyssesShape ulysses_shape(const LayerShape& s, int64_t T, int H, int G, int U, int nseg = 1) {
    UlyssesShape u;
    u.B = s.B; u.T = T; u.H = H; u.G = G; u.d = s.d; u.d_v = s.d_v; u.U = U; u.nseg = nseg; u.dtype = s.dtype;
    u.uneven = s.uneven_heads;
    return u;
  }

  UlyssesLevel ulysses_;  // the Ulysses level (the all-to-alls around the ring level)
  RingLevel ring_;        // the ring level: one ring, or a double ring (usp_ring = double)
  Tensor q_r_, k_r_, v_r_, o_r_, do_r_, dq_r_, dk_r_, dv_r_;  // this ring index's tokens, local heads
  KvCache ring_cache_;    // --cached: the ring index's cache shard then its new k, v [B,C/R+n,gl,d]
  // --mla-travel latent: the ring index's latent, gathered [B*n, r_kv + d_rope] (run dtype), and
  // this member's share of its gradient (float32); latent_ the ring level's view of them.
  Tensor lat_r_, dlat_r_;
  LatentBlock latent_;
};

}  // namespace cpbench
