// The attention core of `ring --balance dynamic` (DESIGN "Balancing packed documents"; Megatron's
// hybrid context parallelism): every document has a CP group of c ranks (balance.h), and a step
// runs one ring per group size c, over this rank's group of c consecutive positions, circulating
// only the K,V of that size's documents. Documents of group size 1 never leave their rank.
//
// A rank stores its tokens by group size (c = 1 first, then 2, 4, ...), so the rows of group
// size c are one range [offset, offset + n) of every batch row. Forward: the attention of ALL
// this rank's queries to ALL its own keys first (every document's diagonal part, one kernel
// call: the document mask keeps them apart), then for each c the c-1 blocks of the other
// members, each [B, n_member] tokens (members hold different counts), merged online. Queries of
// other documents see nothing of a visiting block, so the kernel skips their tiles.
// Backward: the same blocks travel again; the float32 dK,dV accumulator of the block a rank
// holds goes on with it to the next member, the one after the last hop reaching the block's
// owner, who adds it into its own rows (c-1 sends per ring: the owner's own contribution never
// travels).
//
// Transfers overlap compute as in ring_core.h: the next block is posted before the block in hand
// is computed, across the rings too (the first block of ring c+1 travels during the last
// compute of ring c). Bytes per rank: balance.h TokenLayout::dynamic_ring_bytes.
#pragma once
#include <vector>

#include "bench/parts/ring_core.h"

namespace cpbench {

// One ring of the step: this rank's group of c positions (cp ranks first .. first + c - 1),
// its place in it, the range of its rows the ring's documents hold, and every member's
// positions of those documents (the keys each block carries).
struct DynamicRing {
  int c = 0, first = 0, member = 0;
  int64_t offset = 0;
  std::vector<Positions> pos;  // per member
  int64_t tokens(int m) const { return pos[size_t(m)].count(); }
};

class DynamicRingCore {
 public:
  // s.n: this rank's tokens per batch row (all group sizes), `mine` their positions. Allocates
  // every buffer: the loops allocate nothing.
  void setup(Backend& be, Communicator& cp, const RingCoreShape& s, const Positions& mine,
             std::vector<DynamicRing> rings);
  // q [B,n,hq,d], k [B,n,hk,d], v [B,n,hk,dv] (run dtype) -> o [B,n,hq,dv]; lse() [B,hq,n].
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o);
  // dq [B,n,hq,d], dk [B,n,hk,d], dv [B,n,hk,dv] float32, overwritten.
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& dout,
                Tensor& dq, Tensor& dk, Tensor& dv);
  const Tensor& lse() const { return steps_.lse(); }
  // Bytes the core keeps allocated beyond RingCore's step buffers: three k|v and three dk|dv
  // blocks of the largest block a rank receives (`max_block` tokens per batch row).
  static int64_t comm_buffer_bytes(const RingCoreShape& s, int64_t max_block);

 private:
  // One block transfer: ring `ring`, hop `hop` (1..c-1): this rank sends the block of member
  // m-hop+1 (its own at hop 1) to the next member and receives that of member m-hop.
  struct Transfer {
    int ring = 0, hop = 0;
  };
  int next_rank(const DynamicRing& r) const { return r.first + (r.member + 1) % r.c; }
  int prev_rank(const DynamicRing& r) const { return r.first + (r.member + r.c - 1) % r.c; }
  int src_member(const Transfer& x) const;  // the member whose block transfer x brings
  Tensor kv_half(const Tensor& buf, int64_t tokens, int which) const;  // [B, tokens, hk, d or dv]
  int64_t kv_block_elems(int64_t tokens) const;  // a block of `tokens` keys: k|v (v d_v wide)
  // This rank's rows of ring r out of k [B, n, hk, d] and v [B, n, hk, dv] into buf (packed k|v).
  void pack_own(const Tensor& k, const Tensor& v, const DynamicRing& r, Tensor& buf);
  // Posts transfer t: sends buffer `send` (holding the block of member m-hop+1), receives into
  // buffer `recv`.
  RingCore::Hop post(size_t t, int send, int recv, int tag);

  Backend* be_ = nullptr;
  Communicator* cp_ = nullptr;
  RingCoreShape s_;
  Positions mine_;
  std::vector<DynamicRing> rings_;
  std::vector<Transfer> transfers_;
  RingCore steps_;    // the block steps (online merge, backward delta), on this rank's rows
  Tensor kv_[3];      // k|v blocks, run dtype: in hand, arriving, and a ring's own block
  Tensor acc_[3];     // dk|dv accumulators, float32: two computed on / in flight, one arriving
};

}  // namespace cpbench
