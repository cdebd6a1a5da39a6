#include "bench/parts/ring_layout.h"

#include <stdexcept>
#include <vector>

#include "bench/parts/balance.h"

namespace cpbench {

int64_t ring_order_pieces(RingOrder o, int R) { return o == RingOrder::zigzag ? 2 * int64_t(R) : R; }

Positions ring_order_positions(RingOrder o, int64_t N, int R, int j) {
  switch (o) {
    case RingOrder::contiguous: {
      const int64_t T = N / R;
      return Positions::contiguous(j * T, T);
    }
    case RingOrder::zigzag: {
      const int64_t c = N / (2 * int64_t(R));
      return Positions::two(j * c, c, (2 * int64_t(R) - 1 - j) * c, c);
    }
    case RingOrder::striped: return Positions::strided(j, R, N / R);
  }
  throw std::logic_error("ring_order_positions: unknown order");
}

Positions after_cache(const Positions& p, int64_t C) {
  std::vector<PosSeg> segs;
  for (int i = 0; i < p.nseg(); ++i) segs.push_back({p.seg(i).start + C, p.seg(i).stride, p.seg(i).count});
  return Positions::segments(segs);
}

Positions cache_then(Positions cache, const Positions& tokens) {
  for (int i = 0; i < tokens.nseg(); ++i) cache.append(tokens.seg(i));
  return cache;
}

Positions RingLayoutPart::queries_of(RingOrder order, const LayerShape& s, int R, int j) {
  if (s.pass.cached > 0 && !s.decode())  // the layout of the new tokens, after the cache
    return after_cache(queries_of(order, s.without_cache(), R, j), s.pass.cached);
  if (s.balance != BalanceScheme::none) return balanced_positions(s, R)[size_t(j)];
  return ring_order_positions(order, s.N, R, j);
}

Positions RingLayoutPart::queries(int j) const { return queries_of(order_, s_, R_, j); }

Positions RingLayoutPart::keys(int j) const {
  if (s_.pass.cached == 0 || s_.decode()) return queries(j);
  return cache_then(Positions::segments({cache_shard(s_, R_, j)}), queries(j));
}

}  // namespace cpbench
