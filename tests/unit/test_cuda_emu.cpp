// The CUDA kernels (the same source as the GPU build: kernels/cuda/*_kernel(s).cuh) run on
// the host emulator of cuda_emu.h, against a naive float64 reference. Needs no GPU: this is what
// checks the kernels' fragment layouts, index math, masks and tile skipping on machines without
// one (CI), and, through the emulator's race detector, their barriers and cp.async waits (every
// launch; the cases tagged [mutation] are those tests/unit/cuda_emu_mutation.py runs with each
// barrier or wait switched off). The GPU test (test_cuda_kernels) checks the real thing where a
// device exists.
//
// Every output buffer has guard zones before and after it, and starts as NaN: an element written
// out of bounds, or not written, fails the test.
#define CPB_CUDA_EMULATION 1
// (#pragma unroll in the kernels: -Wno-unknown-pragmas in tests/unit/cuda.cmake)

#include "tests/unit/cuda_emu.h"
// (the emulator must come first)
#include "kernels/cuda/attention_bwd_kernel.cuh"
#include "kernels/cuda/attention_f32_kernel.cuh"
#include "kernels/cuda/attention_fwd_kernel.cuh"
#include "kernels/cuda/attention_misc_kernel.cuh"
#include "kernels/cuda/elementwise_kernels.cuh"
#include "tests/unit/test_kernels_ref.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace cpbench;
using namespace cpbench::cuda;

namespace {

constexpr size_t kGuard = 64;  // elements of guard zone on each side (keeps 16-byte alignment)

// A host buffer with guard zones; data() is what the kernel gets.
template <typename E>
struct Guarded {
  std::vector<E> buf;
  size_t n;
  E fill;
  Guarded(size_t count, E guard_fill) : buf(count + 2 * kGuard, guard_fill), n(count), fill(guard_fill) {}
  E* data() { return buf.data() + kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (std::memcmp(&buf[i], &fill, sizeof(E)) != 0 || std::memcmp(&buf[kGuard + n + i], &fill, sizeof(E)) != 0)
        return false;
    return true;
  }
};

template <typename T>
T to_t(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return __float2half_rn(x);
}
template <typename T>
float from_t(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}

struct Case {
  const char* name;
  int B, hq, hk, d;
  bool causal;
  Positions qpos, kpos;
  int64_t window = 0;
  std::vector<int64_t> docs = {};  // document starts (empty: one document)
  int rep = 0, head0 = 0;          // a head slice's GQA map (AttnShape; 0, 0: hq / hk)
  int d_v = 0;                     // the values' head dim (AttnShape; 0: d)

  int group() const { return rep > 0 ? rep : hq / hk; }
  int dv() const { return d_v > 0 ? d_v : d; }
  AttnShape shape() const {
    AttnShape s;
    s.d_v = d_v;
    s.rep = rep;
    s.head0 = head0;
    s.causal = causal;
    s.window = window;
    if (!docs.empty()) s.docs = std::make_shared<const std::vector<int64_t>>(docs);
    return s;
  }
};

// The kernels' mask argument for a case; docs32 holds the int32 starts the kernel reads.
MaskArg mask_arg(const Case& c, std::vector<int32_t>& docs32) {
  docs32.assign(c.docs.begin(), c.docs.end());
  MaskArg m;
  m.causal = c.causal;
  m.window = int32_t(c.window);
  m.docs = docs32.empty() ? nullptr : docs32.data();
  m.ndocs = int32_t(docs32.size());
  return m;
}

// The shared float64 reference (test_kernels_ref.h: direct softmax over the visible keys, the
// mask rule written out) for a case.
test::AttnRef reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, const std::vector<float>& dout) {
  AttnShape s = c.shape();
  s.B = c.B;
  s.nq = c.qpos.count();
  s.nk = c.kpos.count();
  s.hq = c.hq;
  s.hk = c.hk;
  s.d = c.d;
  return test::attn_reference(s, test::to_double(q), test::to_double(k), test::to_double(v), test::to_double(dout),
                              c.qpos, c.kpos, true);
}

#define CHECK_REF(name, got, want, n)                                  \
  do {                                                                 \
    const test::Cmp cmp_ = test::compare_n(got, want, n);              \
    INFO(name << ": " << cmp_.str());                                  \
    CHECK(cmp_.nonfinite_mismatch == 0);                               \
    CHECK(cmp_.rel_l2 <= 2e-2);                                        \
  } while (0)

template <typename T, int D>
void run_case(const Case& c) {
  const int64_t nq = c.qpos.count(), nk = c.kpos.count();
  const size_t nqe = size_t(c.B * nq * c.hq * D), nke = size_t(c.B * nk * c.hk * D), nl = size_t(c.B * c.hq * nq);
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](size_t n, float scale) {
    std::vector<float> x(n);
    for (float& e : x) e = from_t<T>(to_t<T>(nd(rng) * scale));
    return x;
  };
  const std::vector<float> q = rnd(nqe, 1.0f), k = rnd(nke, 1.0f), v = rnd(nke, 1.0f), dout = rnd(nqe, 1.0f);
  const test::AttnRef ref = reference(c, q, k, v, dout);
  const T nan_t = to_t<T>(std::numeric_limits<float>::quiet_NaN());
  const float nan_f = std::numeric_limits<float>::quiet_NaN();

  Guarded<T> tq(nqe, nan_t), tk(nke, nan_t), tv(nke, nan_t), tdo(nqe, nan_t), to(nqe, nan_t);
  Guarded<float> lse(nl, nan_f);
  for (size_t i = 0; i < nqe; ++i) tq.data()[i] = to_t<T>(q[i]), tdo.data()[i] = to_t<T>(dout[i]);
  for (size_t i = 0; i < nke; ++i) tk.data()[i] = to_t<T>(k[i]), tv.data()[i] = to_t<T>(v[i]);

  const float scale = 1.0f / std::sqrt(float(D));
  auto& emu = cpb_emu::Emu::get();
  emu.clear_globals();
  emu.allow_global(tq.data(), nqe * sizeof(T));
  emu.allow_global(tk.data(), nke * sizeof(T));
  emu.allow_global(tv.data(), nke * sizeof(T));
  emu.allow_global(tdo.data(), nqe * sizeof(T));

  // ---- forward
  kern::FwdParams fp;
  fp.q = tq.data();
  fp.k = tk.data();
  fp.v = tv.data();
  fp.o = to.data();
  fp.lse = lse.data();
  fp.nq = int(nq);
  fp.nk = int(nk);
  fp.hq = c.hq;
  fp.hk = c.hk;
  fp.rep = c.group();
  fp.head0 = c.head0;
  std::vector<int32_t> docs32;
  fp.mask = mask_arg(c, docs32);
  fp.scale_log2 = scale * kLog2e;
  fp.qpos = to_pos_arg(c.qpos);
  fp.kpos = to_pos_arg(c.kpos);
  cpb_emu::launch(&kern::attn_fwd_kernel<T, D>,
                  cpb_emu::Idx3{unsigned((nq + kern::kFwdBM - 1) / kern::kFwdBM), unsigned(c.hq), unsigned(c.B)},
                  kern::kFwdThreads, size_t(kern::fwd_smem_bytes<D>()), fp);
  CHECK(to.guards_intact());
  CHECK(lse.guards_intact());
  std::vector<float> o(nqe);
  for (size_t i = 0; i < nqe; ++i) o[i] = from_t<T>(to.data()[i]);
  CHECK_REF("o", o, ref.o, nqe);
  CHECK_REF("lse", lse.data(), ref.lse, nl);

  // ---- backward: delta from the kernel's own o (as attn_bwd_delta would), accumulating into
  // non-zero gradients.
  Guarded<float> delta(nl, nan_f), dq(nqe, nan_f), dk(nke, nan_f), dv(nke, nan_f);
  for (int b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < nq; ++i)
      for (int h = 0; h < c.hq; ++h) {
        double s = 0;
        for (int x = 0; x < D; ++x) {
          const size_t e = size_t(((b * nq + i) * c.hq + h) * D + x);
          s += double(o[e]) * double(dout[e]);
        }
        delta.data()[size_t((b * c.hq + h) * nq + i)] = float(s);
      }
  std::vector<double> dq_want(ref.dq), dk_want(ref.dk), dv_want(ref.dv);
  std::uniform_real_distribution<float> ud(-0.1f, 0.1f);
  for (size_t i = 0; i < nqe; ++i) dq_want[i] += (dq.data()[i] = ud(rng));
  for (size_t i = 0; i < nke; ++i) dk_want[i] += (dk.data()[i] = ud(rng));
  for (size_t i = 0; i < nke; ++i) dv_want[i] += (dv.data()[i] = ud(rng));
  emu.allow_global(dq.data(), nqe * sizeof(float));
  emu.allow_global(dk.data(), nke * sizeof(float));
  emu.allow_global(dv.data(), nke * sizeof(float));

  kern::BwdParams bp;
  bp.q = tq.data();
  bp.k = tk.data();
  bp.v = tv.data();
  bp.dout = tdo.data();
  bp.lse = lse.data();
  bp.delta = delta.data();
  bp.dq = dq.data();
  bp.dk = dk.data();
  bp.dv = dv.data();
  bp.nq = int(nq);
  bp.nk = int(nk);
  bp.hq = c.hq;
  bp.hk = c.hk;
  bp.rep = c.group();
  bp.head0 = c.head0;
  bp.mask = mask_arg(c, docs32);
  bp.scale = scale;
  bp.scale_log2 = scale * kLog2e;
  bp.qpos = to_pos_arg(c.qpos);
  bp.kpos = to_pos_arg(c.kpos);
  cpb_emu::launch(&kern::attn_bwd_kernel<T, D>,
                  cpb_emu::Idx3{unsigned((nk + kern::kBwdBN - 1) / kern::kBwdBN), unsigned(c.hq), unsigned(c.B)},
                  kern::kBwdThreads, size_t(kern::bwd_smem_bytes<D>()), bp);
  CHECK(dq.guards_intact());
  CHECK(dk.guards_intact());
  CHECK(dv.guards_intact());
  CHECK_REF("dq", dq.data(), dq_want, nqe);
  CHECK_REF("dk", dk.data(), dk_want, nke);
  CHECK_REF("dv", dv.data(), dv_want, nke);
  emu.clear_globals();
}

}  // namespace

TEST_CASE("cuda emulated: causal self-attention, GQA, bf16 d64", "[cuda][emu][mutation]") {
  run_case<__nv_bfloat16, 64>({"self", 1, 2, 1, 64, true, Positions::contiguous(0, 100), Positions::contiguous(0, 100)});
}

TEST_CASE("cuda emulated: non-causal, partial tiles, fp16 d128", "[cuda][emu][mutation]") {
  run_case<__half, 128>({"nc", 1, 2, 2, 128, false, Positions::contiguous(0, 70), Positions::contiguous(0, 130)});
}

TEST_CASE("cuda emulated: zigzag queries, skipped tiles, bf16 d128", "[cuda][emu]") {
  run_case<__nv_bfloat16, 128>({"zigzag", 1, 1, 1, 128, true, Positions::two(0, 40, 216, 40), Positions::contiguous(0, 256)});
}

TEST_CASE("cuda emulated: rows that see no key (lse -inf), bf16 d64", "[cuda][emu]") {
  run_case<__nv_bfloat16, 64>({"late keys", 1, 2, 2, 64, true, Positions::contiguous(0, 70), Positions::contiguous(30, 90)});
}

TEST_CASE("cuda emulated: striped positions, B=2, GQA, fp16 d64", "[cuda][emu]") {
  run_case<__half, 64>({"striped", 2, 4, 2, 64, true, Positions::strided(1, 3, 50), Positions::strided(0, 3, 50)});
}

// A key block whose first key sits exactly at a query tile's last position: exactly one visible
// pair decides whether the tile may be skipped (kmin > qmax, not >=).
TEST_CASE("cuda emulated: tile boundary touches (kmin == qmax), bf16 d64", "[cuda][emu]") {
  run_case<__nv_bfloat16, 64>({"touch", 1, 2, 1, 64, true, Positions::contiguous(0, 128), Positions::contiguous(63, 130)});
}

// Segments in decreasing position order (a later chunk first), on both sides.
TEST_CASE("cuda emulated: reversed segments, fp16 d128", "[cuda][emu]") {
  run_case<__half, 128>({"reversed", 1, 2, 2, 128, true, Positions::two(200, 30, 0, 50), Positions::two(100, 64, 0, 70)});
}

// Masks (DESIGN's visibility rule): sliding windows, packed documents and both, causal and not,
// on 1 to 4 segments, with rows that see nothing and tiles that are skipped, masked or whole.
namespace {
Positions segs(std::vector<PosSeg> g) { return Positions::segments(g); }
}  // namespace

TEST_CASE("cuda emulated: sliding window, causal and not, bf16 d64", "[cuda][emu][mask]") {
  // 300 rows: tiles of 64 entirely before the window (skipped), inside it (mask-free) and on its
  // two edges (masked).
  run_case<__nv_bfloat16, 64>({"window causal", 1, 2, 1, 64, true, Positions::contiguous(0, 300), Positions::contiguous(0, 300), 70});
  // W = 150 > 2 tiles: whole key tiles inside every row's window take the mask-free path.
  run_case<__nv_bfloat16, 64>({"wide window causal", 1, 2, 1, 64, true, Positions::contiguous(0, 300), Positions::contiguous(0, 300), 150});
  run_case<__nv_bfloat16, 64>({"window non-causal", 1, 2, 2, 64, false, Positions::contiguous(0, 300), Positions::contiguous(0, 300), 45});
}

TEST_CASE("cuda emulated: packed documents, causal and not, fp16 d128", "[cuda][emu][mask]") {
  run_case<__half, 128>({"docs causal", 1, 2, 2, 128, true, Positions::contiguous(0, 260), Positions::contiguous(0, 260), 0, {0, 70, 71, 200}});
  run_case<__half, 128>({"docs non-causal", 2, 4, 2, 128, false, Positions::contiguous(0, 200), Positions::contiguous(0, 200), 0, {0, 90, 130}});
}

TEST_CASE("cuda emulated: documents + window on zigzag and multi-segment blocks, bf16 d64", "[cuda][emu][mask]") {
  run_case<__nv_bfloat16, 64>({"zigzag docs+window", 1, 2, 2, 64, true, Positions::two(0, 75, 225, 75), Positions::two(75, 75, 150, 75), 64, {0, 60, 160, 240}});
  run_case<__nv_bfloat16, 64>({"3 segments docs+window non-causal", 1, 2, 1, 64, false,
                              segs({{0, 1, 40}, {100, 1, 30}, {250, 2, 20}}), segs({{10, 1, 50}, {200, 3, 30}, {95, 1, 10}}), 45, {0, 120, 260}});
  run_case<__nv_bfloat16, 64>({"4 segments GQA window causal", 2, 4, 2, 64, true,
                              segs({{0, 4, 30}, {121, 1, 40}, {300, 3, 30}, {170, 2, 30}}), segs({{1, 4, 30}, {100, 1, 50}, {290, 2, 40}}), 25});
}

TEST_CASE("cuda emulated: masked rows that see no key, fp16 d64", "[cuda][emu][mask]") {
  // The window ends before the keys: every row sees nothing (o = 0, lse = -inf, no gradient).
  run_case<__half, 64>({"window: nothing visible", 1, 2, 2, 64, false, Positions::contiguous(0, 64), Positions::contiguous(200, 80), 50});
  // The first document's keys are outside the block.
  run_case<__half, 64>({"docs: first doc sees nothing", 1, 2, 2, 64, true, Positions::contiguous(0, 100), Positions::contiguous(50, 100), 0, {0, 40, 120}});
}

// ---- the SIMT kernels: element-wise, rmsnorm, rope, merge, delta --------------------------------
namespace {

std::vector<float> bf16_values(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = __bfloat162float(__float2bfloat16_rn(nd(rng)));
  return v;
}
std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __float2bfloat16_rn(v[i]);
  return o;
}
std::vector<float> from_bf16(const __nv_bfloat16* p, size_t n) {
  std::vector<float> o(n);
  for (size_t i = 0; i < n; ++i) o[i] = __bfloat162float(p[i]);
  return o;
}
constexpr int kBf16 = 1, kF32 = 0;

}  // namespace

TEST_CASE("cuda emulated: fill, convert, add, scale_2d", "[cuda][emu]") {
  const int64_t n = 1000;  // 3 blocks of 256 threads: the grid-stride loops wrap around
  const std::vector<float> a = bf16_values(size_t(n), 1), b = bf16_values(size_t(n), 2);
  const std::vector<__nv_bfloat16> ab = to_bf16(a), bb = to_bf16(b);
  const cpb_emu::Idx3 grid{3, 1, 1};
  Guarded<float> out(size_t(n), -7.0f);
  cpb_emu::launch(&kern::add_kernel, grid, 256, 0, static_cast<void*>(out.data()), kF32,
                  static_cast<const void*>(ab.data()), kBf16, static_cast<const void*>(bb.data()), kBf16, n);
  CHECK(out.guards_intact());
  for (int64_t i = 0; i < n; ++i) CHECK(out.data()[i] == a[size_t(i)] + b[size_t(i)]);

  Guarded<__nv_bfloat16> cv(size_t(n), __float2bfloat16_rn(-7.0f));
  cpb_emu::launch(&kern::convert_kernel, grid, 256, 0, static_cast<void*>(cv.data()), kBf16,
                  static_cast<const void*>(out.data()), kF32, n);
  CHECK(cv.guards_intact());
  for (int64_t i = 0; i < n; ++i)
    CHECK(__bfloat162float(cv.data()[i]) == __bfloat162float(__float2bfloat16_rn(a[size_t(i)] + b[size_t(i)])));

  cpb_emu::launch(&kern::fill_kernel, grid, 256, 0, static_cast<void*>(out.data()), kF32, n, 2.5f);
  CHECK(out.guards_intact());
  for (int64_t i = 0; i < n; ++i) CHECK(out.data()[i] == 2.5f);

  // scale_2d over a 7 x 9 block of a pitch-13 matrix: the rest is untouched.
  const int64_t m = 7, cols = 9, ld = 13;
  Guarded<float> C(size_t(m * ld), -7.0f);
  for (int64_t i = 0; i < m * ld; ++i) C.data()[i] = float(i);
  cpb_emu::launch(&kern::scale_2d_kernel, cpb_emu::Idx3{1, 1, 1}, 32, 0, static_cast<void*>(C.data()), kF32, m,
                  cols, ld, 0.5f);
  CHECK(C.guards_intact());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < ld; ++c) CHECK(C.data()[r * ld + c] == (c < cols ? 0.5f : 1.0f) * float(r * ld + c));
}

TEST_CASE("cuda emulated: rmsnorm forward and backward", "[cuda][emu][mutation]") {
  const int64_t rows = 5, D = 300;  // D > blockDim: the per-row loops wrap
  const float eps = 1e-5f;
  const std::vector<float> x = bf16_values(size_t(rows * D), 3), w = bf16_values(size_t(D), 4, 0.5f),
                           dy = bf16_values(size_t(rows * D), 5);
  const std::vector<__nv_bfloat16> xb = to_bf16(x), wb = to_bf16(w), dyb = to_bf16(dy);
  Guarded<__nv_bfloat16> y(size_t(rows * D), __float2bfloat16_rn(-7.0f)), dx(size_t(rows * D), __float2bfloat16_rn(-7.0f));
  Guarded<float> rstd(size_t(rows), -7.0f), dw(size_t(D), -7.0f);
  for (int64_t c = 0; c < D; ++c) dw.data()[c] = 0.25f;  // accumulated into
  cpb_emu::Emu::get().clear_globals();
  cpb_emu::Emu::get().allow_global(dw.data(), size_t(D) * sizeof(float));
  cpb_emu::launch(&kern::rmsnorm_fwd_kernel, cpb_emu::Idx3{unsigned(rows), 1, 1}, 256, 0,
                  static_cast<const void*>(xb.data()), static_cast<const void*>(wb.data()), kBf16, eps, D,
                  static_cast<void*>(y.data()), rstd.data());
  // dw in chunks of 2 rows (3 chunks), then dx.
  cpb_emu::launch(&kern::rmsnorm_dw_kernel, cpb_emu::Idx3{unsigned((D + 255) / 256), 3, 1}, 256, 0,
                  static_cast<const void*>(xb.data()), static_cast<const float*>(rstd.data()),
                  static_cast<const void*>(dyb.data()), kBf16, rows, D, int64_t(2), dw.data());
  cpb_emu::launch(&kern::rmsnorm_dx_kernel, cpb_emu::Idx3{unsigned(rows), 1, 1}, 256, 0,
                  static_cast<const void*>(xb.data()), static_cast<const void*>(wb.data()), kBf16,
                  static_cast<const float*>(rstd.data()), static_cast<const void*>(dyb.data()), D,
                  static_cast<void*>(dx.data()));
  CHECK(y.guards_intact());
  CHECK(rstd.guards_intact());
  CHECK(dw.guards_intact());
  CHECK(dx.guards_intact());
  std::vector<double> y_ref(static_cast<size_t>(rows * D)), r_ref(static_cast<size_t>(rows)),
      dx_ref(static_cast<size_t>(rows * D)), dw_ref(static_cast<size_t>(D), 0.25);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0, s = 0;
    for (int64_t c = 0; c < D; ++c) ss += double(x[size_t(r * D + c)]) * x[size_t(r * D + c)];
    const double rs = 1.0 / std::sqrt(ss / double(D) + eps);
    r_ref[size_t(r)] = rs;
    for (int64_t c = 0; c < D; ++c) {
      const size_t e = size_t(r * D + c);
      y_ref[e] = x[e] * rs * w[size_t(c)];
      s += double(dy[e]) * w[size_t(c)] * x[e];
      dw_ref[size_t(c)] += double(dy[e]) * x[e] * rs;
    }
    for (int64_t c = 0; c < D; ++c) {
      const size_t e = size_t(r * D + c);
      dx_ref[e] = rs * (w[size_t(c)] * double(dy[e]) - x[e] * rs * rs / double(D) * s);
    }
  }
  CHECK_REF("y", from_bf16(y.data(), size_t(rows * D)), y_ref, size_t(rows * D));
  CHECK_REF("rstd", rstd.data(), r_ref, size_t(rows));
  CHECK_REF("dx", from_bf16(dx.data(), size_t(rows * D)), dx_ref, size_t(rows * D));
  CHECK_REF("dw", dw.data(), dw_ref, size_t(D));
  cpb_emu::Emu::get().clear_globals();
}

// block_sum twice in one block, as a kernel reducing two values in a row would: the reduction's
// first barrier ("sh may still be read by a previous call") matters only then. Every thread
// writes both results, so a thread that read a stale or half-written sum shows.
namespace {
__global__ void two_block_sums_kernel(const float* x, int n, float* out) {
  float a = 0.0f, b = 0.0f;
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) {
    a += x[i];
    b += x[i] * x[i];
  }
  const float sa = block_sum(a), sb = block_sum(b);
  out[2 * threadIdx.x] = sa;
  out[2 * threadIdx.x + 1] = sb;
}
}  // namespace

TEST_CASE("cuda emulated: block_sum twice in a block", "[cuda][emu][mutation]") {
  const int n = 1000, threads = 256;
  const std::vector<float> x = bf16_values(size_t(n), 12);
  Guarded<float> out(size_t(2 * threads), -7.0f);
  cpb_emu::launch(&two_block_sums_kernel, cpb_emu::Idx3{1, 1, 1}, threads, 0, x.data(), n, out.data());
  CHECK(out.guards_intact());
  double sa = 0, sb = 0;
  for (float v : x) {
    sa += v;
    sb += double(v) * v;
  }
  for (int t = 0; t < threads; ++t) {
    INFO("thread " << t);
    CHECK(std::fabs(out.data()[2 * t] - sa) <= 1e-4 * (std::fabs(sa) + 1));
    CHECK(std::fabs(out.data()[2 * t + 1] - sb) <= 1e-4 * sb);
  }
}

TEST_CASE("cuda emulated: rope forward and inverse in a packed buffer, with documents", "[cuda][emu]") {
  const int64_t B = 2, T = 9, pitch = 5 * 64;
  const int heads = 3, d = 64;
  const Positions pos = Positions::two(7, 4, 70000, 5);
  const std::vector<float> x = bf16_values(size_t(B * T * pitch), 6);
  kern::InvFreq f{};
  for (int i = 0; i < d / 2; ++i) f.v[i] = std::pow(10000.0, -2.0 * i / d);
  // Without documents the angle position is the global one; with starts {0, 9, 70003} it
  // restarts at 9 and 70003 (tokens 9, 10, 70000.. are in the second document).
  const std::vector<int32_t> starts = {0, 9, 70003};
  for (int with_docs = 0; with_docs < 2; ++with_docs)
    for (int inverse = 0; inverse < 2; ++inverse) {
      Guarded<float> xf(size_t(B * T * pitch), -7.0f);
      std::copy(x.begin(), x.end(), xf.data());
      MaskArg docs;
      if (with_docs) {
        docs.docs = starts.data();
        docs.ndocs = int32_t(starts.size());
      }
      cpb_emu::launch(&kern::rope_kernel, cpb_emu::Idx3{4, 1, 1}, 256, 0, static_cast<void*>(xf.data()), kF32, B * T,
                      T, heads, d, pitch, to_pos_arg(pos), docs, f, inverse);
      CHECK(xf.guards_intact());
      std::vector<double> want(x.begin(), x.end());
      const std::vector<int64_t> p = pos.list();
      for (int64_t row = 0; row < B * T; ++row)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < d / 2; ++i) {
            int64_t at = p[size_t(row % T)];
            if (with_docs) at -= at >= 70003 ? 70003 : at >= 9 ? 9 : 0;
            const double a = double(at) * f.v[i];
            const double cs = std::cos(a), sn = (inverse ? -1 : 1) * std::sin(a);
            const size_t e = size_t(row * pitch + h * d + i);
            want[e] = double(x[e]) * cs - double(x[e + size_t(d / 2)]) * sn;
            want[e + size_t(d / 2)] = double(x[e + size_t(d / 2)]) * cs + double(x[e]) * sn;
          }
      INFO("inverse " << inverse << " docs " << with_docs);
      CHECK_REF("x", xf.data(), want, x.size());
    }
}

// The merge and delta kernels on o-shaped rows of d elements (the values' head dim dv of
// AttnShape; the kernels take one row width).
namespace {
void run_merge_delta(int64_t B, int64_t nq, int hq, int d) {
  INFO("B " << B << " nq " << nq << " hq " << hq << " row " << d);
  const size_t no = size_t(B * nq * hq * d), nl = size_t(B * hq * nq);
  const std::vector<float> oa = bf16_values(no, 7), ob = bf16_values(no, 8), dout = bf16_values(no, 9);
  std::vector<float> la = bf16_values(nl, 10), lb = bf16_values(nl, 11);
  for (size_t i = 0; i < nl; i += 3) la[i] = -INFINITY;  // nothing so far: take the block
  for (size_t i = 0; i < nl; i += 4) lb[i] = -INFINITY;  // the block adds nothing (i % 12 == 0: both)
  Guarded<float> o(no, -7.0f), l(nl, -7.0f), delta(nl, -7.0f);
  std::copy(oa.begin(), oa.end(), o.data());
  std::copy(la.begin(), la.end(), l.data());
  cpb_emu::launch(&kern::merge_kernel, cpb_emu::Idx3{unsigned((B * nq * hq + 7) / 8), 1, 1}, 256, 0,
                  static_cast<void*>(o.data()), kF32, l.data(), static_cast<const void*>(ob.data()),
                  static_cast<const float*>(lb.data()), B * nq * hq, nq, hq, d);
  cpb_emu::launch(&kern::delta_kernel, cpb_emu::Idx3{unsigned((B * nq * hq + 7) / 8), 1, 1}, 256, 0,
                  static_cast<const void*>(ob.data()), static_cast<const void*>(dout.data()), kF32,
                  delta.data(), B * nq * hq, nq, hq, d);
  CHECK(o.guards_intact());
  CHECK(l.guards_intact());
  CHECK(delta.guards_intact());
  std::vector<double> o_ref(no), l_ref(nl), d_ref(nl);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < nq; ++i)
      for (int h = 0; h < hq; ++h) {
        const size_t li = size_t((b * hq + h) * nq + i), base = size_t(((b * nq + i) * hq + h) * d);
        const double a = la[li], c = lb[li];
        double wa = 0, wc = 0, lse = -INFINITY;
        if (c == -INFINITY) {
          wa = a == -INFINITY ? 0 : 1;
          lse = a;
        } else if (a == -INFINITY) {
          wc = 1;
          lse = c;
        } else {
          const double m = std::max(a, c);
          wa = std::exp(a - m), wc = std::exp(c - m);
          lse = m + std::log(wa + wc);
          const double s = wa + wc;
          wa /= s, wc /= s;
        }
        l_ref[li] = lse;
        double dl = 0;
        for (int x = 0; x < d; ++x) {
          o_ref[base + size_t(x)] = wa * oa[base + size_t(x)] + wc * ob[base + size_t(x)];
          dl += double(ob[base + size_t(x)]) * dout[base + size_t(x)];
        }
        d_ref[li] = dl;
      }
  CHECK_REF("merged o", o.data(), o_ref, no);
  CHECK_REF("merged lse", l.data(), l_ref, nl);
  CHECK_REF("delta", delta.data(), d_ref, nl);
}
}  // namespace

TEST_CASE("cuda emulated: attention merge and delta", "[cuda][emu][mutation]") { run_merge_delta(2, 5, 3, 64); }

// The sinks (Backend::attn_sink_fwd / attn_sink_bwd) against float64: the forward's rescaled o
// and lse (rows with lse = -inf get o = 0, lse = sink), then the gradient from the same rows added
// to a nonzero dsinks (it accumulates); B * nq = 300 rows per head spans several strides of the
// 256-thread block.
namespace {
void run_sinks(int64_t B, int64_t nq, int d) {
  const int hq = 2;
  INFO("B " << B << " nq " << nq << " hq " << hq << " row " << d);
  const size_t no = size_t(B * nq * hq * d), nl = size_t(B * hq * nq);
  const std::vector<float> o0 = bf16_values(no, 21), dout = bf16_values(no, 22), sk = {0.75f, -0.5f};
  std::vector<float> l0 = bf16_values(nl, 23);
  for (size_t i = 0; i < nl; ++i) l0[i] = i % 7 == 0 ? -INFINITY : 2.0f * l0[i];
  Guarded<float> o(no, -7.0f), l(nl, -7.0f), ds(size_t(hq), -7.0f);
  std::copy(o0.begin(), o0.end(), o.data());
  std::copy(l0.begin(), l0.end(), l.data());
  ds.data()[0] = 0.25f, ds.data()[1] = -1.0f;
  cpb_emu::launch(&kern::sink_fwd_kernel, cpb_emu::Idx3{unsigned((B * nq * hq + 7) / 8), 1, 1}, 256, 0, sk.data(),
                  static_cast<void*>(o.data()), kF32, l.data(), B * nq * hq, nq, hq, d);
  cpb_emu::launch(&kern::sink_bwd_kernel, cpb_emu::Idx3{unsigned(hq), 1, 1}, 256, 0, sk.data(),
                  static_cast<const void*>(o.data()), static_cast<const void*>(dout.data()), kF32,
                  static_cast<const float*>(l.data()), ds.data(), B, nq, hq, d);
  CHECK(o.guards_intact());
  CHECK(l.guards_intact());
  CHECK(ds.guards_intact());
  std::vector<double> o_ref(no), l_ref(nl), ds_ref = {0.25, -1.0};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < nq; ++i)
      for (int h = 0; h < hq; ++h) {
        const size_t li = size_t((b * hq + h) * nq + i), base = size_t(((b * nq + i) * hq + h) * d);
        const double a = l0[li], s = sk[size_t(h)];
        const double lse = a == -INFINITY ? s : std::log(std::exp(a) + std::exp(s));
        const double w = a == -INFINITY ? 0.0 : std::exp(a - lse);
        l_ref[li] = lse;
        double dot = 0;
        for (int x = 0; x < d; ++x) {
          o_ref[base + size_t(x)] = w * o0[base + size_t(x)];
          dot += o_ref[base + size_t(x)] * dout[base + size_t(x)];
        }
        ds_ref[size_t(h)] -= std::exp(s - lse) * dot;
      }
  // fp32 element-wise work: agreement to float32 rounding (CHECK_REF's 2e-2 is the tensor cores' bound).
  for (const auto& [name, cmp] : {std::pair{"sink o", test::compare_n(o.data(), o_ref, no)},
                                  std::pair{"sink lse", test::compare_n(l.data(), l_ref, nl)},
                                  std::pair{"dsinks", test::compare_n(ds.data(), ds_ref, size_t(hq))}}) {
    INFO(name << ": " << cmp.str());
    CHECK(cmp.nonfinite_mismatch == 0);
    CHECK(cmp.rel_l2 <= 1e-5);
  }
}
}  // namespace

TEST_CASE("cuda emulated: attention sinks", "[cuda][emu][mutation]") { run_sinks(3, 100, 40); }

// MLA's o rows are dv wide (128 expanded, 512 absorbed) beside d = 192 / 576 of q and k: the
// backend passes dv to these kernels. Rows wider than a warp's 32 lanes many times over, and one
// that is not a multiple of 32.
TEST_CASE("cuda emulated: merge, delta and sinks on MLA value rows (dv 128, 512, 72)", "[cuda][emu][mla]") {
  for (int dv : {128, 512, 72}) {
    run_merge_delta(1, 3, 2, dv);
    run_sinks(1, 7, dv);
  }
}

// ---- the fp32 SIMT attention kernels ---------------------------------------------------------------
namespace {

// Runs f(std::integral_constant<int, PL>) for the fp32 kernels' build the launcher picks for rows
// of d and dv elements (kern::f32_per_lane: PL elements per lane).
template <class F>
void with_f32_build(int d, int dv, F&& f) {
  const int pl = kern::f32_per_lane(d, dv);
  REQUIRE(pl != 0);
  if (pl == kern::kF32SmallPerLane) f(std::integral_constant<int, kern::kF32SmallPerLane>{});
  else f(std::integral_constant<int, kern::kF32LargePerLane>{});
}

void run_case_f32(const Case& c) {
  const int64_t nq = c.qpos.count(), nk = c.kpos.count();
  const int d = c.d, dv = c.dv();  // q, k, dq, dk over d; v, o, dout, dv over dv
  INFO(c.name << ": d " << d << " dv " << dv << " (" << kern::f32_per_lane(d, dv) << " elements per lane)");
  const size_t nqe = size_t(c.B * nq * c.hq * d), nke = size_t(c.B * nk * c.hk * d), nl = size_t(c.B * c.hq * nq);
  const size_t noe = size_t(c.B * nq * c.hq * dv), nve = size_t(c.B * nk * c.hk * dv);
  std::mt19937_64 rng(99);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = nd(rng);
    return x;
  };
  const std::vector<float> q = rnd(nqe), k = rnd(nke), v = rnd(nve), dout = rnd(noe);
  const test::AttnRef ref = reference(c, q, k, v, dout);
  REQUIRE(ref.o.size() == noe);
  REQUIRE(ref.dv.size() == nve);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Guarded<float> o(noe, nan), lse(nl, nan), delta(nl, nan), dq(nqe, nan), dk(nke, nan), dvg(nve, nan);
  kern::F32Params p{};
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = o.data();
  p.lse = lse.data();
  p.B = c.B;
  p.nq = int(nq);
  p.nk = int(nk);
  p.hq = c.hq;
  p.hk = c.hk;
  p.rep = c.group();
  p.head0 = c.head0;
  p.d = d;
  p.dv = dv;
  std::vector<int32_t> docs32;
  p.mask = mask_arg(c, docs32);
  p.scale = 1.0f / std::sqrt(float(d));
  p.qpos = to_pos_arg(c.qpos);
  p.kpos = to_pos_arg(c.kpos);
  const int threads = 32 * kern::kF32Warps;
  const cpb_emu::Idx3 q_grid{unsigned((c.B * nq * c.hq + 3) / 4), 1, 1}, k_grid{unsigned((c.B * nk * c.hk + 3) / 4), 1, 1};
  with_f32_build(d, dv, [&](auto pl) {
    cpb_emu::launch(&kern::attn_fwd_f32_kernel<decltype(pl)::value>, q_grid, threads, 0, p);
  });
  CHECK(o.guards_intact());
  CHECK(lse.guards_intact());
  CHECK_REF("o", o.data(), ref.o, noe);
  CHECK_REF("lse", lse.data(), ref.lse, nl);
  CHECK(test::compare_n(o.data(), ref.o, noe).rel_l2 <= 1e-5);  // fp32 against float64
  CHECK(test::compare_n(lse.data(), ref.lse, nl).rel_l2 <= 1e-5);
  // delta (over dv) from the kernel's o; gradients accumulate into non-zero values.
  for (int b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < nq; ++i)
      for (int h = 0; h < c.hq; ++h) {
        double s = 0;
        for (int x = 0; x < dv; ++x) {
          const size_t e = size_t(((b * nq + i) * c.hq + h) * dv + x);
          s += double(o.data()[e]) * double(dout[e]);
        }
        delta.data()[size_t((b * c.hq + h) * nq + i)] = float(s);
      }
  std::vector<double> dq_want(ref.dq), dk_want(ref.dk), dv_want(ref.dv);
  for (size_t i = 0; i < nqe; ++i) dq_want[i] += (dq.data()[i] = 0.01f * float(i % 7));
  for (size_t i = 0; i < nke; ++i) dk_want[i] += (dk.data()[i] = 0.02f * float(i % 5));
  for (size_t i = 0; i < nve; ++i) dv_want[i] += (dvg.data()[i] = -0.01f * float(i % 3));
  p.dout = dout.data();
  p.lse_in = lse.data();
  p.delta = delta.data();
  p.dq = dq.data();
  p.dk = dk.data();
  p.dv_grad = dvg.data();
  with_f32_build(d, dv, [&](auto pl) {
    cpb_emu::launch(&kern::attn_bwd_dq_f32_kernel<decltype(pl)::value>, q_grid, threads, 0, p);
    cpb_emu::launch(&kern::attn_bwd_dkdv_f32_kernel<decltype(pl)::value>, k_grid, threads, 0, p);
  });
  CHECK(dq.guards_intact());
  CHECK(dk.guards_intact());
  CHECK(dvg.guards_intact());
  const test::Cmp cq = test::compare_n(dq.data(), dq_want, nqe), ck = test::compare_n(dk.data(), dk_want, nke),
                  cv = test::compare_n(dvg.data(), dv_want, nve);
  INFO("dq " << cq.str() << "; dk " << ck.str() << "; dv " << cv.str());
  CHECK(cq.rel_l2 <= 1e-4);  // fp32 against float64
  CHECK(ck.rel_l2 <= 1e-4);
  CHECK(cv.rel_l2 <= 1e-4);
  CHECK(cq.nonfinite_mismatch + ck.nonfinite_mismatch + cv.nonfinite_mismatch == 0);
}

}  // namespace

TEST_CASE("cuda emulated: fp32 attention, GQA, zigzag, d96", "[cuda][emu]") {
  run_case_f32({"f32 zigzag", 2, 4, 2, 96, true, Positions::two(0, 12, 60, 12), Positions::contiguous(0, 72)});
}

TEST_CASE("cuda emulated: fp32 attention, non-causal, rows past the keys, d256", "[cuda][emu]") {
  run_case_f32({"f32 nc", 1, 1, 1, 256, false, Positions::contiguous(0, 9), Positions::contiguous(0, 13)});
  run_case_f32({"f32 late keys", 1, 2, 1, 64, true, Positions::contiguous(0, 30), Positions::contiguous(10, 25)});
}

TEST_CASE("cuda emulated: fp32 attention under windows and documents", "[cuda][emu][mask]") {
  run_case_f32({"f32 window causal, GQA", 1, 4, 2, 32, true, Positions::contiguous(0, 40), Positions::contiguous(0, 40), 7});
  run_case_f32({"f32 docs+window non-causal, 3 segments", 1, 2, 1, 40, false,
                segs({{0, 1, 10}, {30, 2, 8}, {12, 1, 5}}), segs({{5, 1, 20}, {40, 1, 6}, {0, 3, 4}}), 6, {0, 11, 33}});
  run_case_f32({"f32 window: no row sees a key", 1, 2, 2, 16, false, Positions::contiguous(0, 10), Positions::contiguous(40, 12), 5});
}

TEST_CASE("cuda emulated: a head slice off the KV groups' boundaries (--uneven-heads)", "[cuda][emu]") {
  // 5 query heads starting 1 into a group of 3: kv head 0 serves heads 0, 1 of this block (the
  // group's last two), kv head 1 heads 2, 3, 4 (the default map hq / hk would read a kv head 2).
  run_case<__nv_bfloat16, 64>({"slice", 1, 5, 2, 64, true, Positions::contiguous(0, 90), Positions::contiguous(0, 90), 0, {}, 3, 1});
  run_case_f32({"f32 slice", 1, 5, 2, 32, true, Positions::contiguous(0, 20), Positions::contiguous(0, 20), 0, {}, 3, 1});
}

// Two head dims (MLA): scores over d, values over dv, in both orders, across the two builds of the
// kernels (8 elements per lane up to 256, 32 up to 1024).
TEST_CASE("cuda emulated: fp32 attention with dv != d (MLA)", "[cuda][emu][mla]") {
  run_case_f32({"f32 d48 dv32 causal", 1, 2, 2, 48, true, Positions::contiguous(0, 24), Positions::contiguous(0, 24),
                0, {}, 0, 0, 32});
  run_case_f32({"f32 d24 dv40 GQA window+docs non-causal, 2 segments", 2, 4, 2, 24, false,
                segs({{0, 1, 12}, {30, 1, 8}}), segs({{4, 1, 20}, {34, 2, 6}}), 9, {0, 15, 33}, 0, 0, 40});
  // MLA's expanded heads (d = 192: 128 + a 64-dim rope part, dv = 128), a zigzag block.
  run_case_f32({"f32 d192 dv128 zigzag", 1, 2, 2, 192, true, Positions::two(0, 6, 30, 6), Positions::contiguous(0, 36),
                0, {}, 0, 0, 128});
  // Rows wider than 256 (the 32-per-lane build): dv alone past 256, then MLA's absorbed heads
  // (MQA, d = 576, dv = 512) on a short causal block, with a head slice off the group boundary.
  run_case_f32({"f32 d40 dv300 GQA", 1, 2, 1, 40, true, Positions::contiguous(4, 6), Positions::contiguous(0, 10),
                0, {}, 0, 0, 300});
  run_case_f32({"f32 d576 dv512 MQA causal", 1, 4, 1, 576, true, Positions::contiguous(8, 6), Positions::contiguous(0, 14),
                0, {}, 0, 0, 512});
  run_case_f32({"f32 d576 dv512 slice window", 1, 3, 2, 576, true, Positions::contiguous(0, 8), Positions::contiguous(0, 8),
                5, {}, 2, 1, 512});
}

// ---- the position and mask helpers the kernels share (device_common.cuh, run on the host) -------
TEST_CASE("cuda emulated: positions of any segment list, row bounds of the mask", "[cuda][emu][mask]") {
  // Six segments, one empty, strides 1..3, out of order.
  const Positions p = Positions::segments({{40, 1, 5}, {0, 2, 4}, {90, 1, 0}, {100, 3, 6}, {20, 1, 3}, {7, 1, 2}});
  const PosArg a = to_pos_arg(p);
  CHECK(a.nseg == 5);  // the empty segment holds no row
  const std::vector<int64_t> list = p.list();
  REQUIRE(a.n == int32_t(list.size()));
  for (int i = 0; i < a.n; ++i) CHECK(pos_at(a, i) == list[size_t(i)]);
  CHECK(pos_at(a, a.n + 5) == list.back());  // rows past the end clamp to the last row
  for (int lo = 0; lo < a.n; ++lo)
    for (int hi = lo + 1; hi <= a.n; ++hi) {
      int mn, mx;
      pos_range(a, lo, hi, mn, mx);
      CHECK(mn == *std::min_element(list.begin() + lo, list.begin() + hi));
      CHECK(mx == *std::max_element(list.begin() + lo, list.begin() + hi));
    }
  std::vector<PosSeg> many;
  for (int s = 0; s <= kMaxPosSegs; ++s) many.push_back({int64_t(10 * s), 1, 2});
  CHECK_THROWS_WITH(to_pos_arg(Positions::segments(many)), Catch::Contains("more than 16"));

  // row_bounds (what every kernel uses) against DESIGN's rule, written out in test_kernels_ref.h.
  const std::vector<int64_t> starts = {0, 13, 14, 40};
  const std::vector<int32_t> starts32(starts.begin(), starts.end());
  for (int causal = 0; causal < 2; ++causal)
    for (int window : {0, 1, 5, 100})
      for (int with_docs = 0; with_docs < 2; ++with_docs) {
        AttnShape s;
        s.causal = causal;
        s.window = window;
        MaskArg m;
        m.causal = causal;
        m.window = window;
        if (with_docs) {
          s.docs = std::make_shared<const std::vector<int64_t>>(starts);
          m.docs = starts32.data();
          m.ndocs = int32_t(starts32.size());
        }
        for (int i = 0; i < 60; ++i) {
          int lo, hi;
          row_bounds(m, i, lo, hi);
          for (int j = 0; j < 60; ++j) {
            INFO("causal " << causal << " window " << window << " docs " << with_docs << " i " << i << " j " << j);
            REQUIRE((lo <= j && j <= hi) == test::ref_visible(s, i, j));
          }
        }
      }
}

// ---- the emulator's own checks: races and cp.async ---------------------------------------------
// A detected race aborts the process (as on a GPU run it would be a wrong result), so each probe
// runs in a child process; the parent reads the child's stderr and its exit.
namespace {

struct ChildResult {
  bool aborted = false;
  std::string err;
};

ChildResult in_child(const std::function<void()>& fn) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);  // Catch2's fatal-signal report
    close(fds[0]);
    fn();
    std::fflush(stderr);
    _exit(0);
  }
  close(fds[1]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) r.err.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  r.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  if (!r.aborted) REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return r;
}

// 64 threads (two warps) over 64 bytes of shared memory. `a` and `b` are the two threads that
// touch byte 0 (float at offset 0): mode 0 a writes then b reads, 1 a reads then b writes, 2 both
// write; fibers run in thread order, so a (the smaller) goes first. `sync`: 0 none, 1
// __syncthreads, 2 __syncwarp between the two accesses (every thread calls it).
__global__ void probe_kernel(int mode, int a, int b, int sync, float* out) {
  CPB_DYNAMIC_SMEM(smem);
  float* f = reinterpret_cast<float*>(smem);
  const int tid = int(threadIdx.x);
  if (tid == a) {
    if (mode == 1) out[0] = sh_ld(f);
    else sh_st(f, 1.0f);
  }
  if (sync == 1) __syncthreads();
  if (sync == 2) __syncwarp();
  if (tid == b) {
    if (mode == 0) out[0] = sh_ld(f);
    else sh_st(f, 2.0f);
  }
}

void probe(int mode, int a, int b, int sync) {
  std::vector<float> out(1, 0.0f);
  cpb_emu::launch(&probe_kernel, cpb_emu::Idx3{1, 1, 1}, 64, 64, mode, a, b, sync, out.data());
}

// cp.async: thread 0 copies src[0..3] to shared bytes 0..15 (group 1) and src[4..7] to 16..31
// (group 2, committed only when `commit2`), waits with wait_group `wait_n` (0 or 1), then reads
// the float at byte `read_at` through sh_ld (out[0]) and byte 16's raw bits (out[1], poison check).
__global__ void cp_async_probe_kernel(const float* src, int commit2, int wait_n, int read_at, float* out) {
  CPB_DYNAMIC_SMEM(smem);
  if (threadIdx.x != 0) return;
  cp_async16(smem, src, 16);
  cp_async_commit();
  cp_async16(smem + 16, src + 4, 16);
  if (commit2) cp_async_commit();
  uint32_t raw;
  std::memcpy(&raw, smem + 16, 4);  // bypasses the detector: what the bytes hold now
  out[1] = float(raw == 0xFFFFFFFFu);
  if (wait_n == 0) cp_async_wait<0>();
  else cp_async_wait<1>();
  out[0] = sh_ld(reinterpret_cast<const float*>(smem + read_at));
}

void cp_async_probe(int commit2, int wait_n, int read_at, std::vector<float>& out) {
  static const float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  auto& emu = cpb_emu::Emu::get();
  emu.clear_globals();
  emu.allow_global(src, sizeof(src));
  out.assign(2, -1.0f);
  cpb_emu::launch(&cp_async_probe_kernel, cpb_emu::Idx3{1, 1, 1}, 32, 64, static_cast<const float*>(src), commit2, wait_n,
                  read_at, out.data());
  emu.clear_globals();
}

}  // namespace

TEST_CASE("cuda emulator: shared-memory races between threads are caught, ordered accesses pass", "[cuda][emu]") {
  struct Probe {
    int mode, a, b, sync;
    const char* want;  // "" = no race
  };
  const Probe probes[] = {
      {0, 0, 32, 0, "read-after-write"},   {1, 0, 32, 0, "write-after-read"},
      {2, 0, 32, 0, "write-after-write"},  {0, 0, 32, 1, ""},
      {1, 0, 32, 1, ""},                   {2, 0, 32, 1, ""},
      {0, 0, 1, 0, "read-after-write"},    {1, 0, 1, 0, "write-after-read"},  // lanes of one warp
      {0, 0, 1, 2, ""},                    {0, 0, 32, 2, "read-after-write"},  // __syncwarp: own warp only
      {0, 5, 5, 0, ""},                                                        // one thread
  };
  for (const Probe& p : probes) {
    INFO("mode " << p.mode << " threads " << p.a << ", " << p.b << " sync " << p.sync);
    const ChildResult r = in_child([&] { probe(p.mode, p.a, p.b, p.sync); });
    INFO("stderr: " << r.err);
    if (*p.want) {
      CHECK(r.aborted);
      CHECK(r.err.find(std::string("race in probe_kernel block (0,0,0): ") + p.want + " on dynamic shared byte 0") !=
            std::string::npos);
      CHECK(r.err.find("thread " + std::to_string(p.a) + " (warp " + std::to_string(p.a / 32) + ")") != std::string::npos);
      CHECK(r.err.find("thread " + std::to_string(p.b) + " (warp " + std::to_string(p.b / 32) + ")") != std::string::npos);
    } else {
      CHECK_FALSE(r.aborted);
      CHECK(r.err.empty());
    }
  }
}

TEST_CASE("cuda emulator: cp.async lands at its wait_group (PTX semantics), poison before", "[cuda][emu]") {
  std::vector<float> out;
  // Both groups committed, wait_group 0: everything landed.
  cp_async_probe(1, 0, 16, out);
  CHECK(out[0] == 5.0f);
  CHECK(out[1] == 1.0f);  // byte 16 held poison before the wait
  // wait_group 1 with two groups: the older one has landed ...
  cp_async_probe(1, 1, 0, out);
  CHECK(out[0] == 1.0f);
  // ... the newer one is still in flight: reading it fails.
  ChildResult r = in_child([&] { cp_async_probe(1, 1, 16, out); });
  CHECK(r.aborted);
  CHECK(r.err.find("access to a byte a cp.async is still copying into on dynamic shared byte 16") != std::string::npos);
  // A copy never committed is not waited for, even by wait_group 0.
  r = in_child([&] { cp_async_probe(0, 0, 16, out); });
  CHECK(r.aborted);
  CHECK(r.err.find("still copying into") != std::string::npos);
  // The committed group before it has landed.
  cp_async_probe(0, 0, 0, out);
  CHECK(out[0] == 1.0f);
}
