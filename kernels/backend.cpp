// Backend base-class defaults, the exact visible-pair count, and the boundary checks every
// backend runs before it trusts a call's shapes.
#include "kernels/backend.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace cpbench {

double Backend::compute_busy_ms() const {
  double t = 0;
  for (const ComputeRecord& r : compute_log_) t += r.t1_ms - r.t0_ms;
  return t;
}

void Backend::copy_to_host_raw(void* dst, const Tensor& src, size_t bytes) {
  if (bytes > src.bytes())
    throw std::invalid_argument("copy_to_host_raw: " + std::to_string(bytes) +
                                " bytes from a tensor of " + std::to_string(src.bytes()));
  if (bytes) std::memcpy(dst, src.data, bytes);
}

void Backend::copy_from_host_raw(Tensor& dst, const void* src, size_t bytes) {
  if (bytes > dst.bytes())
    throw std::invalid_argument("copy_from_host_raw: " + std::to_string(bytes) +
                                " bytes into a tensor of " + std::to_string(dst.bytes()));
  if (bytes) std::memcpy(dst.data, src, bytes);
}

// ---- count_visible_pairs ----------------------------------------------------------------------
namespace {

// Pair counts are 128-bit inside: two blocks of 2^32 tokens each (a sequence of 2^40 tokens on
// a ring of 256) have up to 2^64 pairs, and the sums below pass through products of a row count
// and a position. Positions and counts are below 2^63 (the config refuses B x N beyond that), so
// every intermediate here stays below 2^127.
__extension__ typedef __int128 Count;  // (__extension__: -Wpedantic knows no __int128)
__extension__ typedef unsigned __int128 UCount;

// sum_{i=0}^{n-1} floor((a*i + b) / m) for n, m >= 1 and a, b >= 0 (Euclid-like reduction).
UCount floor_sum(UCount n, UCount m, UCount a, UCount b) {
  UCount ans = 0;
  while (true) {
    if (a >= m) {
      ans += (n * (n - 1) / 2) * (a / m);
      a %= m;
    }
    if (b >= m) {
      ans += n * (b / m);
      b %= m;
    }
    const UCount y_max = a * n + b;
    if (y_max < m) break;
    n = y_max / m;
    b = y_max % m;
    std::swap(m, a);
  }
  return ans;
}

// Pairs (i < q.count, j < k.count) with k.start + j*k.stride <= q.start + i*q.stride.
Count visible_in_segments(const PosSeg& q, const PosSeg& k) {
  if (q.count <= 0 || k.count <= 0) return 0;
  // Row i sees c(i) = clamp(floor((q.start - k.start + i*q.stride) / k.stride) + 1, 0, k.count).
  // c is non-decreasing in i: zero while the query is before the first key, k.count once it is at
  // or after the last key, and a floor of a linear function in between.
  const int64_t a = q.start - k.start;
  const int64_t qs = q.stride, ks = k.stride;
  auto first_row_at_least = [&](int64_t target) -> int64_t {  // min i with a + i*qs >= target
    if (a >= target) return 0;
    return (target - a + qs - 1) / qs;
  };
  const int64_t i_lo = std::min(first_row_at_least(0), q.count);
  const int64_t i_hi = std::max(i_lo, std::min(first_row_at_least((k.count - 1) * ks), q.count));
  Count total = Count(q.count - i_hi) * k.count;
  const int64_t n = i_hi - i_lo;
  if (n > 0) {
    // sum over i in [i_lo, i_hi) of floor((a + i*qs) / ks) + 1, with a + i_lo*qs >= 0.
    const int64_t b0 = a + i_lo * qs;
    total += Count(floor_sum(UCount(n), UCount(ks), UCount(qs), UCount(b0))) + n;
  }
  return total;
}

// Keys of segment k at positions <= x.
int64_t keys_upto(const PosSeg& k, int64_t x) {
  if (k.count <= 0 || x < k.start) return 0;
  return std::min(k.count, (x - k.start) / k.stride + 1);
}

// sum over rows i < n of keys_upto(k, x0 + i*slope), slope >= 0.
Count sum_keys_upto(const PosSeg& k, int64_t x0, int64_t slope, int64_t n) {
  if (n <= 0 || k.count <= 0) return 0;
  if (slope == 0) return Count(n) * keys_upto(k, x0);
  return visible_in_segments(PosSeg{x0, slope, n}, k);
}

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Visible pairs between query segment q and key segment k. The rows of q are cut where the
// document changes and where lo (window start passes the document start) or hi (window end
// reaches the document end) switches between constant and p + const; on each piece both bounds
// are affine in the row, and the keys in [lo, hi] are counted as keys <= hi minus keys < lo.
Count visible_under_mask(const PosSeg& q, const PosSeg& k, const AttnMask& m) {
  if (q.count <= 0 || k.count <= 0) return 0;
  const int64_t a = q.start, s = q.stride, W = m.window;
  // First row >= i0 (and <= i1) whose position is >= target.
  auto first_row = [&](int64_t i0, int64_t i1, int64_t target) {
    const int64_t p0 = a + i0 * s;
    if (p0 >= target) return i0;
    return std::min(i1, i0 + ceil_div(target - p0, s));
  };
  Count total = 0;
  for (int64_t i0 = 0; i0 < q.count;) {
    const int64_t p0 = a + i0 * s;
    const int64_t ds = m.doc_start(p0), de = m.doc_end(p0);
    const int64_t i1 = de >= AttnMask::kNoEnd ? q.count : std::min(q.count, ceil_div(de - a, s));
    const int64_t r_lo = W ? first_row(i0, i1, ds + W) : i1;           // lo = p - W + 1 from here
    const int64_t r_hi = (!m.causal && W) ? first_row(i0, i1, de - W) : i1;  // hi = de - 1 from here
    int64_t cuts[4] = {i0, std::min(r_lo, r_hi), std::max(r_lo, r_hi), i1};
    for (int c = 0; c < 3; ++c) {
      const int64_t u = cuts[c], v = cuts[c + 1];
      if (v <= u) continue;
      const int64_t pu = a + u * s, n = v - u;
      Count hi_sum, lo_sum;
      if (m.causal)
        hi_sum = sum_keys_upto(k, pu, s, n);
      else if (W && u < r_hi)
        hi_sum = sum_keys_upto(k, pu + W - 1, s, n);
      else
        hi_sum = sum_keys_upto(k, de >= AttnMask::kNoEnd ? AttnMask::kNoEnd : de - 1, 0, n);
      if (W && u >= r_lo)
        lo_sum = sum_keys_upto(k, pu - W, s, n);
      else
        lo_sum = sum_keys_upto(k, ds - 1, 0, n);
      total += hi_sum - lo_sum;
    }
    i0 = i1;
  }
  return total;
}

}  // namespace

int64_t AttnMask::doc_start(int64_t i) const {
  if (!docs || docs->empty()) return 0;
  const auto it = std::upper_bound(docs->begin(), docs->end(), i);
  return it == docs->begin() ? 0 : *(it - 1);
}

int64_t AttnMask::doc_end(int64_t i) const {
  if (!docs || docs->empty()) return kNoEnd;
  const auto it = std::upper_bound(docs->begin(), docs->end(), i);
  return it == docs->end() ? kNoEnd : *it;
}

int64_t AttnMask::lo(int64_t i) const {
  const int64_t ds = doc_start(i);
  return window > 0 ? std::max(ds, i - window + 1) : ds;
}

int64_t AttnMask::hi(int64_t i) const {
  if (causal) return i;
  const int64_t end = doc_end(i) - 1;
  return window > 0 ? std::min(end, i + window - 1) : end;
}

namespace {
Count visible_pairs(const Positions& qpos, const Positions& kpos, const AttnMask& mask) {
  if (mask.full()) return Count(qpos.count()) * kpos.count();
  Count total = 0;
  for (int a = 0; a < qpos.nseg(); ++a)
    for (int b = 0; b < kpos.nseg(); ++b)
      total += visible_under_mask(qpos.seg(a), kpos.seg(b), mask);
  return total;
}
}  // namespace

int64_t count_visible_pairs(const Positions& qpos, const Positions& kpos, const AttnMask& mask) {
  const Count total = visible_pairs(qpos, kpos, mask);
  if (total > Count(std::numeric_limits<int64_t>::max()))
    throw std::overflow_error("count_visible_pairs: the " + std::to_string(qpos.count()) + " x " +
                              std::to_string(kpos.count()) + " block has more than 2^63 - 1 visible pairs");
  return static_cast<int64_t>(total);
}

bool any_visible_pair(const Positions& qpos, const Positions& kpos, const AttnMask& mask) {
  return visible_pairs(qpos, kpos, mask) > 0;
}

int64_t count_visible_pairs(const Positions& qpos, const Positions& kpos, bool causal) {
  return count_visible_pairs(qpos, kpos, AttnMask{causal, 0, nullptr});
}

// ---- boundary checks --------------------------------------------------------------------------
namespace {

[[noreturn]] void fail(const std::string& op, const std::string& what) {
  throw std::invalid_argument(op + ": " + what);
}

void expect_numel(const char* op, const char* name, const Tensor& t, int64_t n,
                  const std::string& shape) {
  if (t.empty() && n > 0) fail(op, std::string(name) + " is an empty tensor, expected " + shape);
  if (t.numel() != n)
    fail(op, std::string(name) + " has " + std::to_string(t.numel()) + " elements " +
                 t.shape_str() + ", expected " + shape + " = " + std::to_string(n));
}

void expect_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  if (t.dtype != want)
    fail(op, std::string(name) + " is " + dtype_name(t.dtype) + ", expected " + dtype_name(want));
}

std::string dims(std::initializer_list<int64_t> v) {
  std::ostringstream os;
  os << '[';
  bool first = true;
  for (int64_t x : v) {
    os << (first ? "" : ", ") << x;
    first = false;
  }
  os << ']';
  return os.str();
}

void check_positions(const char* op, const char* name, const Positions& p, int64_t rows) {
  if (p.count() != rows)
    fail(op, std::string(name) + " " + p.str() + " has " + std::to_string(p.count()) +
                 " positions for " + std::to_string(rows) + " rows");
  for (int s = 0; s < p.nseg(); ++s) {
    const PosSeg& g = p.seg(s);
    if (g.start < 0 || g.stride < 1 || g.count < 0)
      fail(op, std::string(name) + " " + p.str() + ": segments need start >= 0, stride >= 1");
    // Kernels keep positions in 32-bit integers.
    if (g.count > 0 && g.start + (g.count - 1) * g.stride > INT32_MAX)
      fail(op, std::string(name) + " " + p.str() + " has positions beyond 2^31-1");
  }
}

}  // namespace

float attn_scale(const AttnShape& s) {
  return s.scale != 0.0f ? s.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
}

void check_attn_shape(const AttnShape& s, const char* op) {
  if (s.B < 1 || s.nq < 0 || s.nk < 0)
    fail(op, "need B >= 1, nq >= 0, nk >= 0 (got B=" + std::to_string(s.B) +
                 ", nq=" + std::to_string(s.nq) + ", nk=" + std::to_string(s.nk) + ")");
  if (s.rep == 0 && s.head0 == 0 && (s.hq < 1 || s.hk < 1 || s.hq % s.hk != 0))
    fail(op, "query heads hq=" + std::to_string(s.hq) + " must be a positive multiple of kv heads hk=" +
                 std::to_string(s.hk));
  if ((s.rep != 0 || s.head0 != 0) &&
      (s.hq < 1 || s.rep < 1 || s.head0 < 0 || s.head0 >= s.rep || s.hk != (s.head0 + s.hq + s.rep - 1) / s.rep))
    fail(op, "a head slice's GQA map needs hq >= 1, rep >= 1, 0 <= head0 < rep and hk = ceil((head0 + hq) / rep) "
             "(got hq=" + std::to_string(s.hq) + ", hk=" + std::to_string(s.hk) + ", rep=" + std::to_string(s.rep) +
             ", head0=" + std::to_string(s.head0) + ")");
  if (s.d < 1 || s.d > 1024)
    fail(op, "head dim d=" + std::to_string(s.d) + " is not supported (1 <= d <= 1024)");
  if (s.d_v < 0 || s.vdim() > 1024)
    fail(op, "value head dim d_v=" + std::to_string(s.d_v) + " is not supported (0 = d, or 1 <= d_v <= 1024)");
  if (!std::isfinite(s.scale) || s.scale < 0)
    fail(op, "scale must be finite and >= 0 (0 means 1/sqrt(d))");
  check_attn_mask(s.mask(), op);
}

void check_attn_mask(const AttnMask& m, const char* op) {
  if (m.window < 0 || m.window > INT32_MAX)
    fail(op, "window " + std::to_string(m.window) + " must lie in [0, 2^31-1] (0 = no window)");
  if (!m.docs) return;
  const std::vector<int64_t>& d = *m.docs;
  if (d.empty() || d[0] != 0)
    fail(op, "document starts must begin with 0 (got " +
                 (d.empty() ? std::string("none") : std::to_string(d[0])) + ")");
  for (size_t i = 1; i < d.size(); ++i)
    if (d[i] <= d[i - 1])
      fail(op, "document starts must be strictly ascending (start " + std::to_string(i) + " = " +
                   std::to_string(d[i]) + " after " + std::to_string(d[i - 1]) + ")");
  if (d.back() > INT32_MAX) fail(op, "document starts beyond 2^31-1");
}

void check_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Positions& qpos, const Positions& kpos, const Tensor& o,
                    const Tensor& lse) {
  const char* op = "attn_fwd";
  check_attn_shape(s, op);
  expect_numel(op, "q", q, s.B * s.nq * s.hq * s.d, dims({s.B, s.nq, s.hq, s.d}));
  expect_numel(op, "k", k, s.B * s.nk * s.hk * s.d, dims({s.B, s.nk, s.hk, s.d}));
  if (!s.v_in_k)
    expect_numel(op, "v", v, s.B * s.nk * s.hk * s.vdim(), dims({s.B, s.nk, s.hk, s.vdim()}));
  else if (v.data != k.data || v.numel() != k.numel() || s.vdim() > s.d)
    fail(op, "v_in_k: v must be k itself and d_v <= d (got d=" + std::to_string(s.d) + ", d_v=" +
                 std::to_string(s.vdim()) + (v.data != k.data ? ", v a different tensor)" : ")"));
  expect_numel(op, "o", o, s.B * s.nq * s.hq * s.vdim(), dims({s.B, s.nq, s.hq, s.vdim()}));
  expect_numel(op, "lse", lse, s.B * s.hq * s.nq, dims({s.B, s.hq, s.nq}));
  expect_dtype(op, "k", k, q.dtype);
  expect_dtype(op, "v", v, q.dtype);
  expect_dtype(op, "o", o, q.dtype);
  expect_dtype(op, "lse", lse, DType::f32);
  check_positions(op, "qpos", qpos, s.nq);
  check_positions(op, "kpos", kpos, s.nk);
}

void check_attn_merge(const AttnShape& s, const Tensor& o_acc, const Tensor& lse_acc,
                      const Tensor& o_blk, const Tensor& lse_blk) {
  const char* op = "attn_merge";
  check_attn_shape(s, op);
  const int64_t no = s.B * s.nq * s.hq * s.vdim(), nl = s.B * s.hq * s.nq;
  expect_numel(op, "o_acc", o_acc, no, dims({s.B, s.nq, s.hq, s.vdim()}));
  expect_numel(op, "o_blk", o_blk, no, dims({s.B, s.nq, s.hq, s.vdim()}));
  expect_numel(op, "lse_acc", lse_acc, nl, dims({s.B, s.hq, s.nq}));
  expect_numel(op, "lse_blk", lse_blk, nl, dims({s.B, s.hq, s.nq}));
  expect_dtype(op, "o_blk", o_blk, o_acc.dtype);
  expect_dtype(op, "lse_acc", lse_acc, DType::f32);
  expect_dtype(op, "lse_blk", lse_blk, DType::f32);
}

void check_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                          const Tensor& delta) {
  const char* op = "attn_bwd_delta";
  check_attn_shape(s, op);
  const int64_t no = s.B * s.nq * s.hq * s.vdim();
  expect_numel(op, "o", o, no, dims({s.B, s.nq, s.hq, s.vdim()}));
  expect_numel(op, "dout", dout, no, dims({s.B, s.nq, s.hq, s.vdim()}));
  expect_numel(op, "delta", delta, s.B * s.hq * s.nq, dims({s.B, s.hq, s.nq}));
  expect_dtype(op, "dout", dout, o.dtype);
  expect_dtype(op, "delta", delta, DType::f32);
}

namespace {
// The rows both sink operations read: sinks [hq], o [B,nq,hq,dv], lse [B,hq,nq] float32.
void check_sink_rows(const char* op, const AttnShape& s, const Tensor& sinks, const Tensor& o, const Tensor& lse) {
  check_attn_shape(s, op);
  expect_numel(op, "sinks", sinks, s.hq, dims({s.hq}));
  expect_numel(op, "o", o, s.B * s.nq * s.hq * s.vdim(), dims({s.B, s.nq, s.hq, s.vdim()}));
  expect_numel(op, "lse", lse, s.B * s.hq * s.nq, dims({s.B, s.hq, s.nq}));
  expect_dtype(op, "sinks", sinks, DType::f32);
  expect_dtype(op, "lse", lse, DType::f32);
}
}  // namespace

void check_attn_sink_fwd(const AttnShape& s, const Tensor& sinks, const Tensor& o,
                         const Tensor& lse) {
  check_sink_rows("attn_sink_fwd", s, sinks, o, lse);
}

void check_attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o,
                         const Tensor& dout, const Tensor& lse, const Tensor& dsinks) {
  const char* op = "attn_sink_bwd";
  check_sink_rows(op, s, sinks, o, lse);
  expect_numel(op, "dout", dout, s.B * s.nq * s.hq * s.vdim(), dims({s.B, s.nq, s.hq, s.vdim()}));
  expect_numel(op, "dsinks", dsinks, s.hq, dims({s.hq}));
  expect_dtype(op, "dout", dout, o.dtype);
  expect_dtype(op, "dsinks", dsinks, DType::f32);
}

void check_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& dout, const Tensor& lse, const Tensor& delta,
                    const Positions& qpos, const Positions& kpos, const Tensor& dq,
                    const Tensor& dk, const Tensor& dv) {
  const char* op = "attn_bwd";
  check_attn_shape(s, op);
  if (s.v_in_k) fail(op, "v_in_k (values inside the key rows) is defined for the forward only");
  const int64_t nqe = s.B * s.nq * s.hq * s.d, nke = s.B * s.nk * s.hk * s.d;
  const int64_t noe = s.B * s.nq * s.hq * s.vdim(), nve = s.B * s.nk * s.hk * s.vdim();
  const std::string qs = dims({s.B, s.nq, s.hq, s.d}), ks = dims({s.B, s.nk, s.hk, s.d});
  const std::string os = dims({s.B, s.nq, s.hq, s.vdim()}), vs = dims({s.B, s.nk, s.hk, s.vdim()});
  const std::string ls = dims({s.B, s.hq, s.nq});
  expect_numel(op, "q", q, nqe, qs);
  expect_numel(op, "k", k, nke, ks);
  expect_numel(op, "v", v, nve, vs);
  expect_numel(op, "dout", dout, noe, os);
  expect_numel(op, "lse", lse, s.B * s.hq * s.nq, ls);
  expect_numel(op, "delta", delta, s.B * s.hq * s.nq, ls);
  expect_numel(op, "dq", dq, nqe, qs);
  expect_numel(op, "dk", dk, nke, ks);
  expect_numel(op, "dv", dv, nve, vs);
  expect_dtype(op, "k", k, q.dtype);
  expect_dtype(op, "v", v, q.dtype);
  expect_dtype(op, "dout", dout, q.dtype);
  expect_dtype(op, "lse", lse, DType::f32);
  expect_dtype(op, "delta", delta, DType::f32);
  expect_dtype(op, "dq", dq, DType::f32);
  expect_dtype(op, "dk", dk, DType::f32);
  expect_dtype(op, "dv", dv, DType::f32);
  check_positions(op, "qpos", qpos, s.nq);
  check_positions(op, "kpos", kpos, s.nk);
}

void check_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& A,
                int64_t lda, const Tensor& B, int64_t ldb, const Tensor& C, int64_t ldc) {
  const char* op = "gemm";
  if (m < 0 || n < 0 || k < 0)
    fail(op, "negative size m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" +
                 std::to_string(k));
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
    fail(op, "sizes and pitches must fit in 32-bit BLAS integers");
  // A stored matrix of `rows` x `cols` with pitch ld must fit in its tensor.
  auto stored = [&](const char* name, const Tensor& t, int64_t rows, int64_t cols, int64_t ld) {
    if (ld < std::max<int64_t>(cols, 1))
      fail(op, std::string(name) + " pitch " + std::to_string(ld) + " < its " +
                   std::to_string(cols) + " stored columns");
    if (rows > 0 && cols > 0 && (rows - 1) * ld + cols > t.numel())
      fail(op, std::string(name) + " needs " + std::to_string((rows - 1) * ld + cols) +
                   " elements (" + std::to_string(rows) + " rows, pitch " + std::to_string(ld) +
                   "), tensor has " + std::to_string(t.numel()) + " " + t.shape_str());
  };
  stored("A", A, trans_a ? k : m, trans_a ? m : k, lda);
  stored("B", B, trans_b ? n : k, trans_b ? k : n, ldb);
  stored("C", C, m, n, ldc);
  expect_dtype(op, "B", B, A.dtype);
  if (C.dtype != A.dtype && C.dtype != DType::f32)
    fail(op, std::string("C is ") + dtype_name(C.dtype) + ", expected " + dtype_name(A.dtype) +
                 " or fp32");
}

int64_t check_rmsnorm_fwd(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd) {
  const char* op = "rmsnorm_fwd";
  const int64_t D = w.numel();
  if (D < 1) fail(op, "w is empty");
  if (x.numel() % D != 0)
    fail(op, "x " + x.shape_str() + " is not a whole number of rows of D=" + std::to_string(D));
  const int64_t rows = x.numel() / D;
  expect_numel(op, "y", y, rows * D, dims({rows, D}));
  expect_numel(op, "rstd", rstd, rows, dims({rows}));
  expect_dtype(op, "w", w, x.dtype);
  expect_dtype(op, "y", y, x.dtype);
  expect_dtype(op, "rstd", rstd, DType::f32);
  return rows;
}

int64_t check_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw) {
  const char* op = "rmsnorm_bwd";
  const int64_t D = w.numel();
  if (D < 1) fail(op, "w is empty");
  if (x.numel() % D != 0)
    fail(op, "x " + x.shape_str() + " is not a whole number of rows of D=" + std::to_string(D));
  const int64_t rows = x.numel() / D;
  expect_numel(op, "rstd", rstd, rows, dims({rows}));
  expect_numel(op, "dy", dy, rows * D, dims({rows, D}));
  expect_numel(op, "dx", dx, rows * D, dims({rows, D}));
  expect_numel(op, "dw", dw, D, dims({D}));
  expect_dtype(op, "w", w, x.dtype);
  expect_dtype(op, "dy", dy, x.dtype);
  expect_dtype(op, "dx", dx, x.dtype);
  expect_dtype(op, "rstd", rstd, DType::f32);
  expect_dtype(op, "dw", dw, DType::f32);
  return rows;
}

void check_rope(const Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
                const Positions& pos, double theta, const DocStarts& docs) {
  const char* op = "rope";
  if (B < 1 || T < 0 || heads < 1 || d < 2 || d % 2 != 0)
    fail(op, "need B >= 1, T >= 0, heads >= 1 and an even d >= 2 (got B=" + std::to_string(B) +
                 ", T=" + std::to_string(T) + ", heads=" + std::to_string(heads) +
                 ", d=" + std::to_string(d) + ")");
  if (pitch < int64_t(heads) * d)
    fail(op, "pitch " + std::to_string(pitch) + " < heads*d = " + std::to_string(int64_t(heads) * d));
  if (!(theta > 0) || !std::isfinite(theta)) fail(op, "theta must be finite and > 0");
  const int64_t need = B * T > 0 ? (B * T - 1) * pitch + int64_t(heads) * d : 0;
  if (x.numel() < need)
    fail(op, "x " + x.shape_str() + " has " + std::to_string(x.numel()) + " elements, " +
                 std::to_string(B) + "x" + std::to_string(T) + " tokens at pitch " +
                 std::to_string(pitch) + " need " + std::to_string(need));
  check_positions(op, "pos", pos, T);
  check_attn_mask(AttnMask{true, 0, docs}, op);
}

void check_copy_2d(const Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                   int64_t rows, int64_t cols) {
  const char* op = "copy_2d";
  if (rows < 0 || cols < 0) fail(op, "negative rows or cols");
  if (dst_pitch < cols || src_pitch < cols)
    fail(op, "pitches (dst " + std::to_string(dst_pitch) + ", src " + std::to_string(src_pitch) +
                 ") must be >= cols " + std::to_string(cols));
  expect_dtype(op, "src", src, dst.dtype);
  if (rows == 0 || cols == 0) return;
  if ((rows - 1) * dst_pitch + cols > dst.numel())
    fail(op, "dst " + dst.shape_str() + " is too small for " + std::to_string(rows) + " rows at pitch " +
                 std::to_string(dst_pitch));
  if ((rows - 1) * src_pitch + cols > src.numel())
    fail(op, "src " + src.shape_str() + " is too small for " + std::to_string(rows) + " rows at pitch " +
                 std::to_string(src_pitch));
}

void check_same_numel(const char* op, const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel())
    fail(op, a.shape_str() + " and " + b.shape_str() + " differ in element count");
}

}  // namespace cpbench
