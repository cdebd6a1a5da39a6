#include "bench/strategies/balance.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace cpbench {

namespace {

// Sizes of the 2R chunks of every document under doc-zigzag: q = L / 2R each, and the document's
// L mod 2R remainder tokens one by one to positions in round robin (`cursor` carried over
// documents); a position's first extra token goes to its early chunk r, a second to its late
// chunk 2R-1-r. Every position then holds N/R tokens (R | N), chunk sizes differ by at most one.
std::vector<std::vector<int64_t>> zigzag_chunk_sizes(const std::vector<int64_t>& lens, int R) {
  std::vector<std::vector<int64_t>> sizes;
  int64_t cursor = 0;
  for (int64_t L : lens) {
    std::vector<int64_t> c(size_t(2 * R), L / (2 * R));
    std::vector<int> extra(size_t(R), 0);
    for (int64_t e = 0; e < L % (2 * R); ++e) ++extra[size_t(cursor++ % R)];
    for (int r = 0; r < R; ++r) {
      if (extra[size_t(r)] >= 1) ++c[size_t(r)];
      if (extra[size_t(r)] >= 2) ++c[size_t(2 * R - 1 - r)];
    }
    sizes.push_back(c);
  }
  return sizes;
}

}  // namespace

int64_t TokenLayout::visible_keys(int64_t t, int64_t L) const {
  const int64_t W = s_.window;
  if (s_.causal) return W > 0 ? std::min(t + 1, W) : t + 1;
  if (W <= 0) return L;
  return std::min(L - 1, t + W - 1) - std::max<int64_t>(0, t - W + 1) + 1;
}

bool TokenLayout::any_visible(const TokenRun& a, const TokenRun& b) const {
  if (a.doc != b.doc || a.count == 0 || b.count == 0) return false;
  const int64_t a0 = a.start, a1 = a.start + a.count, b0 = b.start, b1 = b.start + b.count;
  if (a0 < b1 && b0 < a1) return true;  // overlapping runs share a position
  // Closest query-key distance between the disjoint runs.
  const int64_t gap = a0 >= b1 ? a0 - (b1 - 1) : b0 - (a1 - 1);
  if (s_.causal && a0 < b1) return false;  // every key of b is after every query of a
  return s_.window <= 0 || gap < s_.window;
}

TokenLayout TokenLayout::build(BalanceScheme scheme, const LayerShape& s, int R) {
  if (R < 1 || s.N % R != 0)
    throw std::invalid_argument("balanced layout: R=" + std::to_string(R) + " must divide seq=" + std::to_string(s.N));
  if (scheme == BalanceScheme::none) throw std::logic_error("TokenLayout::build: scheme none has no layout");
  TokenLayout l;
  l.s_ = s;
  l.doc_len_ = s.doc_lens.empty() ? std::vector<int64_t>{s.N} : s.doc_lens;
  int64_t at = 0;
  for (int64_t L : l.doc_len_) l.doc_start_.push_back(at), at += L;
  l.runs_.assign(size_t(R), {});
  const auto sizes = zigzag_chunk_sizes(l.doc_len_, R);
  // Every chunk as a run, in document order.
  std::vector<TokenRun> chunks;
  std::vector<int> owner;  // doc-zigzag's position of each chunk
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t p = l.doc_start_[d];
    for (int c = 0; c < 2 * R; ++c) {
      chunks.push_back({p, sizes[d][size_t(c)], int(d)});
      owner.push_back(c < R ? c : 2 * R - 1 - c);
      p += sizes[d][size_t(c)];
    }
  }
  if (scheme == BalanceScheme::doc_zigzag) {
    for (size_t i = 0; i < chunks.size(); ++i)
      if (chunks[i].count > 0) l.runs_[size_t(owner[i])].push_back(chunks[i]);
  } else {  // greedy: largest visible-pair count first, to the least-loaded position with room
    auto pairs = [&](const TokenRun& r) {
      int64_t n = 0;
      const int64_t d0 = l.doc_start_[size_t(r.doc)], L = l.doc_len_[size_t(r.doc)];
      for (int64_t p = r.start; p < r.start + r.count; ++p) n += l.visible_keys(p - d0, L);
      return n;
    };
    std::vector<int64_t> work(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) work[i] = pairs(chunks[i]);
    std::vector<size_t> order(chunks.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return work[a] > work[b]; });
    const int64_t cap = s.N / R;
    std::vector<int64_t> load(size_t(R), 0), held(size_t(R), 0);
    for (size_t i : order) {
      TokenRun rest = chunks[i];
      while (rest.count > 0) {
        int best = -1;
        for (int r = 0; r < R; ++r)
          if (held[size_t(r)] < cap && (best < 0 || load[size_t(r)] < load[size_t(best)])) best = r;
        const int64_t take = std::min(rest.count, cap - held[size_t(best)]);
        const TokenRun piece{rest.start, take, rest.doc};
        l.runs_[size_t(best)].push_back(piece);
        load[size_t(best)] += pairs(piece);
        held[size_t(best)] += take;
        rest.start += take, rest.count -= take;
      }
    }
    for (auto& runs : l.runs_)
      std::sort(runs.begin(), runs.end(), [](const TokenRun& a, const TokenRun& b) { return a.start < b.start; });
  }
  return l;
}

Positions TokenLayout::positions_of(int j) const {
  Positions p;
  int64_t start = 0, count = 0;
  for (const TokenRun& r : runs(j)) {
    if (count > 0 && r.start == start + count) {
      count += r.count;
      continue;
    }
    if (count > 0) p.append({start, 1, count});
    start = r.start, count = r.count;
  }
  if (count > 0) p.append({start, 1, count});
  return p;
}

int64_t TokenLayout::visible_pairs(int j) const {
  int64_t n = 0;
  for (const TokenRun& r : runs(j))
    for (int64_t p = r.start; p < r.start + r.count; ++p)
      n += visible_keys(p - doc_start_[size_t(r.doc)], doc_len_[size_t(r.doc)]);
  return n;
}

bool TokenLayout::sees(int q, int k) const {
  for (const TokenRun& a : runs(q))
    for (const TokenRun& b : runs(k))
      if (any_visible(a, b)) return true;
  return false;
}

int TokenLayout::ring_hops() const {
  const int R = positions();
  for (int k = R - 1; k >= 1; --k)
    for (int r = 0; r < R; ++r)
      if (sees(r, (r - k + R) % R)) return k;
  return 0;
}

const std::vector<Positions>& balanced_positions(const LayerShape& s, int R) {
  // One entry per thread: SimGrid runs ranks as threads of one process, and every rank asks
  // for the same layout (a job's shape) many times in a row.
  thread_local std::vector<int64_t> key;
  thread_local std::vector<Positions> pos;
  std::vector<int64_t> k = {s.N, R, int64_t(s.balance), s.causal, s.window};
  k.insert(k.end(), s.doc_lens.begin(), s.doc_lens.end());
  if (k != key) {
    const TokenLayout l = TokenLayout::build(s.balance, s, R);
    pos.clear();
    for (int r = 0; r < R; ++r) pos.push_back(l.positions_of(r));
    key = std::move(k);
  }
  return pos;
}

}  // namespace cpbench
