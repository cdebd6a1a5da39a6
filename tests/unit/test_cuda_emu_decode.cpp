// The CUDA decode attention kernels (kernels/cuda/attention_decode_kernel.cuh, the source the GPU
// build compiles: the split kernel and the combine kernel) on the host emulator of cuda_emu.h,
// against a float64 reference computed here (direct softmax over the visible keys, the mask rule
// written out: key visible iff kpos <= qpos and, with a window W, qpos - kpos < W), for fp32,
// bf16 and fp16 storage. One query row per (b, h): q [B, 1, hq, d], k [B, nk, hk, d],
// v [B, nk, hk, dv], o [B, 1, hq, dv] in the storage dtype (two head dims: scores over d, values
// over dv, MLA's absorbed decode d = 576, dv = 512), lse float32 in natural log; a row that sees no
// key must get o = 0 exactly and lse = -inf.
//
// Every buffer the kernels touch has guard zones and starts as NaN (inputs' guards, the partials
// and the outputs): a read past a tensor, an unwritten element or a write out of bounds fails.
//
// Tolerance (per element, from the dtypes; the inputs are rounded to the storage dtype first and
// the reference uses the rounded values, so what is measured is the kernels' own error).
// eps = 2^-24 (fp32 unit roundoff), gamma(n) = n eps / (1 - n eps):
//   dot products: the score of key j is off by at most gamma(d + 2) * S_j, S_j = scale * sum|q k|
//     (d products and sums, q's pre-scaling, the base-2 factor), so each softmax weight is off by
//     a relative 2 gamma(d + 2) S_max at most;
//   the running softmax: every fp32 rescale-and-add chain that reaches o has at most
//     depth = ceil(chunk / keys per block) + log2(key slots per warp) + warps + splits steps, each
//     with at most 4 roundings (product, rescale, add, exp2f's <= 2 ulp), +16 for the final
//     normalisation and log;
//   e_math = 4 gamma(d + 2) S_max + 4 gamma(4 depth + 16)
//   o:   |o - o_ref| <= u (|o_ref| + e_math A_c) + e_math A_c + f, A_c = sum_j w_j |v_jc| (w: the
//        softmax weights), u = 2^-8 (bf16), 2^-11 (fp16), 0 (fp32): the final rounding of the
//        fp32 result to the storage dtype (half an ulp);
//        f = 2^-25 for fp16 (half its smallest subnormal), else 0;
//   lse: |lse - lse_ref| <= e_math + 4 eps |lse_ref|.
// The NaN/-inf pattern must match exactly. The cases print the largest error and the largest
// error / tolerance they saw (run the binary with -s to see the lines in full).
#define CPB_CUDA_EMULATION 1
// (#pragma unroll in the kernels: -Wno-unknown-pragmas in tests/unit/cuda.cmake)

#include "tests/unit/cuda_emu.h"
// (the emulator must come first)
#include "kernels/cuda/attention_decode_kernel.cuh"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace cpbench;
using namespace cpbench::cuda;

namespace {

constexpr size_t kGuard = 64;  // elements each side (keeps the data 16-byte aligned)
constexpr int kB = 2, kHq = 8;
// A device's worth of split blocks for decode_plan (132 SMs x 8 resident blocks, an H100's
// figure): with B * hq = 16 rows it asks for 66 splits, so nk sets the split count below that.
constexpr int kTargetBlocks = 132 * 8;

template <typename E>
struct Guarded {
  std::vector<E> buf;
  size_t n;
  E fill;
  Guarded(size_t count, E f) : buf(count + 2 * kGuard, f), n(count), fill(f) {}
  E* data() { return buf.data() + kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (std::memcmp(&buf[i], &fill, sizeof(E)) != 0 || std::memcmp(&buf[kGuard + n + i], &fill, sizeof(E)) != 0)
        return false;
    return true;
  }
};

template <typename E>
E to_e(float x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<E, __half>) return __float2half_rn(x);
  else return x;
}
template <typename E>
float from_e(E x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return __bfloat162float(x);
  else if constexpr (std::is_same_v<E, __half>) return __half2float(x);
  else return x;
}
template <typename E>
int dtype_code() {  // DType's order: f32 0, bf16 1, f16 2
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return 1;
  else if constexpr (std::is_same_v<E, __half>) return 2;
  else return 0;
}
template <typename E>
const char* dtype_str() {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return "bf16";
  else if constexpr (std::is_same_v<E, __half>) return "fp16";
  else return "fp32";
}
template <typename E>
double store_u() {  // relative error of rounding to the storage dtype
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return std::ldexp(1.0, -8);
  else if constexpr (std::is_same_v<E, __half>) return std::ldexp(1.0, -11);
  else return 0.0;
}
template <typename E>
double store_floor() {
  if constexpr (std::is_same_v<E, __half>) return std::ldexp(1.0, -25);
  else return 0.0;
}

constexpr double kEps = 1.0 / 16777216.0;  // 2^-24
double gamma_n(double n) { return n * kEps / (1.0 - n * kEps); }

// A rank's key shard in the decode layout: the cache's contiguous block [r*C/P, +C/P) of n1 keys,
// then the strided slots {C + r, P, n2} of the tokens decoded so far (C = P * n1), P = 4, r = 1.
// Some slots come after the query (masked); one sits at the query's position (visible).
struct Layout {
  Positions kpos;
  int64_t qpos = 0;
  int64_t window = 0;
  bool none_visible = false;  // the reference must agree
  std::string what;
};
constexpr int64_t kP = 4, kR = 1;

Layout cache_layout(int64_t nk) {
  const int64_t n2 = nk / 4, n1 = nk - n2, C = kP * n1, after = n2 / 4;
  Layout L;
  L.kpos = Positions::segments({{kR * n1, 1, n1}, {C + kR, kP, n2}});
  L.qpos = n2 > 0 ? C + kR + kP * (n2 - after - 1) : C + kR;
  L.what = "cache " + std::to_string(n1) + " + slots " + std::to_string(n2) + " (" + std::to_string(after) +
           " after the query)";
  return L;
}
Layout window_layout(int64_t nk) {  // half the contiguous block falls out of the window
  Layout L = cache_layout(nk);
  const int64_t n1 = nk - nk / 4;
  L.window = L.qpos - (kR * n1 + n1 / 2) + 1;
  L.what += ", window " + std::to_string(L.window);
  return L;
}
Layout none_causal_layout(int64_t nk) {  // every key after the query
  Layout L = cache_layout(nk);
  L.qpos = kR * (nk - nk / 4) - 1;
  L.none_visible = true;
  L.what += ", query before every key";
  return L;
}
Layout none_window_layout(int64_t nk) {  // every key too old for the window
  Layout L = cache_layout(nk);
  const int64_t n2 = nk / 4, n1 = nk - n2;
  L.qpos = kP * n1 + kR + kP * n2 + 10;
  L.window = 5;
  L.none_visible = true;
  L.what += ", window 5 past every key";
  return L;
}
Layout reversed_layout(int64_t nk) {  // the slots first, then the block (segments in any order)
  Layout L = cache_layout(nk);
  const int64_t n2 = nk / 4, n1 = nk - n2;
  L.kpos = Positions::segments({{kP * n1 + kR, kP, n2}, {kR * n1, 1, n1}});
  L.what = "slots then cache (reversed segments), " + L.what;
  return L;
}

struct Stats {
  int runs = 0;
  int64_t elements = 0;
  double max_err_o = 0, max_ratio_o = 0, max_err_lse = 0, max_ratio_lse = 0;
  void add(const Stats& s) {
    runs += s.runs;
    elements += s.elements;
    max_err_o = std::max(max_err_o, s.max_err_o);
    max_ratio_o = std::max(max_ratio_o, s.max_ratio_o);
    max_err_lse = std::max(max_err_lse, s.max_err_lse);
    max_ratio_lse = std::max(max_ratio_lse, s.max_ratio_lse);
  }
};

struct Run {
  int hk, d;
  int64_t nk;
  Layout lay;
  int chunk = 0;     // 0: decode_plan's; else splits of this many keys
  bool vec = true;   // vector loads where the kernel may take them
  int d_v = 0;       // the values' head dim (0: d)
  bool v_in_k = false;  // v is the first dv columns of k's rows (MLA's absorbed decode: c_kv in [c_kv | k_R])
  int dv() const { return d_v > 0 ? d_v : d; }
};

// The split kernel's build the launcher picks (attention_decode.cu): NC passes over a row of
// max(d, dv) elements.
void launch_split(int passes, cpb_emu::Idx3 grid, const kern::DecodeParams& p) {
  switch (passes) {
    case 1: cpb_emu::launch(&kern::attn_decode_split_kernel<1>, grid, kern::kDecThreads, 0, p); break;
    case 2: cpb_emu::launch(&kern::attn_decode_split_kernel<2>, grid, kern::kDecThreads, 0, p); break;
    case 3: cpb_emu::launch(&kern::attn_decode_split_kernel<3>, grid, kern::kDecThreads, 0, p); break;
    case 4: cpb_emu::launch(&kern::attn_decode_split_kernel<4>, grid, kern::kDecThreads, 0, p); break;
    default: FAIL("no split kernel of " << passes << " passes");
  }
}

template <typename E>
Stats run_decode(const Run& r, uint64_t seed) {
  const int d = r.d, dv = r.dv(), hk = r.hk, width = std::max(d, dv);
  const int64_t nk = r.nk, rows = int64_t(kB) * kHq;
  INFO(dtype_str<E>() << " hq " << kHq << " hk " << hk << " d " << d << " dv " << dv << " nk " << nk << ": "
                      << r.lay.what << (r.vec ? "" : ", scalar loads"));
  REQUIRE(r.lay.kpos.count() == nk);
  kern::DecodePlan pl = kern::decode_plan(nk, rows, kTargetBlocks);
  if (r.chunk > 0) {
    pl.chunk = r.chunk;
    pl.splits = int((nk + r.chunk - 1) / r.chunk);
  }
  INFO("splits " << pl.splits << " of " << pl.chunk << " keys");
  const size_t nqe = size_t(rows) * d, nke = size_t(kB * nk * hk) * d, noe = size_t(rows) * dv,
               nve = size_t(kB * nk * hk) * dv;

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = from_e<E>(to_e<E>(nd(rng)));
    return x;
  };
  const std::vector<float> q = rnd(nqe), k = rnd(nke), v = r.v_in_k ? std::vector<float>{} : rnd(nve);
  const E nan_e = to_e<E>(std::numeric_limits<float>::quiet_NaN());
  const float nan_f = std::numeric_limits<float>::quiet_NaN();
  Guarded<E> tq(nqe, nan_e), tk(nke, nan_e), tv(r.v_in_k ? 0 : nve, nan_e), to(noe, nan_e);
  for (size_t i = 0; i < nqe; ++i) tq.data()[i] = to_e<E>(q[i]);
  for (size_t i = 0; i < nke; ++i) tk.data()[i] = to_e<E>(k[i]);
  for (size_t i = 0; i < v.size(); ++i) tv.data()[i] = to_e<E>(v[i]);
  Guarded<float> lse(size_t(rows), nan_f), opart(size_t(rows * pl.splits) * dv, nan_f),
      lpart(size_t(rows * pl.splits), nan_f);

  const float scale = 1.0f / std::sqrt(float(d));
  kern::DecodeParams p{};
  p.q = tq.data();
  p.k = tk.data();
  p.v = r.v_in_k ? tk.data() : tv.data();
  p.o_part = opart.data();
  p.lse_part = lpart.data();
  p.o = to.data();
  p.lse = lse.data();
  p.t = dtype_code<E>();
  p.nk = int(nk);
  p.hq = kHq;
  p.hk = hk;
  p.rep = kHq / hk;
  p.head0 = 0;
  p.d = d;
  p.dv = dv;
  p.v_row = r.v_in_k ? d : dv;
  p.splits = pl.splits;
  p.chunk = pl.chunk;
  p.group = kern::decode_group(width);
  p.vec = r.vec && d % kern::kDecVec == 0 && dv % kern::kDecVec == 0 && p.v_row % kern::kDecVec == 0;
  p.qp = int(r.lay.qpos);
  p.mask.causal = 1;
  p.mask.window = int32_t(r.lay.window);
  p.scale_log2 = scale * kLog2e;
  p.kpos = to_pos_arg(r.lay.kpos);
  auto& emu = cpb_emu::Emu::get();
  emu.clear_globals();
  launch_split(kern::decode_passes(width), cpb_emu::Idx3{unsigned(kHq), unsigned(pl.splits), unsigned(kB)}, p);
  CHECK(opart.guards_intact());
  CHECK(lpart.guards_intact());
  int64_t bad_part = 0;
  for (size_t i = 0; i < opart.n; ++i) bad_part += !std::isfinite(opart.data()[i]);
  for (size_t i = 0; i < lpart.n; ++i) bad_part += std::isnan(lpart.data()[i]) || lpart.data()[i] == INFINITY;
  CHECK(bad_part == 0);  // every partial written: finite o, lse finite or -inf
  {  // a split's lse is -inf exactly when none of its keys is visible (the same for every row)
    const std::vector<int64_t> kl = r.lay.kpos.list();
    int64_t wrong = 0;
    for (int sp = 0; sp < pl.splits; ++sp) {
      bool any = false;
      for (int64_t j = int64_t(sp) * pl.chunk; j < std::min<int64_t>(nk, int64_t(sp + 1) * pl.chunk); ++j)
        any |= kl[size_t(j)] <= r.lay.qpos && (r.lay.window == 0 || r.lay.qpos - kl[size_t(j)] < r.lay.window);
      for (int64_t row = 0; row < rows; ++row) wrong += (lpart.data()[row * pl.splits + sp] == -INFINITY) == any;
    }
    CHECK(wrong == 0);
  }
  cpb_emu::launch(&kern::attn_decode_combine_kernel,
                  cpb_emu::Idx3{unsigned((rows + kern::kDecCombineWarps - 1) / kern::kDecCombineWarps), 1, 1},
                  32 * kern::kDecCombineWarps, 0, p, int(rows));
  CHECK(to.guards_intact());
  CHECK(lse.guards_intact());

  // Reference and tolerance.
  const int kpb = kern::kDecWarps * (32 / kern::decode_group(width));
  int log_slots = 0;
  for (int s = 32 / kern::decode_group(width); s > 1; s >>= 1) ++log_slots;
  const double depth = double((pl.chunk + kpb - 1) / kpb + log_slots + kern::kDecWarps + pl.splits);
  const std::vector<int64_t> kp = r.lay.kpos.list();
  const int64_t qp = r.lay.qpos, W = r.lay.window;
  auto visible = [&](int64_t j) { return kp[size_t(j)] <= qp && (W == 0 || qp - kp[size_t(j)] < W); };
  Stats st;
  st.runs = 1;
  int64_t fails = 0, nvis_total = 0;
  std::string worst;
  double worst_ratio = -1;
  std::vector<double> sc(static_cast<size_t>(nk));
  for (int b = 0; b < kB; ++b)
    for (int h = 0; h < kHq; ++h) {
      const int g = h / (kHq / hk);
      const int64_t row = int64_t(b) * kHq + h;
      const float* qr = &q[size_t(row) * d];
      double mx = -INFINITY, smax = 0;
      int64_t nvis = 0;
      for (int64_t j = 0; j < nk; ++j) {
        if (!visible(j)) continue;
        ++nvis;
        const float* kr = &k[size_t((b * nk + j) * hk + g) * d];
        double dot = 0, ab = 0;
        for (int c = 0; c < d; ++c) dot += double(qr[c]) * kr[c], ab += std::abs(double(qr[c]) * kr[c]);
        sc[size_t(j)] = dot * double(scale);
        smax = std::max(smax, ab * double(scale));
        mx = std::max(mx, sc[size_t(j)]);
      }
      nvis_total += nvis;
      const double e_math = 4 * gamma_n(d + 2) * smax + 4 * gamma_n(4 * depth + 16);
      std::vector<double> o_ref(size_t(dv), 0.0), a_ref(size_t(dv), 0.0);
      double lse_ref = -INFINITY;
      if (nvis > 0) {
        double l = 0;
        for (int64_t j = 0; j < nk; ++j)
          if (visible(j)) l += std::exp(sc[size_t(j)] - mx);
        for (int64_t j = 0; j < nk; ++j) {
          if (!visible(j)) continue;
          const double w = std::exp(sc[size_t(j)] - mx) / l;
          const float* vr = r.v_in_k ? &k[size_t((b * nk + j) * hk + g) * d] : &v[size_t((b * nk + j) * hk + g) * dv];
          for (int c = 0; c < dv; ++c) o_ref[size_t(c)] += w * vr[c], a_ref[size_t(c)] += w * std::abs(double(vr[c]));
        }
        lse_ref = mx + std::log(l);
      }
      for (int c = 0; c < dv; ++c) {
        const double got = from_e<E>(to.data()[size_t(row) * dv + c]), want = o_ref[size_t(c)];
        const double err = std::abs(got - want);
        const double tol = store_u<E>() * (std::abs(want) + e_math * a_ref[size_t(c)]) + e_math * a_ref[size_t(c)] +
                           store_floor<E>();
        const bool ok = std::isfinite(got) && (nvis > 0 ? err <= tol : got == 0.0);
        if (std::isfinite(err)) st.max_err_o = std::max(st.max_err_o, err);
        const double ratio = nvis > 0 ? (tol > 0 ? err / tol : (err > 0 ? INFINITY : 0)) : 0;
        st.max_ratio_o = std::max(st.max_ratio_o, std::isnan(ratio) ? INFINITY : ratio);
        ++st.elements;
        if (!ok) ++fails;
        if (!ok || ratio > worst_ratio) {
          worst_ratio = ok ? ratio : INFINITY;
          worst = "o[b=" + std::to_string(b) + " h=" + std::to_string(h) + " c=" + std::to_string(c) +
                  "] = " + std::to_string(got) + ", reference " + std::to_string(want) + ", tolerance " +
                  std::to_string(tol) + ", visible keys " + std::to_string(nvis);
        }
      }
      const double gl = lse.data()[row];
      if (nvis == 0) {
        if (!(gl == -INFINITY)) {
          ++fails;
          worst = "lse[b=" + std::to_string(b) + " h=" + std::to_string(h) + "] = " + std::to_string(gl) +
                  " for a row that sees no key (want -inf)";
          worst_ratio = INFINITY;
        }
      } else {
        const double err = std::abs(gl - lse_ref), tol = e_math + 4 * kEps * std::abs(lse_ref);
        st.max_err_lse = std::max(st.max_err_lse, std::isfinite(err) ? err : INFINITY);
        st.max_ratio_lse = std::max(st.max_ratio_lse, std::isfinite(err) ? err / tol : INFINITY);
        if (!(err <= tol)) {
          ++fails;
          worst = "lse[b=" + std::to_string(b) + " h=" + std::to_string(h) + "] = " + std::to_string(gl) +
                  ", reference " + std::to_string(lse_ref) + ", tolerance " + std::to_string(tol);
          worst_ratio = INFINITY;
        }
      }
    }
  INFO("worst: " << worst);
  CHECK(fails == 0);
  CHECK((nvis_total == 0) == r.lay.none_visible);  // the layout is what it says
  return st;
}

// The geometry (GQA and MHA, head dims, masks, split counts) is the same for every dtype: fp32
// runs all of it; bf16 and fp16, whose difference is the conversions, run GQA at d = 16 and 128
// (the two ends of the vector path), which keeps the suite's time down.
template <typename E>
void run_matrix(uint64_t seed, std::vector<int> hks, std::vector<int> ds) {
  Stats all;
  for (int hk : hks)
    for (int d : ds) {
      std::vector<Run> runs;
      // nk from 1 to a few thousand; decode_plan splits 513, 1000 and 2999 into 2, 3 and 11
      // chunks of 257, 334 and 273 keys, none of which divides nk. (2999 at d = 16 only: the
      // emulator's cost grows with nk x d, and the split count does not depend on d.)
      for (int64_t nk : {1, 33, 513, 1000}) runs.push_back({hk, d, nk, cache_layout(nk)});
      if (d == 16) runs.push_back({hk, d, 2999, cache_layout(2999)});
      runs.push_back({hk, d, 600, window_layout(600)});
      runs.push_back({hk, d, 300, none_causal_layout(300)});
      runs.push_back({hk, d, 300, none_window_layout(300)});
      runs.push_back({hk, d, 520, reversed_layout(520)});
      // Many short splits (more than 32: the combine's lanes loop), the last ones wholly masked
      // (keys after the query), chunks ending inside segments; and the scalar loads.
      runs.push_back({hk, d, 1000, cache_layout(1000), 23});
      runs.push_back({hk, d, 257, window_layout(257), 0, false});
      for (const Run& r : runs) all.add(run_decode<E>(r, seed++));
    }
  std::printf("decode emu %s: %d runs, %lld o elements; max |o err| %.3g (%.3g of its tolerance), "
              "max |lse err| %.3g (%.3g of its tolerance)\n",
              dtype_str<E>(), all.runs, (long long)all.elements, all.max_err_o, all.max_ratio_o, all.max_err_lse,
              all.max_ratio_lse);
}

}  // namespace

TEST_CASE("cuda emulated decode: split plan", "[cuda][emu][decode]") {
  for (int64_t rows : {1, 2, 16, 64, 1000, 100000})
    for (int64_t target : {1, 108, 1056, 4224})
      for (int64_t nk : {0, 1, 2, 255, 256, 257, 1000, 4097, 131072, 1000000}) {
        INFO("rows " << rows << " target " << target << " nk " << nk);
        const kern::DecodePlan pl = kern::decode_plan(nk, rows, target);
        CHECK(pl.splits >= 1);
        CHECK(pl.splits <= kern::decode_max_splits(rows, target));  // the scratch's size holds
        CHECK(pl.splits <= kern::kDecMaxSplits);
        CHECK(int64_t(pl.splits) * pl.chunk >= nk);                 // every key in a split
        CHECK(int64_t(pl.splits - 1) * pl.chunk < std::max<int64_t>(nk, 1));  // no empty split
        if (pl.splits > 1) CHECK(pl.chunk >= kern::kDecMinKeys);  // splits are not short
      }
  CHECK(kern::decode_group(16) == 2);
  CHECK(kern::decode_group(20) == 4);
  CHECK(kern::decode_group(64) == 8);
  CHECK(kern::decode_group(128) == 16);
  CHECK(kern::decode_group(256) == 32);
  // Rows wider than a warp's 256 elements: a warp per key, several passes (MLA's absorbed 576).
  CHECK(kern::decode_group(576) == 32);
  CHECK(kern::decode_passes(256) == 1);
  CHECK(kern::decode_passes(257) == 2);
  CHECK(kern::decode_passes(576) == 3);
  CHECK(kern::decode_passes(kern::kDecMaxD) == kern::kDecMaxPasses);
}

TEST_CASE("cuda emulated decode: fp32, GQA and MHA, d 16/64/128, nk 1..2999, masks", "[cuda][emu][decode]") {
  run_matrix<float>(100, {2, 8}, {16, 64, 128});
}
TEST_CASE("cuda emulated decode: bf16, GQA, d 16/128, nk 1..2999, masks", "[cuda][emu][decode]") {
  run_matrix<__nv_bfloat16>(200, {2}, {16, 128});
}
TEST_CASE("cuda emulated decode: fp16, GQA, d 16/128, nk 1..2999, masks", "[cuda][emu][decode]") {
  run_matrix<__half>(300, {2}, {16, 128});
}

TEST_CASE("cuda emulated decode: fp32 head dims off the vector path (20, 256)", "[cuda][emu][decode]") {
  // d = 20: 4 threads per key, the last with 4 of its 8 elements (scalar loads); d = 256: one
  // warp per key (no slot merge inside the warp).
  for (int d : {20, 256}) {
    run_decode<float>({2, d, 700, cache_layout(700)}, 400 + d);
    run_decode<float>({8, d, 300, window_layout(300), 64}, 500 + d);
  }
}

// The smallest case that reaches every barrier of the decode kernels (tests/unit/cuda_emu_mutation.py
// runs it with each one switched off): two splits, GQA, masked keys.
TEST_CASE("cuda emulated decode: two splits, GQA, bf16 d64", "[cuda][emu][decode][mutation]") {
  run_decode<__nv_bfloat16>({2, 64, 300, cache_layout(300), 160}, 7);
}

// Two head dims (MLA): scores over d, values over dv. MQA (hk = 1: every query head on one kv head,
// as MLA's absorbed decode runs) at d 72, dv 64 (16 threads per key; the threads past dv hold
// only q and k columns); dv wider than d (24 / 40, and 20 / 36 off the vector path); dv alone
// past 256, then d alone (two passes); and the absorbed decode itself, d 576, dv 512: a warp per key, three
// passes, one split and three (forced chunks of 16 keys).
template <typename E>
void run_two_dims(uint64_t seed) {
  Stats all;
  auto add = [&](Run r) { all.add(run_decode<E>(r, seed++)); };
  for (int64_t nk : {1, 33, 513}) add({1, 72, nk, cache_layout(nk), 0, true, 64});
  add({1, 72, 300, window_layout(300), 0, true, 64});
  add({1, 72, 300, none_causal_layout(300), 0, true, 64});
  add({2, 24, 100, reversed_layout(100), 0, true, 40});
  add({2, 20, 100, cache_layout(100), 0, true, 36});
  add({2, 16, 60, window_layout(60), 0, true, 300});
  add({1, 300, 40, cache_layout(40), 0, true, 16});  // d alone past 256, off the vector path
  add({1, 576, 40, cache_layout(40), 0, true, 512});
  add({1, 576, 40, window_layout(40), 16, true, 512});
  add({1, 576, 40, cache_layout(40), 16, false, 512});
  // v inside k's rows (AttnShape::v_in_k): the latent cache read once, as MLA's absorbed decode
  // runs it; the reference reads v from k's first dv columns. One split and three, vector and
  // scalar loads, and a row pitch off the vector path (d 20, dv 12).
  add({1, 576, 40, cache_layout(40), 0, true, 512, true});
  add({1, 576, 40, window_layout(40), 16, true, 512, true});
  add({1, 576, 40, cache_layout(40), 16, false, 512, true});
  add({2, 20, 100, cache_layout(100), 0, true, 12, true});
  std::printf("decode emu %s, dv != d: %d runs, %lld o elements; max |o err| %.3g (%.3g of its tolerance), "
              "max |lse err| %.3g (%.3g of its tolerance)\n",
              dtype_str<E>(), all.runs, (long long)all.elements, all.max_err_o, all.max_ratio_o, all.max_err_lse,
              all.max_ratio_lse);
}

TEST_CASE("cuda emulated decode: fp32, dv != d (MLA: MQA d 72 / dv 64, d 576 / dv 512)", "[cuda][emu][decode][mla]") {
  run_two_dims<float>(600);
}
TEST_CASE("cuda emulated decode: bf16, dv != d (MLA: MQA d 72 / dv 64, d 576 / dv 512)", "[cuda][emu][decode][mla]") {
  run_two_dims<__nv_bfloat16>(700);
}
