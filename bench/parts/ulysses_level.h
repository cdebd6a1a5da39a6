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
// Token order: a member's T tokens are `nseg` equal segments (the zigzag's two chunks, else
// one), and the group's tokens after the all-to-all are the members' segments interleaved so
// that the sequence is in position order (bench/parts/layout.h's pack/unpack).
//
// Here: the running level (setup allocates, the steps allocate nothing), its term of the byte
// model and the memory it keeps. The strategy composes it with a ring level
// (bench/strategies/ulysses_ring_layer.cpp) and, under a tp level, runs it on the TP rank's heads.
#pragma once
#include <cstdint>

#include "bench/strategy.h"
#include "kernels/backend.h"

namespace cpbench {

class Communicator;

// What one member gives the level: B batch rows of T tokens, H query heads and G KV heads of d
// values (a TP rank's heads under a tp level), split over U members; `nseg` segments per member.
struct UlyssesShape {
  int64_t B = 1, T = 0;
  int H = 0, G = 0, d = 0, U = 1, nseg = 1;
  DType dtype = DType::f32;
  int kv_copies() const { return (G >= U ? G : U) / G; }  // f
  int Ge() const { return G * kv_copies(); }               // KV heads after replication
  int64_t group_tokens() const { return int64_t(U) * T; }  // tokens per batch row after the exchange
};

class UlyssesLevel {
 public:
  // Allocates the exchange buffers (and the copies' under replication).
  void setup(Backend& be, Communicator& group, const UlyssesShape& s);
  const UlyssesShape& shape() const { return s_; }

  // Forward, before the core: q [B,T,H,d], k, v [B,T,G,d] -> q_r [B,U*T,H/U,d], k_r, v_r
  // [B,U*T,Ge/U,d] (run dtype).
  void scatter_qkv(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& q_r, Tensor& k_r, Tensor& v_r);
  // After the core: o_r [B,U*T,H/U,d] -> o [B,T,H,d].
  void gather_o(const Tensor& o_r, Tensor& o);
  // Backward, before the core: dout [B,T,H,d] -> do_r [B,U*T,H/U,d].
  void scatter_do(const Tensor& dout, Tensor& do_r);
  // After the core: the gradients in the run dtype (dq_r, dk_r, dv_r [B,U*T,*,d]) -> dq [B,T,H,d],
  // dk, dv [B,T,G,d] in float32 (the f copies summed). `dq_run`, `dk_run`, `dv_run` are run-dtype
  // scratch of dq's, dk's, dv's element counts (unused when the run dtype is f32).
  void gather_grads(const Tensor& dq_r, const Tensor& dk_r, const Tensor& dv_r, Tensor& dq, Tensor& dk, Tensor& dv,
                    Tensor& dq_run, Tensor& dk_run, Tensor& dv_run);

 private:
  // dk or dv of the f copies [B,T,G*f,d] (run dtype) summed into `dst` [B,T,G,d] float32.
  void sum_kv_copies(const Tensor& copies, Tensor& dst);

  Backend* be_ = nullptr;
  Communicator* c_ = nullptr;
  UlyssesShape s_;
  Tensor send_, recv_;        // the largest exchange: q|k|v of T tokens
  Tensor k_rep_, v_rep_;      // f > 1: the replicated k, v [B,T,G*f,d]; in backward dk, dv copies
  Tensor copy_run_, copy32_;  // f > 1: one copy [B,T,G,d] (run dtype; float32 when not f32)
};

// ---- the byte model's terms (bytes sent per rank per layer) ------------------------------------
// Train and prefill: q, k, v out and o back in forward, do out and dq, dk, dv back in backward,
// each an all-to-all keeping 1/U: s*Tn*(2*H*d + 2*d*Ge)*(U-1)/U per direction, Tn = B*(N-C)/P
// new tokens per rank, Ge = max(G, t*U) the KV heads held after replication over the whole model
// (DESIGN's usp model). U = 1: nothing.
CommPrediction ulysses_level_bytes(const LayerShape& s, int P, int t, int U, int64_t elem);
// Decode: each step the head group's merged o (B rows x H/(t*U) heads of d, run dtype) all-gathered
// over the U members: S * s*B*(H/(t*U))*d*(U-1).
CommPrediction ulysses_decode_bytes(const LayerShape& s, int t, int U, int64_t elem);
// Bytes the level keeps allocated per rank: the two exchange buffers (q|k|v of T tokens) and,
// under replication, the replicated k, v and one copy's buffers.
int64_t ulysses_level_activation_bytes(const UlyssesShape& s);

}  // namespace cpbench
