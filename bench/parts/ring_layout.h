// The layout part of a ring level: which tokens each of its R ring positions holds.
//
// A layout is a static order (contiguous, zigzag, striped) or, under --balance, the balanced
// layout of packed documents (bench/parts/balance.h); --cached is a transform of either:
// the N - C new tokens take the layout, moved after the cache (positions C..N-1), and a
// position's keys are its cache shard [j*C/R, (j+1)*C/R) then its new tokens. Nothing here
// sends a byte: the layout decides the ring's work balance and, with the mask, how many hops a
// schedule needs (ring_schedule.h), which is how it reaches the byte model.
//
// Every strategy that places tokens on a ring takes them from here (ring, ring-zigzag,
// ring-striped, double-ring, usp's ring level, allgather-kv's zigzag query shard), so each
// order's formula is written once.
#pragma once
#include <cstdint>
#include <string>

#include "bench/strategy.h"

namespace cpbench {

// The --cached transforms. The cache's split: shard j of R holds positions [j*C/R, (j+1)*C/R).
inline PosSeg cache_shard(const LayerShape& s, int R, int j) { return {j * (s.pass.cached / R), 1, s.pass.cached / R}; }
// The keys of a position under --cached, in storage order: its cache shard, then its new tokens.
Positions cache_then(Positions cache, const Positions& tokens);
// Positions of a layout of LayerShape::without_cache() moved after a cache of C tokens.
Positions after_cache(const Positions& p, int64_t C);

// The static orders of N tokens over R ring positions.
//   contiguous: position j holds [j*N/R, (j+1)*N/R)
//   zigzag:     the sequence is cut into 2R chunks of N/(2R); position j holds chunks j and
//               2R-1-j (an early and a late one: equal causal work; ring-flash-attention, Llama 3)
//   striped:    token t lives on position t mod R (Striped Attention)
enum class RingOrder { contiguous, zigzag, striped };

// The number of equal pieces the order cuts a sequence into (R, or 2R for zigzag): N must be a
// multiple of it.
int64_t ring_order_pieces(RingOrder o, int R);
// Position j's tokens, in storage order.
Positions ring_order_positions(RingOrder o, int64_t N, int R, int j);

// A ring level's layout over R positions for a shape: the static order, or the balanced layout
// under --balance, with --cached applied as above (not under --pass decode, where the cache is
// all there is and the block places nothing).
class RingLayoutPart {
 public:
  RingLayoutPart(RingOrder order, const LayerShape& s, int R) : order_(order), s_(s), R_(R) {}
  const LayerShape& shape() const { return s_; }
  // Position j's query tokens (the new tokens under --cached), in storage order.
  Positions queries(int j) const;
  // Position j's keys: its queries, or under --cached its cache shard then its new tokens.
  Positions keys(int j) const;

 private:
  static Positions queries_of(RingOrder order, const LayerShape& s, int R, int j);
  RingOrder order_;
  LayerShape s_;
  int R_;
};

}  // namespace cpbench
