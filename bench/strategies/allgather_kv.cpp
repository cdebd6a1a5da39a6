// allgather-kv — Llama 3's context parallelism (Dubey et al. 2024; TransformerEngine's
// all_gather CP mode). Queries stay sharded in the zigzag layout (the sequence cut into 2P chunks
// of N/(2P); rank r holds chunks r and 2P-1-r, which balances the causal work); K,V are
// all-gathered, put in natural order, and each rank runs one attention of its two query chunks
// against the whole sequence (the kernel skips the keys its queries cannot see). Nothing
// overlaps: for GQA, K,V are small next to Q, and the gather is one collective per layer.
// Backward: K,V are gathered again (the gathered copy is not kept across the layer: that is
// the memory the method saves), attention backward accumulates float32 dK,dV for the whole
// sequence, and a reduce_scatter returns each rank the sum for its own tokens.
// Bytes per rank: fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*(P-1), with 2hk = G*(d + d_v)
// the k|v elements per token (2*G*d without MLA). --comm-dtype bf16|fp8: each rank's k|v chunk is
// encoded once by its owner before each gather (s*T*2hk becomes s_kv(T*2hk), ring_travel.h) and
// every other rank's chunk decoded after it; the owner computes on its own chunk as formed.
#include <sstream>

#include "bench/parts/ring_layout.h"
#include "bench/parts/ring_travel.h"
#include "bench/parts/layout.h"
#include "bench/block/qkv.h"
#include "bench/block/block.h"
#include "comm/communicator.h"

namespace cpbench {

namespace {

class AllgatherKV final : public Block {
 public:
  StrategyDesc describe() const override {
    return {"allgather-kv",
            "Llama 3 context parallelism: all-gather K,V, attention of the zigzag query\n"
            "chunks against the whole sequence; bwd re-gathers and reduce-scatters dK,dV.",
            "2P divides seq", "all-gather/reduce-scatter over all P ranks: (P-K)/(P-1) of its bytes cross nodes",
            [] {
              Capabilities c;
              c.mla = true;  // gathers MLA's expanded k|v (d + d_v per head)
              c.kv_transit = true;  // --comm-dtype: the gathered chunks encoded (gather_kv)
              return c;
            }()};
  }

  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    if (s.N % (2 * int64_t(P)) != 0) {
      std::ostringstream e;
      e << "allgather-kv: seq=" << s.N << " is not divisible by 2*P=" << 2 * P;
      throw ConstraintError(e.str());
    }
  }

  CommPrediction attention_bytes(const LayerShape& s, int P, const MeshSpec&, int64_t elem, int64_t acc,
                                 int) const override {
    const int64_t T = s.B * s.N / P, kv = int64_t(s.G) * (s.d + s.vdim());
    const int64_t gather = kv_transit_bytes(T * kv, elem, s.kv_transit, s.fp8_scaling) * (P - 1);
    CommPrediction p;  // all-gathers and the reduce-scatter over the whole CP group
    return p.add("cp", Phase::fwd, 0, gather).add("cp", Phase::bwd, 0, gather + acc * T * kv * (P - 1));
  }

 protected:
  Positions token_positions(const LayerShape& s, const Mesh& m) const override {
    return ring_order_positions(RingOrder::zigzag, s.N, m.P, m.cp->rank());
  }

  AttnShape attn_shape() const {
    const LayerShape& s = shape();
    AttnShape a;
    a.B = s.B; a.nq = T_; a.nk = s.N; a.hq = s.H; a.hk = s.G; a.d = s.d; a.d_v = s.d_v; a.causal = s.mask.causal;
    a.window = s.mask.window; a.docs = s.mask.docs;
    return a;
  }

  // This rank's k and v elements (v: d_v per head), one after the other in a k|v chunk.
  int64_t k_elems() const { return shape().B * T_ * shape().G * shape().d; }
  int64_t v_elems() const { return shape().B * T_ * shape().G * shape().vdim(); }
  int64_t kv_elems() const { return k_elems() + v_elems(); }

  // Buffers, all allocated in setup (the timed step allocates nothing). The whole-sequence
  // buffers live in two float32-sized slots whose uses never overlap in time:
  //   slot A: gathered k|v [P][k|v] (run dtype)  -> dK|dV natural order (float32)
  //           -> the reduce_scatter's receive buffer (float32, this rank's dK|dV)
  //   slot B: K|V natural order (run dtype)       -> the reduce_scatter's send (float32)
  // At every moment two whole-sequence buffers are live (gathered + K,V; K,V + dK,dV;
  // dK,dV + send; send + receive), so the peak equals that of the transient allocations these
  // replace (measured: the same peak_bytes at B = 1 and 2): 2 x the whole-sequence float32 k|v,
  // plus the small kept buffers.
  void core_setup() override {
    const LayerShape& s = shape();
    const int P = mesh().P;
    const int64_t e = kv_elems(), full = s.B * s.N * int64_t(s.G) * (s.d + s.vdim());  // full: k|v, whole seq
    lse_ = alloc_f32({s.B, s.H, T_});
    delta_ = alloc_f32({s.B, s.H, T_});
    kv_send_ = alloc({e}, MemKind::comm);
    slot_a_ = alloc_f32({full}, MemKind::comm);
    slot_b_ = alloc_f32({full}, MemKind::comm);
    gathered_ = reuse_as(slot_a_, s.dtype, {int64_t(P) * e});
    dkv_full_ = reuse_as(slot_a_, DType::f32, {full});
    kv_full_ = reuse_as(slot_b_, s.dtype, {full});
    rs_send_ = reuse_as(slot_b_, DType::f32, {int64_t(P) * e});
    rs_recv_ = reuse_as(slot_a_, DType::f32, {e});  // dK|dV are in the send buffer by then
    if (s.acc_dtype != DType::f32) {  // --acc-dtype bf16: the reduce-scatter's send and receive in slot A
      rs_send16_ = reuse_as(slot_a_, s.acc_dtype, {int64_t(P) * e});
      rs_recv16_ = reuse_as(slot_a_, s.acc_dtype, {e}, rs_send16_.bytes());
    }
    if (encoded()) {  // --comm-dtype: the encoded chunk, and the gathered ones in slot B (dead
      // once decoded into slot A, before slot B takes K,V)
      const DType td = kv_transit_dtype(shape().kv_transit);
      const int64_t n = transit_bytes() / int64_t(dtype_size(td));
      enc_send_ = be().alloc({n}, td, MemKind::comm);
      enc_gathered_ = reuse_as(slot_b_, td, {int64_t(P) * n});
    }
  }

  // --comm-dtype: whether a k|v chunk travels encoded, and its bytes then.
  bool encoded() const { return shape().kv_transit != KvTransit::run; }
  int64_t transit_bytes() const {
    return kv_transit_bytes(kv_elems(), int64_t(dtype_size(shape().dtype)), shape().kv_transit, shape().fp8_scaling);
  }

  // The whole sequence's K [B,N,G,d] then V [B,N,G,d_v] in one buffer (k|v, or dk|dv).
  int64_t k_full_elems() const { return shape().B * shape().N * shape().G * shape().d; }
  Tensor k_full() const { return kv_full_.view(0, {shape().B, shape().N, shape().G, shape().d}); }
  Tensor v_full() const {
    return kv_full_.view(k_full_elems(), {shape().B, shape().N, shape().G, shape().vdim()});
  }

  // All-gathers this rank's k|v into the whole K and V (kv_full_), in natural order.
  void gather_kv() {
    const LayerShape& s = shape();
    Communicator& c = *mesh().cp;
    const int P = c.size();
    const int64_t ek = k_elems(), ev = v_elems(), e = ek + ev, Gd = int64_t(s.G) * s.d, Gv = int64_t(s.G) * s.vdim();
    Tensor kd = kv_send_.view(0, {ek}), vd = kv_send_.view(ek, {ev});
    be().copy_2d(kd, ek, k_, ek, 1, ek);
    be().copy_2d(vd, ev, v_, ev, 1, ev);
    if (encoded()) {  // encoded by the owner, gathered, decoded by every other rank
      encode_kv_transit(be(), s.kv_transit, s.fp8_scaling, kv_send_, enc_send_);
      c.all_gather(enc_send_, enc_gathered_);
      const int64_t n = enc_send_.numel();
      for (int j = 0; j < P; ++j) {
        Tensor dst = gathered_.view(int64_t(j) * e, {e});
        if (j == c.rank()) {  // its own chunk as formed
          be().copy_2d(dst, e, kv_send_, e, 1, e);
          continue;
        }
        const Tensor src = enc_gathered_.view(int64_t(j) * n, {n});
        decode_kv_transit(be(), s.kv_transit, s.fp8_scaling, src, dst);
      }
    } else {
      c.all_gather(kv_send_, gathered_);  // [P][k | v], rank order
    }
    Tensor kf = k_full(), vf = v_full();
    gathered_to_natural(be(), gathered_, s.B, T_, Gd, P, RankChunks::zigzag, kf, e);
    gathered_to_natural(be(), gathered_.view(ek, {gathered_.numel() - ek}), s.B, T_, Gv, P,
                        RankChunks::zigzag, vf, e);
  }

  void core_forward() override {
    const Positions all = Positions::contiguous(0, shape().N);
    gather_kv();
    be().attn_fwd(attn_shape(), q_, k_full(), v_full(), pos_, all, o_, lse_);
    sinks_.forward(be(), attn_shape(), o_, lse_);
  }

  void core_backward() override {
    const LayerShape& s = shape();
    Communicator& c = *mesh().cp;
    const int P = c.size();
    const int64_t ek = k_elems(), ev = v_elems(), e = ek + ev, Gd = int64_t(s.G) * s.d, Gv = int64_t(s.G) * s.vdim();
    const int64_t kfull = s.B * s.N * Gd, vfull = s.B * s.N * Gv;
    const Positions all = Positions::contiguous(0, s.N);
    sinks_.backward(be(), attn_shape(), o_, do_, lse_);
    be().attn_bwd_delta(attn_shape(), o_, do_, delta_);
    gather_kv();  // the gathered copy was not kept across the layer
    // dK | dV of the whole sequence, natural order, float32 (slot A: the gathered copy is dead)
    Tensor dk_full = dkv_full_.view(0, {s.B, s.N, s.G, s.d}), dv_full = dkv_full_.view(kfull, {s.B, s.N, s.G, s.vdim()});
    be().fill(dq_, 0.0f);
    be().fill(dkv_full_, 0.0f);
    be().attn_bwd(attn_shape(), q_, k_full(), v_full(), do_, lse_, delta_, pos_, all, dq_, dk_full, dv_full);
    // Rank j's tokens (zigzag chunks j, 2P-1-j) of dK|dV go to chunk j; the sum over ranks of
    // chunk j lands on rank j. Float32 (s_acc) like the ring strategies' accumulators.
    // (slot B: K,V are dead)
    natural_to_gathered(be(), dkv_full_.view(0, {kfull}), s.B, T_, Gd, P, RankChunks::zigzag, rs_send_, e);
    Tensor rs_send_v = rs_send_.view(ek, {rs_send_.numel() - ek});
    natural_to_gathered(be(), dkv_full_.view(kfull, {vfull}), s.B, T_, Gv, P, RankChunks::zigzag, rs_send_v, e);
    if (s.acc_dtype != DType::f32) {  // each rank's dK|dV rounded once, summed by the collective (s_acc = 2)
      be().convert(rs_send16_, rs_send_);
      c.reduce_scatter(rs_send16_, rs_recv16_);
      be().convert(dk_, rs_recv16_.view(0, {ek}));
      be().convert(dv_, rs_recv16_.view(ek, {ev}));
      return;
    }
    c.reduce_scatter(rs_send_, rs_recv_);
    be().copy_2d(dk_, ek, rs_recv_.view(0, {ek}), ek, 1, ek);
    be().copy_2d(dv_, ev, rs_recv_.view(ek, {ev}), ev, 1, ev);
  }

  void export_lse(std::vector<float>& global) override {
    const LayerShape& s = shape();
    add_lse_rows(global, be().download(lse_), s.B, s.H, s.N, 0, s.H, pos_);
  }

  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec&) const override {
    // lse, delta (float32), the k|v send buffer; the two whole-sequence float32 slots
    // (core_setup).
    const int64_t T = s.N / P, es = int64_t(dtype_size(s.dtype));
    const int64_t e = s.B * T * s.G * (s.d + s.vdim()), full = s.B * s.N * s.G * (s.d + s.vdim());
    // --comm-dtype: the encoded chunk's own buffer (the gathered ones share slot B)
    const int64_t enc = s.kv_transit != KvTransit::run ? kv_transit_bytes(e, es, s.kv_transit, s.fp8_scaling) : 0;
    return 2 * s.B * s.H * T * 4 + e * es + 2 * full * 4 + enc;
  }

  Tensor lse_, delta_, kv_send_;
  Tensor slot_a_, slot_b_;                                   // the two whole-sequence slots
  Tensor gathered_, dkv_full_, rs_recv_, kv_full_, rs_send_;  // views of the slots
  Tensor rs_send16_, rs_recv16_;  // --acc-dtype bf16: the reduce-scatter's buffers, in slot A
  Tensor enc_send_, enc_gathered_;  // --comm-dtype: the encoded chunk, the gathered ones (slot B)
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_allgather_kv() { return std::make_unique<AllgatherKV>(); }

}  // namespace cpbench
