// Tiled fp32 flash attention on the CPU: the inner products run as OpenBLAS sgemm calls on
// tiles (single-threaded inside, one per OpenMP thread), the softmax steps in the ISA-dispatched
// loops of vec_ops.cpp.
//
// Masks come from global positions and the mask description: each query row sees one interval
// [lo, hi] of key positions (AttnMask: causal, sliding window, documents). For each (query tile,
// key tile) pair a plan records whether the pair is fully masked (skipped), fully visible
// (mask-free path) or partial (mask applied, key columns before the first and past the last
// visible one trimmed when the keys of the tile are sorted, as they are within every segment).
//
// Forward: work items (b, h, query tile), heaviest first, dynamic schedule; each item owns its
// o rows and lse entries, so the result does not depend on the schedule.
// Backward (FlashAttention-2): for each batch row and chunk of query rows, items (kv head, key
// tile) are dealt to threads by a fixed longest-first assignment. An item owns its dK, dV tile
// and accumulates dQ into the thread's private buffer; the buffers are summed into dq in thread
// order afterwards. Results are deterministic for a given thread count.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_ops.h"

extern "C" {
// OpenBLAS extensions (declared in its cblas.h; repeated here for other cblas headers).
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
}

namespace cpbench::cpu {

// ---- OpenBLAS threading -----------------------------------------------------------------------
void blas_set_threads(int n) { openblas_set_num_threads(n); }
int blas_threads() { return openblas_get_num_threads(); }
const char* blas_core_name() { return openblas_get_corename(); }

BlasSingleThreaded::BlasSingleThreaded() : saved_(openblas_get_num_threads()) {
  if (saved_ != 1) openblas_set_num_threads(1);
}
BlasSingleThreaded::~BlasSingleThreaded() {
  if (saved_ != 1) openblas_set_num_threads(saved_);
}

// ---- tiles ------------------------------------------------------------------------------------
namespace {
void validate(const AttnTiles& t, const std::string& from) {
  const int v[4] = {t.fwd_q, t.fwd_k, t.bwd_q, t.bwd_k};
  if (*std::min_element(v, v + 4) < 16 || *std::max_element(v, v + 4) > 4096)
    throw std::invalid_argument(from + ": attention tile sizes must lie in [16, 4096]");
  if (t.band < 8 || t.band > 4096)
    throw std::invalid_argument(from + ": attention band must lie in [8, 4096]");
  if (t.bwd_dq_floats < 1) throw std::invalid_argument(from + ": bwd_dq_floats must be >= 1");
}
AttnTiles read_tiles() {
  AttnTiles t;
  if (const char* e = std::getenv("CPBENCH_ATTN_TILES")) {
    const std::string from = std::string("CPBENCH_ATTN_TILES='") + e + "'";
    if (std::sscanf(e, "%d,%d,%d,%d", &t.fwd_q, &t.fwd_k, &t.bwd_q, &t.bwd_k) != 4)
      throw std::invalid_argument(from + ": expected fwd_q,fwd_k,bwd_q,bwd_k");
    validate(t, from);
  }
  return t;
}
AttnTiles& tiles_storage() {
  static AttnTiles t = read_tiles();
  return t;
}
}  // namespace

const AttnTiles& attn_tiles() { return tiles_storage(); }
void set_attn_tiles(const AttnTiles& t) {
  validate(t, "set_attn_tiles");
  tiles_storage() = t;
}

namespace {


int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Per-thread scratch that survives between calls (no page faults in the timed loop).
float* scratch(int slot, size_t n) {
  thread_local std::vector<float> buf[4];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot].data();
}

std::vector<int32_t> positions32(const Positions& p) {
  std::vector<int32_t> v(static_cast<size_t>(p.count()));
  size_t i = 0;
  for (int s = 0; s < p.nseg(); ++s) {
    const PosSeg& g = p.seg(s);
    for (int64_t r = 0; r < g.count; ++r) v[i++] = static_cast<int32_t>(g.start + r * g.stride);
  }
  return v;
}

// Per query row, the visible interval [lo, hi] of key positions (AttnMask), clamped to int32
// (check_positions bounds every position by 2^31-1).
struct RowBounds {
  std::vector<int32_t> lo, hi;
};
RowBounds row_bounds(const std::vector<int32_t>& qp, const AttnMask& m) {
  RowBounds r;
  r.lo.resize(qp.size());
  r.hi.resize(qp.size());
  for (size_t i = 0; i < qp.size(); ++i) {
    r.lo[i] = static_cast<int32_t>(std::max<int64_t>(m.lo(qp[i]), 0));
    r.hi[i] = static_cast<int32_t>(std::min<int64_t>(m.hi(qp[i]), INT32_MAX));
  }
  return r;
}

struct TileInfo {
  int64_t start = 0;
  int size = 0;
  int32_t lo = 0, hi = 0;  // min and max position
  bool sorted = true;      // positions ascending within the tile
  // Query tiles: extremes of the rows' visible bounds.
  int32_t min_lo = 0, max_lo = 0, min_hi = 0, max_hi = 0;
};

std::vector<TileInfo> tile_infos(const std::vector<int32_t>& pos, int tile,
                                 const RowBounds* rb = nullptr) {
  const int64_t n = static_cast<int64_t>(pos.size());
  std::vector<TileInfo> out;
  for (int64_t t0 = 0; t0 < n; t0 += tile) {
    TileInfo ti;
    ti.start = t0;
    ti.size = static_cast<int>(std::min<int64_t>(tile, n - t0));
    ti.lo = ti.hi = pos[t0];
    for (int i = 1; i < ti.size; ++i) {
      const int32_t p = pos[t0 + i];
      ti.lo = std::min(ti.lo, p);
      ti.hi = std::max(ti.hi, p);
      if (p < pos[t0 + i - 1]) ti.sorted = false;
    }
    if (rb) {
      const auto lo0 = rb->lo.begin() + t0, hi0 = rb->hi.begin() + t0;
      ti.min_lo = *std::min_element(lo0, lo0 + ti.size);
      ti.max_lo = *std::max_element(lo0, lo0 + ti.size);
      ti.min_hi = *std::min_element(hi0, hi0 + ti.size);
      ti.max_hi = *std::max_element(hi0, hi0 + ti.size);
    }
    out.push_back(ti);
  }
  return out;
}

// What one (query tile, key tile) pair needs.
struct PairPlan {
  int col0 = 0, cols = 0;  // key columns [col0, col0 + cols) to compute (cols 0: skip)
  bool masked = false;     // apply the mask
};

// Columns [c0, c1) of a key tile that rows with bounds in [min_lo .. max_hi] may see: when the
// tile's keys are sorted, those from the first >= min_lo to the last <= max_hi; else all.
void visible_cols(const TileInfo& kt, const int32_t* kp, int32_t min_lo, int32_t max_hi, int& c0,
                  int& c1) {
  c0 = 0;
  c1 = kt.size;
  if (!kt.sorted) return;
  const int32_t* kb = kp + kt.start;
  c0 = static_cast<int>(std::lower_bound(kb, kb + kt.size, min_lo) - kb);
  c1 = static_cast<int>(std::upper_bound(kb + c0, kb + kt.size, max_hi) - kb);
}

PairPlan plan_pair(const TileInfo& qt, const TileInfo& kt, const int32_t* kp, bool full_mask) {
  PairPlan p;
  if (full_mask || (qt.max_lo <= kt.lo && kt.hi <= qt.min_hi)) {  // every row sees every key
    p.cols = kt.size;
    return p;
  }
  if (kt.lo > qt.max_hi || kt.hi < qt.min_lo) return p;  // no row sees any key
  int c0, c1;
  visible_cols(kt, kp, qt.min_lo, qt.max_hi, c0, c1);
  p.masked = true;
  p.col0 = c0;
  p.cols = std::max(0, c1 - c0);
  return p;
}

// Rows [r0, r0 + rows) of a query tile against key columns [c0, c0 + cols) of a key tile.
struct Band {
  int r0, rows, c0, cols;
  bool masked;
};

// Calls f(Band) for the work of one (query tile, key tile) pair: the whole tile when no mask is
// needed, else bands of up to `band` rows (cut where the rows' visible key intervals stop
// overlapping: a document boundary), each trimmed to the columns visible to some row of the band
// (keys sorted) and masked only when some row of the band does not see all of its columns. The
// diagonal of a causal mask and both edges of a window waste at most ~band/2 columns per row.
template <class F>
void for_each_band(const TileInfo& qt, const TileInfo& kt, const PairPlan& pp, const RowBounds& rb,
                   const int32_t* kp, int band, F&& f) {
  if (!pp.masked) {
    f(Band{0, qt.size, pp.col0, pp.cols, false});
    return;
  }
  const int32_t* kb = kp + kt.start;
  const int32_t* lo = rb.lo.data() + qt.start;
  const int32_t* hi = rb.hi.data() + qt.start;
  for (int r0 = 0, rows = 0; r0 < qt.size; r0 += rows) {
    // Up to `band` rows, ending early at a row whose visible keys are disjoint from the band's so
    // far (a new document): rows of different documents in one band would compute every
    // cross-document pair only to mask it (packed short documents, balanced layouts).
    int32_t min_lo = lo[r0], max_lo = lo[r0], min_hi = hi[r0], max_hi = hi[r0];
    for (rows = 1; rows < band && r0 + rows < qt.size; ++rows) {
      const int32_t l = lo[r0 + rows], h = hi[r0 + rows];
      if (l > max_hi || h < min_lo) break;
      min_lo = std::min(min_lo, l), max_lo = std::max(max_lo, l);
      min_hi = std::min(min_hi, h), max_hi = std::max(max_hi, h);
    }
    int c0 = pp.col0, c1 = pp.col0 + pp.cols;
    int32_t kmin, kmax;
    if (kt.sorted) {
      c0 = static_cast<int>(std::lower_bound(kb + c0, kb + c1, min_lo) - kb);
      c1 = static_cast<int>(std::upper_bound(kb + c0, kb + c1, max_hi) - kb);
      if (c1 <= c0) continue;
      kmin = kb[c0];
      kmax = kb[c1 - 1];
    } else {
      kmin = *std::min_element(kb + c0, kb + c1);
      kmax = *std::max_element(kb + c0, kb + c1);
      if (kmin > max_hi || kmax < min_lo) continue;
    }
    f(Band{r0, rows, c0, c1 - c0, !(max_lo <= kmin && kmax <= min_hi)});
  }
}

inline void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
}

}  // namespace

// ---- GEMM -------------------------------------------------------------------------------------
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta C (what BLAS leaves implicit when there is nothing to sum)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) C[r * ldc + c] = beta == 0.0f ? 0.0f : beta * C[r * ldc + c];
    return;
  }
  BlasSingleThreaded single;
  // Blocks of at least 64 rows (columns) and ~4 MFLOP, so small products stay on one thread.
  const bool split_m = m >= n;
  const int64_t len = split_m ? m : n, other = split_m ? n : m;
  const int64_t min_len = std::max<int64_t>(64, (int64_t(4) << 20) / std::max<int64_t>(1, 2 * other * k));
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, len / min_len));
  if (parts == 1) {
    sgemm(trans_a, trans_b, int(m), int(n), int(k), alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const int64_t blk = round_up((len + parts - 1) / parts, 16);
#pragma omp parallel for schedule(static, 1) num_threads(int(parts))
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t i0 = p * blk;
    if (i0 >= len) continue;
    const int cnt = static_cast<int>(std::min(blk, len - i0));
    if (split_m)  // rows i0.. of C and of op(A)
      sgemm(trans_a, trans_b, cnt, int(n), int(k), alpha, trans_a ? A + i0 : A + i0 * lda, lda, B,
            ldb, beta, C + i0 * ldc, ldc);
    else  // columns i0.. of C and of op(B)
      sgemm(trans_a, trans_b, int(m), cnt, int(k), alpha, A, lda, trans_b ? B + i0 * ldb : B + i0,
            ldb, beta, C + i0, ldc);
  }
}

// ---- forward ----------------------------------------------------------------------------------
void attn_fwd(const AttnShape& s, const float* q, const float* k, const float* v,
              const Positions& qpos, const Positions& kpos, float* o, float* lse, int threads) {
  const int64_t B = s.B, nq = s.nq, nk = s.nk;
  const int hq = s.hq, hk = s.hk, d = s.d, dv = s.vdim();  // scores over d, values dv
  if (nq == 0) return;
  const std::vector<int32_t> qp = positions32(qpos), kp = positions32(kpos);
  const AttnMask mask = s.mask();
  const RowBounds rb = row_bounds(qp, mask);
  const AttnTiles& tl = attn_tiles();
  // Under a sliding window a query tile of bq rows spans W + bq - 1 key columns, of which only
  // W - bq + 1 are visible to all its rows: tiles of about W/4 rows keep most of the work on the
  // mask-free path (N=16384, W=1024: 256-row tiles run the window 1.18x its ideal share of the
  // causal time, 512-row tiles 1.29x; docs/PERFORMANCE.md).
  const int64_t window_rows = std::max<int64_t>(64, round_up(mask.window / 4, 16));
  const int bq = mask.window > 0 ? static_cast<int>(std::min<int64_t>(tl.fwd_q, window_rows)) : tl.fwd_q;
  const int bk = tl.fwd_k, band = tl.band;
  const std::vector<TileInfo> qtiles = tile_infos(qp, bq, &rb);
  const std::vector<TileInfo> ktiles = nk > 0 ? tile_infos(kp, bk) : std::vector<TileInfo>{};
  const int nqt = static_cast<int>(qtiles.size()), nkt = static_cast<int>(ktiles.size());

  // Plan once for all (b, h): per query tile the key tiles to visit.
  struct Visit {
    int kt;
    PairPlan p;
  };
  std::vector<std::vector<Visit>> plan(nqt);
  std::vector<int64_t> cost(nqt, 0);
  for (int i = 0; i < nqt; ++i)
    for (int j = 0; j < nkt; ++j) {
      const PairPlan p = plan_pair(qtiles[i], ktiles[j], kp.data(), mask.full());
      if (p.cols == 0) continue;
      plan[i].push_back({j, p});
      cost[i] += p.cols;
    }
  // Heaviest query tiles first so the dynamic schedule ends balanced.
  std::vector<int> order(nqt);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });

  const float alpha = scale_log2(s);  // scores in log2 units
  const int64_t ldq = int64_t(hq) * d, ldk = int64_t(hk) * d, vr = s.v_row(), ldv = int64_t(hk) * vr;
  const int64_t ldS = round_up(bk, 16);
  const int64_t items = int64_t(nqt) * B * hq;
  const VecOps& ops = vec_ops();
  BlasSingleThreaded single;

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < items; ++it) {
    const int qi = order[it / (B * hq)];
    const int64_t bh = it % (B * hq);
    const int64_t b = bh / hq;
    const int h = static_cast<int>(bh % hq), g = s.kv_head(h);
    const TileInfo& qt = qtiles[qi];
    const int rows = qt.size;
    float* S = scratch(0, size_t(bq) * ldS);
    float* O = scratch(1, size_t(bq) * dv);
    float* m = scratch(2, size_t(2) * bq);
    float* l = m + bq;
    std::fill(O, O + size_t(rows) * dv, 0.0f);
    std::fill(m, m + rows, kNegInf);
    std::fill(l, l + rows, 0.0f);
    const float* Qt = q + ((b * nq + qt.start) * hq + h) * d;
    for (const Visit& vis : plan[qi]) {
      const TileInfo& kt = ktiles[vis.kt];
      const float* Kt = k + ((b * nk + kt.start) * hk + g) * d;
      const float* Vt = v + ((b * nk + kt.start) * hk + g) * vr;
      for_each_band(qt, kt, vis.p, rb, kp.data(), band, [&](const Band& bd) {
        const float* Qb = Qt + int64_t(bd.r0) * ldq;
        const float *Kb = Kt + int64_t(bd.c0) * ldk, *Vb = Vt + int64_t(bd.c0) * ldv;
        float* Ob = O + int64_t(bd.r0) * dv;
        sgemm(false, true, bd.rows, bd.cols, d, alpha, Qb, ldq, Kb, ldk, 0.0f, S, ldS);
        if (bd.masked) {
          const int64_t r = qt.start + bd.r0;
          ops.mask_tile(S, ldS, bd.rows, bd.cols, rb.lo.data() + r, rb.hi.data() + r,
                        kp.data() + kt.start + bd.c0);
        }
        ops.softmax_tile(S, ldS, bd.rows, bd.cols, m + bd.r0, l + bd.r0, Ob, dv, dv);
        sgemm(false, false, bd.rows, dv, bd.cols, 1.0f, S, ldS, Vb, ldv, 1.0f, Ob, dv);
      });
    }
    // o = O / l, lse = ln 2 * (m + log2 l); rows without a visible key: o = 0, lse = -inf.
    float* lrow = lse + (b * hq + h) * nq + qt.start;
    for (int r = 0; r < rows; ++r) {
      float* orow = o + ((b * nq + qt.start + r) * hq + h) * dv;
      const float* Orow = O + size_t(r) * dv;
      if (l[r] > 0.0f) {
        const float inv = 1.0f / l[r];
        for (int c = 0; c < dv; ++c) orow[c] = Orow[c] * inv;
        lrow[r] = lse_of(m[r], l[r]);
      } else {
        std::fill(orow, orow + dv, 0.0f);
        lrow[r] = kNegInf;
      }
    }
  }
}

// ---- backward ---------------------------------------------------------------------------------
void attn_bwd(const AttnShape& s, const float* q, const float* k, const float* v,
              const float* dout, const float* lse, const float* delta, const Positions& qpos,
              const Positions& kpos, float* dq, float* dk, float* dv_acc, int threads) {
  const int64_t B = s.B, nq = s.nq, nk = s.nk;
  const int hq = s.hq, hk = s.hk, d = s.d, dv = s.vdim();  // q, k over d; v, o over dv
  if (nq == 0 || nk == 0) return;
  const std::vector<int32_t> qp = positions32(qpos), kp = positions32(kpos);
  const AttnMask mask = s.mask();
  const RowBounds rb = row_bounds(qp, mask);
  const AttnTiles& tl = attn_tiles();
  const int bq = tl.bwd_q, bk = tl.bwd_k, band = tl.band;
  const std::vector<TileInfo> qtiles = tile_infos(qp, bq, &rb), ktiles = tile_infos(kp, bk);
  const int nqt = static_cast<int>(qtiles.size()), nkt = static_cast<int>(ktiles.size());

  // plan[j][i]: query tile i against key tile j.
  std::vector<std::vector<PairPlan>> plan(nkt, std::vector<PairPlan>(nqt));
  for (int j = 0; j < nkt; ++j)
    for (int i = 0; i < nqt; ++i) plan[j][i] = plan_pair(qtiles[i], ktiles[j], kp.data(), mask.full());

  const float scale = attn_scale(s);
  const float alpha = scale_log2(s);
  const int64_t ldq = int64_t(hq) * d, ldk = int64_t(hk) * d, ldo = int64_t(hq) * dv, ldv = int64_t(hk) * dv;
  const int64_t ldS = round_up(bk, 16);
  const VecOps& ops = vec_ops();
  const int T = std::max(1, threads);

  // Query rows per chunk: the private dQ buffers ([chunk, hq, d] per thread) stay within budget.
  const int tiles_per_chunk = static_cast<int>(
      std::min<int64_t>(nqt, std::max<int64_t>(1, tl.bwd_dq_floats / (int64_t(bq) * hq * d))));
  const int64_t chunk_rows_max = int64_t(tiles_per_chunk) * bq;
  std::vector<float*> dqbuf(T, nullptr);
  std::vector<char> dq_used(T, 0);
  BlasSingleThreaded single;

  // Items (g, j) of one chunk, with their cost, dealt longest-first to the least loaded thread.
  const int64_t nitems = int64_t(hk) * nkt;
  std::vector<int64_t> item_cost(nitems);
  std::vector<int> owner(nitems);
  std::vector<std::vector<int64_t>> mine(T);

  for (int64_t b = 0; b < B; ++b) {
    for (int c0 = 0; c0 < nqt; c0 += tiles_per_chunk) {
      const int c1 = std::min(nqt, c0 + tiles_per_chunk);
      const int64_t row0 = qtiles[c0].start;
      const int64_t chunk_rows = qtiles[c1 - 1].start + qtiles[c1 - 1].size - row0;
      // Assignment (depends on the plan only: identical for every b).
      for (int j = 0; j < nkt; ++j) {
        int64_t cst = 0;
        for (int i = c0; i < c1; ++i) cst += int64_t(plan[j][i].cols) * qtiles[i].size;
        for (int g = 0; g < hk; ++g) item_cost[int64_t(g) * nkt + j] = cst;
      }
      std::vector<int64_t> idx(nitems);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(),
                       [&](int64_t a, int64_t c) { return item_cost[a] > item_cost[c]; });
      std::vector<int64_t> load(T, 0);
      for (auto& mv : mine) mv.clear();
      for (int64_t it : idx) {
        if (item_cost[it] == 0) continue;
        const int t = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
        load[t] += item_cost[it];
        mine[t].push_back(it);
      }
      std::fill(dq_used.begin(), dq_used.end(), 0);

#pragma omp parallel num_threads(T)
      {
        const int t = omp_get_thread_num();
        float* S = scratch(0, size_t(bq) * ldS);
        float* dP = scratch(1, size_t(bq) * ldS);
        float* lse2 = scratch(2, size_t(2) * bq);
        float* dl = lse2 + bq;
        float* dQ = nullptr;
        if (!mine[t].empty()) {
          dQ = scratch(3, size_t(chunk_rows_max) * hq * d);
          std::fill(dQ, dQ + size_t(chunk_rows) * hq * d, 0.0f);
          dqbuf[t] = dQ;
          dq_used[t] = 1;
        }
        // Items in ascending (g, j) order within the thread: a fixed summation order.
        std::vector<int64_t> my = mine[t];
        std::sort(my.begin(), my.end());
        for (int64_t it : my) {
          const int g = static_cast<int>(it / nkt), j = static_cast<int>(it % nkt);
          const TileInfo& kt = ktiles[j];
          const int64_t koff = ((b * nk + kt.start) * hk + g) * d, voff = ((b * nk + kt.start) * hk + g) * dv;
          const float *Kt = k + koff, *Vt = v + voff;
          float *dKt = dk + koff, *dVt = dv_acc + voff;
          for (int h = s.q_begin(g); h < s.q_end(g); ++h) {
            for (int i = c0; i < c1; ++i) {
              const PairPlan& pp = plan[j][i];
              if (pp.cols == 0) continue;
              const TileInfo& qt = qtiles[i];
              const int64_t qoff = ((b * nq + qt.start) * hq + h) * d, ooff = ((b * nq + qt.start) * hq + h) * dv;
              const float *Qt = q + qoff, *dOt = dout + ooff;
              float* dQt = dQ + ((qt.start - row0) * hq + h) * d;
              const float* lrow = lse + (b * hq + h) * nq + qt.start;
              const float* drow = delta + (b * hq + h) * nq + qt.start;
              for (int r = 0; r < qt.size; ++r) {
                lse2[r] = lse_log2(lrow[r]);
                dl[r] = drow[r];
              }
              for_each_band(qt, kt, pp, rb, kp.data(), band, [&](const Band& bd) {
                const int rows = bd.rows, cols = bd.cols;
                const int64_t ro = int64_t(bd.r0) * ldq, co = int64_t(bd.c0) * ldk;
                const int64_t roo = int64_t(bd.r0) * ldo, cov = int64_t(bd.c0) * ldv;
                const float *Kb = Kt + co, *Vb = Vt + cov;
                float *dKb = dKt + co, *dVb = dVt + cov;
                // P = exp2(alpha Q K^T - lse2), masked entries 0.
                sgemm(false, true, rows, cols, d, alpha, Qt + ro, ldq, Kb, ldk, 0.0f, S, ldS);
                if (bd.masked) {
                  const int64_t r = qt.start + bd.r0;
                  ops.mask_tile(S, ldS, rows, cols, rb.lo.data() + r, rb.hi.data() + r,
                                kp.data() + kt.start + bd.c0);
                }
                ops.prob_tile(S, ldS, rows, cols, lse2 + bd.r0);
                // dV += P^T dO;  dP = dO V^T;  dS = P (dP - delta)
                sgemm(true, false, cols, dv, rows, 1.0f, S, ldS, dOt + roo, ldo, 1.0f, dVb, ldv);
                sgemm(false, true, rows, cols, dv, 1.0f, dOt + roo, ldo, Vb, ldv, 0.0f, dP, ldS);
                ops.dsoftmax_tile(S, dP, ldS, rows, cols, dl + bd.r0);
                // dK += scale dS^T Q;  dQ += scale dS K
                sgemm(true, false, cols, d, rows, scale, dP, ldS, Qt + ro, ldq, 1.0f, dKb, ldk);
                sgemm(false, false, rows, d, cols, scale, dP, ldS, Kb, ldk, 1.0f, dQt + ro, ldq);
              });
            }
          }
        }
#pragma omp barrier
        // dq[b, chunk] += sum of the private buffers, in thread order; rows split among threads.
        const int64_t n = chunk_rows * hq * d;
        const int64_t per = (n + T - 1) / T;
        const int64_t e0 = std::min(n, per * t), e1 = std::min(n, e0 + per);
        float* dst = dq + (b * nq + row0) * hq * d;
        for (int u = 0; u < T; ++u) {
          if (!dq_used[u]) continue;
          const float* src = dqbuf[u];
          for (int64_t e = e0; e < e1; ++e) dst[e] += src[e];
        }
      }
    }
  }
}

// ---- merge and delta: the fp32 instantiations of attention_rows.h ----------------------------
template void attn_merge<float>(const AttnShape&, float*, float*, const float*, const float*, int);
template void attn_bwd_delta<float>(const AttnShape&, const float*, const float*, float*, int);
template void attn_sink_fwd<float>(const AttnShape&, const float*, float*, float*, int);
template void attn_sink_bwd<float>(const AttnShape&, const float*, const float*, const float*, const float*, float*, int);

}  // namespace cpbench::cpu
