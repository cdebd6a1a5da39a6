// cpbench_cuda_bench: the CUDA backend's attention kernels on one GPU, forward and backward
// TFLOP/s beside the cuBLAS GEMM rate measured in the same run.
//
//   cpbench_cuda_bench [--seqs 4096,16384,65536] [--heads 16] [--kv-heads 16] [--head-dim 128]
//                      [--batch 1] [--dtype bf16|fp16] [--causal both|yes|no] [--warmup 2]
//                      [--iters 5] [--gemm 8192] [--json FILE] [--no-check]
//   cpbench_cuda_bench --check-only [--check-dims 64,128] [--dtype bf16]
//
// Before timing, the kernels are checked against a naive fp32 reference on the host at small,
// awkward sizes with partial tiles (fwd o and lse, bwd dq, dk, dv; rel-L2 <= 2e-2), as llm.c's
// dev/cuda does: a fast wrong kernel is not a result. --check-only runs just that check, for
// every head dim in --check-dims, MHA and GQA, causal and not (the compute-sanitizer target of
// scripts/gpu_check.sh). After timing each sequence length, the last query row of the first and
// last head (o, dq) and, when causal, the last key row (dk, dv, seen by that row alone) are
// compared with a float64 host reference: at N = 266240, H = 64, d = 128 those elements lie past
// 2^31, so 32-bit offset arithmetic fails there. --gemm 0 skips the GEMM rate.
// Exit status: 0 ok, 1 check failed or error, 2 no CUDA device.
//
// FLOPs (DESIGN): fwd = 4*d*H*B*pairs (pairs = visible query-key pairs, exact under the causal
// mask); bwd hardware = 2.5x fwd (the scores are recomputed), model = 2x fwd. The targets
// compare fwd and hardware-bwd TFLOP/s with the GEMM rate (fwd >= 40%, bwd >= 25% on H100/H200).
// Timing: device events around each call, warm-up discarded, median of the iterations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"

using namespace cpbench;

namespace {

struct Options {
  std::vector<int64_t> seqs = {4096, 16384, 65536};
  int heads = 16, kv_heads = 16, head_dim = 128;
  int64_t batch = 1;
  DType dtype = DType::bf16;
  std::string causal = "both";
  int warmup = 2, iters = 5;
  int64_t gemm = 8192;
  std::string json;
  bool check = true;
  bool check_only = false;
  std::vector<int> check_dims = {64, 128};
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "cpbench_cuda_bench: %s\n(see the header of bench/micro/cuda_attn_bench.cu)\n",
               why.c_str());
  std::exit(1);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + a);
      return argv[++i];
    };
    try {
      if (a == "--seqs") {
        o.seqs.clear();
        std::stringstream ss(val());
        std::string tok;
        while (std::getline(ss, tok, ',')) o.seqs.push_back(std::stoll(tok));
      } else if (a == "--heads") {
        o.heads = std::stoi(val());
      } else if (a == "--kv-heads") {
        o.kv_heads = std::stoi(val());
      } else if (a == "--head-dim") {
        o.head_dim = std::stoi(val());
      } else if (a == "--batch") {
        o.batch = std::stoll(val());
      } else if (a == "--dtype") {
        o.dtype = parse_dtype(val());
      } else if (a == "--causal") {
        o.causal = val();
      } else if (a == "--warmup") {
        o.warmup = std::stoi(val());
      } else if (a == "--iters") {
        o.iters = std::stoi(val());
      } else if (a == "--gemm") {
        o.gemm = std::stoll(val());
      } else if (a == "--json") {
        o.json = val();
      } else if (a == "--no-check") {
        o.check = false;
      } else if (a == "--check-only") {
        o.check_only = true;
      } else if (a == "--check-dims") {
        o.check_dims.clear();
        std::stringstream ss(val());
        std::string tok;
        while (std::getline(ss, tok, ',')) o.check_dims.push_back(std::stoi(tok));
      } else if (a == "-h" || a == "--help") {
        usage("usage");
      } else {
        usage("unknown option " + a);
      }
    } catch (const std::invalid_argument& e) {
      usage(std::string("bad value for ") + a + ": " + e.what());
    }
  }
  if (o.causal != "both" && o.causal != "yes" && o.causal != "no") usage("--causal both|yes|no");
  if (o.iters < 1 || o.warmup < 0) usage("--iters >= 1, --warmup >= 0");
  if (o.gemm < 0) usage("--gemm >= 0 (0 skips the GEMM rate)");
  if (o.check_only && !o.check) usage("--check-only and --no-check exclude each other");
  if (o.check_dims.empty()) usage("--check-dims needs at least one head dim");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The 1 Mi-element random pattern (uniform in [-1, 1)) that fill_random repeats; element e of a
// filled tensor of n elements is pattern[e % min(n, 2^20)], rounded to the tensor's dtype.
std::vector<float> random_pattern(int64_t n, uint64_t seed) {
  const int64_t chunk = std::min<int64_t>(n, int64_t(1) << 20);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> host(static_cast<size_t>(chunk));
  for (float& x : host) x = u(rng);
  return host;
}

// Fills a device tensor with the repeated pattern (cheap at any size, values vary within every row).
void fill_random(Backend& be, Tensor& t, uint64_t seed) {
  const int64_t n = t.numel();
  const std::vector<float> host = random_pattern(n, seed);
  const int64_t chunk = int64_t(host.size());
  Tensor head = t.view(0, {chunk});
  be.upload(host, head);
  for (int64_t off = chunk; off < n; off += chunk) {
    const int64_t len = std::min(chunk, n - off);
    Tensor dst = t.view(off, {len});
    be.copy_2d(dst, len, head, len, 1, len);
  }
}

float round_to(DType t, float x) {  // the value a bf16/fp16 tensor holds
  if (t == DType::bf16) return __bfloat162float(__float2bfloat16_rn(x));
  if (t == DType::f16) return __half2float(__float2half_rn(x));
  return x;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
    if (fa != fb) return INFINITY;
    if (!fa) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

// Naive fp32 reference of one (B=1) attention problem, contiguous positions with an offset so
// the first rows of a causal block see no key when koff > 0.
void reference(int nq, int nk, int hq, int hk, int d, bool causal, int qoff,
               const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
               const std::vector<float>& dout, std::vector<float>& o, std::vector<float>& lse,
               std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv) {
  const float scale = 1.0f / std::sqrt(float(d));
  o.assign(size_t(nq) * hq * d, 0.0f);
  lse.assign(size_t(hq) * nq, -INFINITY);
  dq.assign(q.size(), 0.0f);
  dk.assign(k.size(), 0.0f);
  dv.assign(v.size(), 0.0f);
  std::vector<double> p(static_cast<size_t>(nk));
  for (int h = 0; h < hq; ++h) {
    const int g = h / (hq / hk);
    for (int i = 0; i < nq; ++i) {
      const float* qi = &q[(size_t(i) * hq + h) * d];
      double mx = -INFINITY;
      for (int j = 0; j < nk; ++j) {
        const bool vis = !causal || j <= i + qoff;
        if (!vis) {
          p[j] = -INFINITY;
          continue;
        }
        double s = 0;
        for (int c = 0; c < d; ++c) s += double(qi[c]) * k[(size_t(j) * hk + g) * d + c];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      if (mx == -INFINITY) continue;  // o = 0, lse = -inf, no gradient
      double sum = 0;
      for (int j = 0; j < nk; ++j) sum += p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx);
      lse[size_t(h) * nq + i] = float(mx + std::log(sum));
      for (int j = 0; j < nk; ++j) p[j] = p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx) / sum;
      float* oi = &o[(size_t(i) * hq + h) * d];
      for (int c = 0; c < d; ++c) {
        double acc = 0;
        for (int j = 0; j < nk; ++j) acc += p[j] * v[(size_t(j) * hk + g) * d + c];
        oi[c] = float(acc);
      }
      const float* doi = &dout[(size_t(i) * hq + h) * d];
      double delta = 0;
      for (int c = 0; c < d; ++c) delta += double(doi[c]) * oi[c];
      for (int j = 0; j < nk; ++j) {
        if (p[j] == 0.0) continue;
        double dp = 0;
        for (int c = 0; c < d; ++c) dp += double(doi[c]) * v[(size_t(j) * hk + g) * d + c];
        const double ds = p[j] * (dp - delta);
        for (int c = 0; c < d; ++c) {
          dv[(size_t(j) * hk + g) * d + c] += float(p[j] * doi[c]);
          dk[(size_t(j) * hk + g) * d + c] += float(ds * scale * qi[c]);
          dq[(size_t(i) * hq + h) * d + c] += float(ds * scale * k[(size_t(j) * hk + g) * d + c]);
        }
      }
    }
  }
}

// One check problem: sizes that are not multiples of the tiles (32, 64 or 128 rows).
struct CheckShape {
  int nq, nk, hq, hk, d;
};

// The kernels against the reference at one small, awkward shape, causal and not. Returns false
// on a mismatch.
bool check_kernels(Backend& be, DType dtype, const CheckShape& cs) {
  const int nq = cs.nq, nk = cs.nk, hq = cs.hq, hk = cs.hk, d = cs.d;
  bool ok = true;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto rnd = [&](size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = round_to(dtype, u(rng));
    return x;
  };
  for (int causal = 0; causal < 2; ++causal) {
    const int qoff = -std::min(40, nq / 4);  // causal: query i sees key j iff j <= i + qoff
    const std::vector<float> q = rnd(size_t(nq) * hq * d), k = rnd(size_t(nk) * hk * d),
                             v = rnd(size_t(nk) * hk * d), dout = rnd(size_t(nq) * hq * d);
    std::vector<float> o_ref, lse_ref, dq_ref, dk_ref, dv_ref;
    reference(nq, nk, hq, hk, d, causal, qoff, q, k, v, dout, o_ref, lse_ref, dq_ref, dk_ref, dv_ref);
    AttnShape s;
    s.B = 1, s.nq = nq, s.nk = nk, s.hq = hq, s.hk = hk, s.d = d, s.causal = causal;
    auto dev = [&](const std::vector<float>& h, std::vector<int64_t> shape, DType t) {
      Tensor x = be.alloc(std::move(shape), t, MemKind::activations);
      be.upload(h, x);
      return x;
    };
    Tensor tq = dev(q, {1, nq, hq, d}, dtype), tk = dev(k, {1, nk, hk, d}, dtype),
           tv = dev(v, {1, nk, hk, d}, dtype), tdo = dev(dout, {1, nq, hq, d}, dtype);
    Tensor to = be.alloc({1, nq, hq, d}, dtype, MemKind::activations);
    Tensor tl = be.alloc({1, hq, nq}, DType::f32, MemKind::activations);
    Tensor tdl = be.alloc({1, hq, nq}, DType::f32, MemKind::activations);
    Tensor tdq = be.alloc({1, nq, hq, d}, DType::f32, MemKind::activations);
    Tensor tdk = be.alloc({1, nk, hk, d}, DType::f32, MemKind::activations);
    Tensor tdv = be.alloc({1, nk, hk, d}, DType::f32, MemKind::activations);
    // Queries at positions i, keys at -qoff + j: query i sees key j iff j <= i + qoff, so the
    // first -qoff rows see no key (o = 0, lse = -inf) and the last keys are seen by no query.
    const Positions qpos2 = Positions::contiguous(0, nq);
    const Positions kpos2 = Positions::contiguous(-qoff, nk);
    be.attn_fwd(s, tq, tk, tv, qpos2, kpos2, to, tl);
    be.attn_bwd_delta(s, to, tdo, tdl);
    be.fill(tdq, 0.0f);
    be.fill(tdk, 0.0f);
    be.fill(tdv, 0.0f);
    be.attn_bwd(s, tq, tk, tv, tdo, tl, tdl, qpos2, kpos2, tdq, tdk, tdv);
    be.synchronize();
    const struct {
      const char* name;
      std::vector<float> got;
      const std::vector<float>* want;
    } cmp[] = {{"o", be.download(to), &o_ref},     {"lse", be.download(tl), &lse_ref},
               {"dq", be.download(tdq), &dq_ref},  {"dk", be.download(tdk), &dk_ref},
               {"dv", be.download(tdv), &dv_ref}};
    for (const auto& c : cmp) {
      const double e = rel_l2(c.got, *c.want);
      const bool pass = e <= 2e-2;
      ok = ok && pass;
      std::printf("check %-3s nq=%d nk=%d hq=%d hk=%d d=%d causal=%d %s: rel_l2 %.3g\n", c.name, nq,
                  nk, hq, hk, d, causal, dtype_name(dtype), e);
      if (!pass) std::printf("  FAIL (bound 2e-2)\n");
    }
  }
  return ok;
}

// Host copies of the benchmark's inputs: element e of a tensor is pattern[e % size], rounded.
struct Inputs {
  DType dtype;
  std::vector<float> q, k, v, dout;
  float at(const std::vector<float>& pat, int64_t e) const {
    return round_to(dtype, pat[size_t(e % int64_t(pat.size()))]);
  }
};

// Float64 reference of query row i of head h against every visible key (all keys j <= i when
// causal, else all): o_i, dq_i, and p and dS of key row `jlast` for that row.
struct RowRef {
  std::vector<double> o, dq;
  double p_last = 0, ds_last = 0;
};
RowRef reference_row(const Inputs& in, int64_t b, int64_t N, int H, int G, int d, bool causal,
                     int64_t i, int h, int64_t jlast) {
  const int g = h / (H / G);
  const double scale = 1.0 / std::sqrt(double(d));
  const int64_t nvis = causal ? i + 1 : N;
  auto qa = [&](int c) { return double(in.at(in.q, ((b * N + i) * H + h) * d + c)); };
  auto doa = [&](int c) { return double(in.at(in.dout, ((b * N + i) * H + h) * d + c)); };
  auto kv = [&](const std::vector<float>& pat, int64_t j, int c) {
    return double(in.at(pat, ((b * N + j) * G + g) * d + c));
  };
  std::vector<double> sc(size_t(nvis), 0.0);
  double mx = -INFINITY;
  for (int64_t j = 0; j < nvis; ++j) {
    double acc = 0;
    for (int c = 0; c < d; ++c) acc += qa(c) * kv(in.k, j, c);
    sc[size_t(j)] = acc * scale;
    mx = std::max(mx, sc[size_t(j)]);
  }
  double sum = 0;
  for (double& x : sc) sum += (x = std::exp(x - mx));
  for (double& x : sc) x /= sum;  // now p_j
  RowRef r;
  r.o.assign(size_t(d), 0.0);
  r.dq.assign(size_t(d), 0.0);
  for (int64_t j = 0; j < nvis; ++j)
    for (int c = 0; c < d; ++c) r.o[size_t(c)] += sc[size_t(j)] * kv(in.v, j, c);
  double delta = 0;  // from o as the kernels store it (rounded to the dtype)
  for (int c = 0; c < d; ++c) delta += doa(c) * double(round_to(in.dtype, float(r.o[size_t(c)])));
  for (int64_t j = 0; j < nvis; ++j) {
    double dp = 0;
    for (int c = 0; c < d; ++c) dp += doa(c) * kv(in.v, j, c);
    const double ds = sc[size_t(j)] * (dp - delta);
    for (int c = 0; c < d; ++c) r.dq[size_t(c)] += scale * ds * kv(in.k, j, c);
    if (j == jlast) r.p_last = sc[size_t(j)], r.ds_last = ds;
  }
  return r;
}

double rel_l2_d(const std::vector<float>& got, const std::vector<double>& want) {
  std::vector<float> w(want.begin(), want.end());
  return rel_l2(got, w);
}

// The last query row (heads 0 and H-1: o, dq) and, causal, the last key row of the last kv head
// (dk, dv: only the last query row sees it) of the last batch, against reference_row. These
// elements sit at the largest offsets of their tensors.
bool check_last_rows(Backend& be, const Inputs& in, int64_t Bt, int64_t N, int H, int G, int d,
                     bool causal, const Tensor& o, const Tensor& dq, const Tensor& dk,
                     const Tensor& dv) {
  const int64_t b = Bt - 1, i = N - 1;
  bool ok = true;
  auto report = [&](const char* what, int head, double e) {
    const bool pass = e <= 2e-2;
    ok = ok && pass;
    std::printf("row check seq=%lld causal=%d %s (row %lld, head %d): rel_l2 %.3g%s\n", (long long)N,
                int(causal), what, (long long)i, head, e, pass ? "" : "  FAIL (bound 2e-2)");
  };
  for (int h : {0, H - 1}) {
    const RowRef r = reference_row(in, b, N, H, G, d, causal, i, h, i);
    const int64_t off = ((b * N + i) * H + h) * d;
    report("o", h, rel_l2_d(be.download(o.view(off, {d})), r.o));
    report("dq", h, rel_l2_d(be.download(dq.view(off, {d})), r.dq));
  }
  if (causal) {
    const int g = G - 1, per = H / G;
    std::vector<double> dk_ref(size_t(d), 0.0), dv_ref(size_t(d), 0.0);
    const double scale = 1.0 / std::sqrt(double(d));
    for (int h = g * per; h < (g + 1) * per; ++h) {
      const RowRef r = reference_row(in, b, N, H, G, d, causal, i, h, i);
      for (int c = 0; c < d; ++c) {
        const int64_t e = ((b * N + i) * H + h) * d + c;
        dv_ref[size_t(c)] += r.p_last * double(in.at(in.dout, e));
        dk_ref[size_t(c)] += scale * r.ds_last * double(in.at(in.q, e));
      }
    }
    const int64_t off = ((b * N + i) * G + g) * d;
    report("dk", g, rel_l2_d(be.download(dk.view(off, {d})), dk_ref));
    report("dv", g, rel_l2_d(be.download(dv.view(off, {d})), dv_ref));
  }
  return ok;
}

struct Row {
  int64_t seq;
  bool causal;
  double fwd_ms, fwd_tflops, bwd_ms, bwd_tflops, bwd_model_tflops;
};

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "cpbench_cuda_bench: no CUDA device\n");
    return 2;
  }
  try {
    BackendOptions bo;
    bo.name = "cuda";
    auto be = make_cuda_backend(bo);
    std::printf("device: %s\n", be->device_name().c_str());

    bool check_ok = true;
    if (opt.check_only) {
      // Odd sizes: partial query and key tiles, rows that see no key (causal), MHA and GQA.
      for (int d : opt.check_dims)
        for (const CheckShape cs : {CheckShape{200, 264, 4, 4, d}, CheckShape{200, 264, 4, 2, d},
                                    CheckShape{37, 45, 2, 1, d}})
          check_ok = check_kernels(*be, opt.dtype, cs) && check_ok;
      std::printf("kernel check %s\n", check_ok ? "passed" : "FAILED");
      return check_ok ? 0 : 1;
    }
    if (opt.check)
      check_ok = check_kernels(*be, opt.dtype,
                               CheckShape{200, 264, 4, opt.kv_heads < opt.heads ? 2 : 4, opt.head_dim});
    if (!check_ok) std::printf("KERNEL CHECK FAILED: timings below are of wrong kernels\n");

    // cuBLAS GEMM rate, same dtype, square (--gemm 0: not measured, ratios print as 0).
    const int64_t g = opt.gemm;
    double gemm_tflops = 0;
    if (g > 0) {
      Tensor A = be->alloc({g, g}, opt.dtype, MemKind::activations);
      Tensor B = be->alloc({g, g}, opt.dtype, MemKind::activations);
      Tensor C = be->alloc({g, g}, opt.dtype, MemKind::activations);
      fill_random(*be, A, 1);
      fill_random(*be, B, 2);
      std::vector<double> ms;
      for (int it = 0; it < opt.warmup + opt.iters; ++it) {
        Event e0 = be->record_event();
        be->gemm(false, false, g, g, g, 1.0f, A, g, B, g, 0.0f, C, g);
        Event e1 = be->record_event();
        be->synchronize();
        if (it >= opt.warmup) ms.push_back(be->elapsed_ms(e0, e1));
      }
      gemm_tflops = 2.0 * double(g) * g * g / (median(ms) * 1e-3) / 1e12;
      std::printf("cuBLAS GEMM %lldx%lldx%lld %s: %.1f TFLOP/s\n", (long long)g, (long long)g,
                  (long long)g, dtype_name(opt.dtype), gemm_tflops);
    }

    std::vector<Row> rows;
    std::vector<int> causal_modes;
    if (opt.causal != "yes") causal_modes.push_back(0);
    if (opt.causal != "no") causal_modes.push_back(1);
    const int64_t Bt = opt.batch;
    const int H = opt.heads, G = opt.kv_heads, d = opt.head_dim;
    for (int64_t N : opt.seqs) {
      Tensor q = be->alloc({Bt, N, H, d}, opt.dtype, MemKind::activations);
      Tensor k = be->alloc({Bt, N, G, d}, opt.dtype, MemKind::activations);
      Tensor v = be->alloc({Bt, N, G, d}, opt.dtype, MemKind::activations);
      Tensor o = be->alloc({Bt, N, H, d}, opt.dtype, MemKind::activations);
      Tensor dout = be->alloc({Bt, N, H, d}, opt.dtype, MemKind::activations);
      Tensor lse = be->alloc({Bt, H, N}, DType::f32, MemKind::activations);
      Tensor delta = be->alloc({Bt, H, N}, DType::f32, MemKind::activations);
      Tensor dq = be->alloc({Bt, N, H, d}, DType::f32, MemKind::activations);
      Tensor dk = be->alloc({Bt, N, G, d}, DType::f32, MemKind::activations);
      Tensor dv = be->alloc({Bt, N, G, d}, DType::f32, MemKind::activations);
      fill_random(*be, q, 11);
      fill_random(*be, k, 12);
      fill_random(*be, v, 13);
      fill_random(*be, dout, 14);
      Inputs in{opt.dtype, {}, {}, {}, {}};
      if (opt.check) {
        in.q = random_pattern(q.numel(), 11);
        in.k = random_pattern(k.numel(), 12);
        in.v = random_pattern(v.numel(), 13);
        in.dout = random_pattern(dout.numel(), 14);
      }
      const Positions pos = Positions::contiguous(0, N);
      for (int causal : causal_modes) {
        AttnShape s;
        s.B = Bt, s.nq = N, s.nk = N, s.hq = H, s.hk = G, s.d = d, s.causal = causal;
        const double fwd_flops = 4.0 * d * H * double(Bt) * double(count_visible_pairs(pos, pos, causal));
        std::vector<double> fms, bms;
        for (int it = 0; it < opt.warmup + opt.iters; ++it) {
          Event e0 = be->record_event();
          be->attn_fwd(s, q, k, v, pos, pos, o, lse);
          Event e1 = be->record_event();
          be->synchronize();
          if (it >= opt.warmup) fms.push_back(be->elapsed_ms(e0, e1));
        }
        for (int it = 0; it < opt.warmup + opt.iters; ++it) {
          be->fill(dq, 0.0f);
          be->fill(dk, 0.0f);
          be->fill(dv, 0.0f);
          Event e0 = be->record_event();
          be->attn_bwd_delta(s, o, dout, delta);
          be->attn_bwd(s, q, k, v, dout, lse, delta, pos, pos, dq, dk, dv);
          Event e1 = be->record_event();
          be->synchronize();
          if (it >= opt.warmup) bms.push_back(be->elapsed_ms(e0, e1));
        }
        be->compute_log().clear();
        if (opt.check) check_ok = check_last_rows(*be, in, Bt, N, H, G, d, causal, o, dq, dk, dv) && check_ok;
        Row r;
        r.seq = N;
        r.causal = causal;
        r.fwd_ms = median(fms);
        r.bwd_ms = median(bms);
        r.fwd_tflops = fwd_flops / (r.fwd_ms * 1e-3) / 1e12;
        r.bwd_tflops = 2.5 * fwd_flops / (r.bwd_ms * 1e-3) / 1e12;
        r.bwd_model_tflops = 2.0 * fwd_flops / (r.bwd_ms * 1e-3) / 1e12;
        rows.push_back(r);
        std::fflush(stdout);
      }
    }

    const double fwd_target = 0.40, bwd_target = 0.25;
    bool meets = gemm_tflops > 0;  // without the GEMM rate there is nothing to compare with
    auto frac = [&](double tflops) { return gemm_tflops > 0 ? tflops / gemm_tflops : 0.0; };
    auto frac_json = [&](double tflops) {
      return gemm_tflops > 0 ? std::to_string(tflops / gemm_tflops) : std::string("null");
    };
    std::printf("\nattention B=%lld H=%d G=%d d=%d %s  (GEMM %.1f TFLOP/s; targets fwd >= %.0f%%, bwd >= %.0f%%)\n",
                (long long)Bt, H, G, d, dtype_name(opt.dtype), gemm_tflops, fwd_target * 100,
                bwd_target * 100);
    std::printf("%8s %6s | %10s %9s %7s | %10s %9s %7s\n", "seq", "causal", "fwd ms", "TFLOP/s",
                "%gemm", "bwd ms", "TFLOP/s", "%gemm");
    for (const Row& r : rows) {
      const double ff = frac(r.fwd_tflops), bf = frac(r.bwd_tflops);
      meets = meets && ff >= fwd_target && bf >= bwd_target;
      std::printf("%8lld %6s | %10.3f %9.1f %6.1f%% | %10.3f %9.1f %6.1f%%\n", (long long)r.seq,
                  r.causal ? "yes" : "no", r.fwd_ms, r.fwd_tflops, 100 * ff, r.bwd_ms,
                  r.bwd_tflops, 100 * bf);
    }
    std::printf("(bwd TFLOP/s counts hardware FLOPs = 2.5x fwd; model FLOPs = 2x fwd)\n");
    std::printf("targets %s\n", meets ? "met" : "NOT met");

    if (!opt.json.empty()) {
      std::ofstream js(opt.json);
      js << "{\n  \"tool\": \"cpbench_cuda_bench\",\n  \"device\": \"" << be->device_name()
         << "\",\n  \"dtype\": \"" << dtype_name(opt.dtype) << "\",\n  \"batch\": " << Bt
         << ", \"heads\": " << H << ", \"kv_heads\": " << G << ", \"head_dim\": " << d
         << ",\n  \"warmup\": " << opt.warmup << ", \"iters\": " << opt.iters
         << ",\n  \"check_passed\": " << (opt.check ? (check_ok ? "true" : "false") : "null")
         << ",\n  \"gemm\": {\"m\": " << g << ", \"n\": " << g << ", \"k\": " << g
         << ", \"tflops\": " << gemm_tflops << "},\n  \"targets\": {\"fwd_frac_of_gemm\": "
         << fwd_target << ", \"bwd_frac_of_gemm\": " << bwd_target
         << "},\n  \"meets_targets\": " << (meets ? "true" : "false") << ",\n  \"results\": [";
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        js << (i ? "," : "") << "\n    {\"seq\": " << r.seq << ", \"causal\": " << (r.causal ? "true" : "false")
           << ", \"fwd_ms\": " << r.fwd_ms << ", \"fwd_tflops\": " << r.fwd_tflops
           << ", \"fwd_frac_of_gemm\": " << frac_json(r.fwd_tflops) << ", \"bwd_ms\": " << r.bwd_ms
           << ", \"bwd_tflops\": " << r.bwd_tflops << ", \"bwd_model_tflops\": " << r.bwd_model_tflops
           << ", \"bwd_frac_of_gemm\": " << frac_json(r.bwd_tflops) << "}";
      }
      js << "\n  ]\n}\n";
      std::printf("wrote %s\n", opt.json.c_str());
    }
    return check_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpbench_cuda_bench: %s\n", e.what());
    return 1;
  }
}
