#include "bench/parts/balance.h"

#include "bench/block/mla.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace cpbench {

namespace {

// Sizes of the 2R chunks of every document under doc-zigzag: q = L / 2R each, and the document's
// L mod 2R remainder tokens one by one to positions in round robin (`cursor` carried over
// documents); a position's first extra token goes to its early chunk r, a second to its late
// chunk 2R-1-r. Every position then holds N/R tokens (R | N), chunk sizes differ by at most one.
std::vector<int64_t> zigzag_chunks(int64_t L, int R, int64_t& cursor) {
  std::vector<int64_t> c(size_t(2 * R), L / (2 * R));
  std::vector<int> extra(size_t(R), 0);
  for (int64_t e = 0; e < L % (2 * R); ++e) ++extra[size_t(cursor++ % R)];
  for (int r = 0; r < R; ++r) {
    if (extra[size_t(r)] >= 1) ++c[size_t(r)];
    if (extra[size_t(r)] >= 2) ++c[size_t(2 * R - 1 - r)];
  }
  return c;
}

std::vector<std::vector<int64_t>> zigzag_chunk_sizes(const std::vector<int64_t>& lens, int R) {
  std::vector<std::vector<int64_t>> sizes;
  int64_t cursor = 0;
  for (int64_t L : lens) sizes.push_back(zigzag_chunks(L, R, cursor));
  return sizes;
}

// dynamic's group size for a document of L tokens: min(R, next power of two of ceil(L / cap)).
int dynamic_degree(int64_t L, int64_t cap, int R) {
  const int64_t need = (L + cap - 1) / cap;
  int64_t c = 1;
  while (c < need && c < R) c *= 2;
  return int(std::min<int64_t>(c, R));
}

}  // namespace

int64_t TokenLayout::visible_keys(int64_t t, int64_t L) const {
  const int64_t W = s_.mask.window;
  if (s_.mask.causal) return W > 0 ? std::min(t + 1, W) : t + 1;
  if (W <= 0) return L;
  return std::min(L - 1, t + W - 1) - std::max<int64_t>(0, t - W + 1) + 1;
}

bool TokenLayout::any_visible(const TokenRun& a, const TokenRun& b) const {
  if (a.doc != b.doc || a.count == 0 || b.count == 0) return false;
  const int64_t a0 = a.start, a1 = a.start + a.count, b0 = b.start, b1 = b.start + b.count;
  if (a0 < b1 && b0 < a1) return true;  // overlapping runs share a position
  // Closest query-key distance between the disjoint runs.
  const int64_t gap = a0 >= b1 ? a0 - (b1 - 1) : b0 - (a1 - 1);
  if (s_.mask.causal && a0 < b1) return false;  // every key of b is after every query of a
  return s_.mask.window <= 0 || gap < s_.mask.window;
}

DynamicGroup dynamic_group_of(int j, int c, int R) {
  if (c == R) return {0, R};  // the whole ring, whatever R is
  const int first = j / c * c;
  if (first + c > R) return {first, 0};
  return {first, c};
}

void TokenLayout::build_dynamic() {
  const int R = int(runs_.size());
  const int64_t cap = s_.cp_cap > 0 ? s_.cp_cap : std::max<int64_t>(1, s_.N / R);
  // Work of a token run in forward FLOPs (the backward is about twice both terms): its rows'
  // GEMMs (qkv, or MLA's projections, and the output projection; the MLP under --block full) and
  // 2*H*(d + d_v) per visible pair.
  const double proj = s_.mla ? MlaProjections::forward_gemm_flops(s_, 1) : 2.0 * double(s_.D) * double(s_.qkv_cols());
  const double per_token = proj + 2.0 * double(s_.D) * double(int64_t(s_.H) * s_.vdim()) +
                           (s_.full_block ? 6.0 * double(s_.D) * double(s_.F) : 0.0);
  const double per_pair = 2.0 * double(s_.H) * double(s_.d + s_.vdim());
  auto work = [&](int64_t start, int64_t count, int doc) {
    int64_t pairs = 0;
    const int64_t d0 = doc_start_[size_t(doc)], L = doc_len_[size_t(doc)];
    for (int64_t p = start; p < start + count; ++p) pairs += visible_keys(p - d0, L);
    return per_token * double(count) + per_pair * double(pairs);
  };
  const size_t ndoc = doc_len_.size();
  doc_group_.assign(ndoc, 1);
  std::vector<double> doc_work(ndoc);
  for (size_t d = 0; d < ndoc; ++d) {
    doc_group_[d] = dynamic_degree(doc_len_[d], cap, R);
    doc_work[d] = work(doc_start_[d], doc_len_[d], int(d));
  }
  std::vector<size_t> order(ndoc);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return doc_work[a] > doc_work[b]; });
  std::vector<double> load(size_t(R), 0.0);
  std::vector<int64_t> cursor(size_t(R), 0);  // per group (its first position): doc-zigzag's remainder cursor
  for (size_t d : order) {
    const int c = doc_group_[d];
    // The document's 2c doc-zigzag chunks as member pieces (member i: chunks i and 2c-1-i), tried
    // on every group of size c; it goes where the busiest member ends least busy (then the lowest
    // total load, then the lowest first position).
    int best = -1;
    double best_max = 0, best_sum = 0;
    std::vector<int64_t> best_sizes;
    for (int first = 0; first + c <= R; first += c) {
      int64_t cur = cursor[size_t(first)];
      const std::vector<int64_t> sizes = zigzag_chunks(doc_len_[d], c, cur);
      double mx = 0, sum = 0;
      int64_t at = doc_start_[d];
      std::vector<double> add(size_t(c), 0.0);
      for (int k = 0; k < 2 * c; ++k) {
        add[size_t(k < c ? k : 2 * c - 1 - k)] += work(at, sizes[size_t(k)], int(d));
        at += sizes[size_t(k)];
      }
      for (int i = 0; i < c; ++i) {
        mx = std::max(mx, load[size_t(first + i)] + add[size_t(i)]);
        sum += load[size_t(first + i)];
      }
      if (best < 0 || mx < best_max || (mx == best_max && sum < best_sum)) best = first, best_max = mx, best_sum = sum;
      if (c == R) break;  // one group
    }
    const std::vector<int64_t> sizes = zigzag_chunks(doc_len_[d], c, cursor[size_t(best)]);
    int64_t at = doc_start_[d];
    for (int k = 0; k < 2 * c; ++k) {
      const int member = k < c ? k : 2 * c - 1 - k;
      const TokenRun run{at, sizes[size_t(k)], int(d), c};
      if (run.count > 0) {
        runs_[size_t(best + member)].push_back(run);
        load[size_t(best + member)] += work(run.start, run.count, run.doc);
      }
      at += run.count;
    }
  }
  // Storage order: by group size, then position (each group's rows one range of the rank's rows).
  for (auto& runs : runs_)
    std::sort(runs.begin(), runs.end(), [](const TokenRun& a, const TokenRun& b) {
      return a.group != b.group ? a.group < b.group : a.start < b.start;
    });
}

TokenLayout TokenLayout::build(BalanceScheme scheme, const LayerShape& s, int R) {
  if (R >= 1 && scheme == BalanceScheme::dynamic) {
    TokenLayout l;
    l.s_ = s;
    l.doc_len_ = s.mask.doc_lens.empty() ? std::vector<int64_t>{s.N} : s.mask.doc_lens;
    int64_t at = 0;
    for (int64_t L : l.doc_len_) l.doc_start_.push_back(at), at += L;
    l.runs_.assign(size_t(R), {});
    l.build_dynamic();
    return l;
  }
  if (R < 1 || s.N % R != 0)
    throw std::invalid_argument("balanced layout: R=" + std::to_string(R) + " must divide seq=" + std::to_string(s.N));
  if (scheme == BalanceScheme::none) throw std::logic_error("TokenLayout::build: scheme none has no layout");
  TokenLayout l;
  l.s_ = s;
  l.doc_len_ = s.mask.doc_lens.empty() ? std::vector<int64_t>{s.N} : s.mask.doc_lens;
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

std::vector<int> TokenLayout::ring_groups() const {
  std::vector<int> g;
  for (int c : doc_group_)
    if (c > 1 && std::find(g.begin(), g.end(), c) == g.end()) g.push_back(c);
  std::sort(g.begin(), g.end());
  return g;
}

Positions TokenLayout::positions_of(int j, int c) const {
  Positions p;
  for (const TokenRun& r : runs(j))
    if (r.group == c) p.append({r.start, 1, r.count});
  return p;
}

int64_t TokenLayout::tokens_of(int j, int c) const {
  int64_t n = 0;
  for (const TokenRun& r : runs(j))
    if (r.group == c) n += r.count;
  return n;
}

CommPrediction TokenLayout::dynamic_ring_bytes(int j, int64_t B, int64_t kv_row, int64_t elem, int64_t acc) const {
  CommPrediction p;
  const int R = positions();
  for (int c : ring_groups()) {
    const DynamicGroup g = dynamic_group_of(j, c, R);
    if (g.c == 0) continue;
    const int m = g.member(j);
    // Hop i (1..c-1) sends the block of member m-i+1 (its own first); the accumulator sent at
    // step i is that of member m-i's block. The last member's sends wrap to the first.
    const int to = m == c - 1 ? -(c - 1) : 1;
    int64_t kv = 0, accum = 0;
    for (int i = 1; i < c; ++i) {
      kv += elem * B * kv_row * tokens_of(g.first + (m - i + 1 + c) % c, c);
      accum += acc * B * kv_row * tokens_of(g.first + (m - i + c) % c, c);
    }
    p.add("cp", Phase::fwd, to, kv).add("cp", Phase::bwd, to, kv + accum);
  }
  return p;
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
  // dynamic also weighs work by the shape's GEMM widths and sizes groups by the cap.
  const MlaDims& m = s.mla_dims;
  std::vector<int64_t> k = {s.N, R, int64_t(s.balance), s.mask.causal, s.mask.window, s.cp_cap, s.D, s.H, s.G, s.d, s.full_block ? s.F : 0,
                            s.d_v, s.mla, m.q_rank, m.kv_rank, m.d_nope, m.d_rope, m.d_v};
  k.insert(k.end(), s.mask.doc_lens.begin(), s.mask.doc_lens.end());
  if (k != key) {
    const TokenLayout l = TokenLayout::build(s.balance, s, R);
    pos.clear();
    for (int r = 0; r < R; ++r) pos.push_back(l.positions_of(r));
    key = std::move(k);
  }
  return pos;
}

}  // namespace cpbench
