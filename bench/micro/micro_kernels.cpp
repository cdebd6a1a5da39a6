// Micro-benchmarks of the CPU kernels at the thread count of the run (--threads / CPBENCH_THREADS):
//   BM_sgemm      OpenBLAS sgemm at attention's shapes (the baseline of the performance targets)
//   BM_backend_gemm  the backend's gemm op (OpenMP blocks of single-threaded sgemm), same shapes
//   BM_attn_fwd   attention forward, H = 8 (MHA), B = 1, contiguous positions
//   BM_attn_bwd   attention backward (same shapes)
//   BM_attn_window_vs_causal  causal sliding window against causal full attention, forward
//   BM_rmsnorm_fwd/bwd, BM_rope, BM_attn_merge   memory-bound kernels (GB/s)
// Counters: GFLOP/s counts DESIGN's model FLOPs (attention fwd 4*d*H*pairs, bwd 2x fwd over the
// unmasked pairs only); hw_GFLOP/s the hardware FLOPs (bwd 2.5x fwd: recomputed scores).
// Build: part of the cpbench tree (CPBENCH_MICRO=ON). Run: cpbench_micro [--threads=N]
//   [--benchmark_filter=attn]; scripts/perf_ratios.py checks the targets.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"

namespace cpbench::micro {
int threads();  // micro_main.cpp
}

namespace {

using namespace cpbench;

std::unique_ptr<CpuBackend> backend() { return std::make_unique<CpuBackend>(micro::threads()); }

Tensor random_tensor(Backend& be, std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = be.alloc(std::move(shape), DType::f32, MemKind::activations);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> h(static_cast<size_t>(t.numel()));
  for (float& x : h) x = d(g);
  be.upload(h, t);
  return t;
}

void set_rate(benchmark::State& st, const char* name, double per_iteration) {
  st.counters[name] = benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

void add_context(benchmark::State& st) {
  st.SetLabel(std::string("threads=") + std::to_string(micro::threads()) + " isa=" + CpuBackend::kernel_isa());
}

// ---- sgemm baseline -----------------------------------------------------------------------------
// C[M,N] = A[M,K] B[K,N] (tb = 0) or A B^T with B stored [N,K] (tb = 1); OpenBLAS's own threading.
void BM_sgemm(benchmark::State& st) {
  const int M = int(st.range(0)), N = int(st.range(1)), K = int(st.range(2));
  const bool tb = st.range(3) != 0;
  auto be = backend();  // sets OpenBLAS to the run's thread count
  Tensor A = random_tensor(*be, {M, K}, 1), B = random_tensor(*be, {tb ? N : K, tb ? K : N}, 2);
  Tensor C = random_tensor(*be, {M, N}, 3);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
                A.ptr<float>(), K, B.ptr<float>(), tb ? K : N, 0.0f, C.ptr<float>(), N);
    benchmark::ClobberMemory();
  }
  set_rate(st, "GFLOP/s", 2.0 * M * N * K * 1e-9);
  add_context(st);
}
BENCHMARK(BM_sgemm)
    ->ArgNames({"M", "N", "K", "tb"})
    ->Args({4096, 4096, 128, 1})   // S = Q K^T
    ->Args({4096, 128, 4096, 0})   // O = P V
    ->Args({4096, 4096, 64, 1})
    ->Args({4096, 64, 4096, 0})
    ->Args({2048, 2048, 2048, 0})  // square, for reference
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The backend's gemm op at the same shapes: OpenMP threads over row/column blocks, each with a
// single-threaded OpenBLAS sgemm (see cpu_kernels.h for why not OpenBLAS's own pool).
void BM_backend_gemm(benchmark::State& st) {
  const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
  const bool tb = st.range(3) != 0;
  auto be = backend();
  Tensor A = random_tensor(*be, {M, K}, 1), B = random_tensor(*be, {tb ? N : K, tb ? K : N}, 2);
  Tensor C = random_tensor(*be, {M, N}, 3);
  for (auto _ : st) {
    be->gemm(false, tb, M, N, K, 1.0f, A, K, B, tb ? K : N, 0.0f, C, N);
    benchmark::ClobberMemory();
  }
  set_rate(st, "GFLOP/s", 2.0 * M * N * K * 1e-9);
  add_context(st);
}
BENCHMARK(BM_backend_gemm)
    ->ArgNames({"M", "N", "K", "tb"})
    ->Args({4096, 4096, 128, 1})
    ->Args({4096, 128, 4096, 0})
    ->Args({2048, 2048, 2048, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- attention ----------------------------------------------------------------------------------
struct AttnProblem {
  AttnShape s;
  Positions pos;
  Tensor q, k, v, o, lse, dout, delta, dq, dk, dv;
  double fwd_flops = 0;
  AttnProblem(Backend& be, int64_t N, int d, bool causal, bool with_bwd, int64_t window = 0) {
    s.B = 1;
    s.nq = s.nk = N;
    s.hq = s.hk = 8;
    s.d = d;
    s.causal = causal;
    s.window = window;
    pos = Positions::contiguous(0, N);
    q = random_tensor(be, {1, N, 8, d}, 11);
    k = random_tensor(be, {1, N, 8, d}, 12);
    v = random_tensor(be, {1, N, 8, d}, 13);
    o = be.alloc({1, N, 8, d}, DType::f32, MemKind::activations);
    lse = be.alloc({1, 8, N}, DType::f32, MemKind::activations);
    fwd_flops = 4.0 * d * s.hq * double(count_visible_pairs(pos, pos, s.mask()));
    if (!with_bwd) return;
    dout = random_tensor(be, {1, N, 8, d}, 14);
    delta = be.alloc({1, 8, N}, DType::f32, MemKind::activations);
    dq = be.alloc({1, N, 8, d}, DType::f32, MemKind::activations);
    dk = be.alloc({1, N, 8, d}, DType::f32, MemKind::activations);
    dv = be.alloc({1, N, 8, d}, DType::f32, MemKind::activations);
    be.attn_fwd(s, q, k, v, pos, pos, o, lse);
    be.attn_bwd_delta(s, o, dout, delta);
    for (Tensor* t : {&dq, &dk, &dv}) be.fill(*t, 0.0f);
  }
};

void BM_attn_fwd(benchmark::State& st) {
  auto be = backend();
  AttnProblem p(*be, st.range(0), int(st.range(1)), st.range(2) != 0, false);
  for (auto _ : st) {
    be->attn_fwd(p.s, p.q, p.k, p.v, p.pos, p.pos, p.o, p.lse);
    benchmark::ClobberMemory();
  }
  set_rate(st, "GFLOP/s", p.fwd_flops * 1e-9);
  set_rate(st, "hw_GFLOP/s", p.fwd_flops * 1e-9);
  add_context(st);
}

void BM_attn_bwd(benchmark::State& st) {
  auto be = backend();
  AttnProblem p(*be, st.range(0), int(st.range(1)), st.range(2) != 0, true);
  for (auto _ : st) {  // accumulates into dq, dk, dv (values only grow linearly)
    be->attn_bwd(p.s, p.q, p.k, p.v, p.dout, p.lse, p.delta, p.pos, p.pos, p.dq, p.dk, p.dv);
    benchmark::ClobberMemory();
  }
  set_rate(st, "GFLOP/s", 2.0 * p.fwd_flops * 1e-9);
  set_rate(st, "hw_GFLOP/s", 2.5 * p.fwd_flops * 1e-9);
  add_context(st);
}

void attn_args(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> ns) {
  b->ArgNames({"N", "d", "causal"});
  for (int64_t n : ns)
    for (int64_t d : {64, 128})
      for (int64_t c : {0, 1}) b->Args({n, d, c});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_attn_fwd)->Apply([](auto* b) { attn_args(b, {1024, 4096}); });
BENCHMARK(BM_attn_bwd)->Apply([](auto* b) { attn_args(b, {1024, 4096}); });
// N = 16384 takes seconds per call: one iteration each.
BENCHMARK(BM_attn_fwd)->Apply([](auto* b) { attn_args(b, {16384}); })->Iterations(1);
BENCHMARK(BM_attn_bwd)->Apply([](auto* b) { attn_args(b, {16384}); })->Iterations(1);

// ---- paired ratios ------------------------------------------------------------------------------
// Every iteration runs the two sgemm baselines and the four attention cases back to back and
// records their rates; the counters are the medians over iterations of the per-iteration ratios
// (the targets of scripts/perf_ratios.py). Interleaving cancels the drift of a shared machine
// that separate benchmark cases, minutes apart, would see.
void BM_attn_vs_sgemm(benchmark::State& st) {
  const int64_t N = st.range(0);
  const int d = int(st.range(1));
  auto be = backend();
  AttnProblem nc(*be, N, d, false, true), ca(*be, N, d, true, true);
  Tensor A = random_tensor(*be, {N, d}, 1), B = random_tensor(*be, {N, d}, 2), C = random_tensor(*be, {N, N}, 3);
  Tensor P = random_tensor(*be, {N, N}, 4), O = random_tensor(*be, {N, d}, 5);
  auto seconds = [](auto&& fn) {
    // Let the idle workers of the previous case go to sleep first (OpenBLAS's spin ~0.1 s after a
    // call, OpenMP's a few ms), so no case pays for its predecessor's thread pool.
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double t0 = now_ms();
    fn();
    return (now_ms() - t0) * 1e-3;
  };
  std::vector<double> r_fwd, r_bwd, r_fc, r_bc;
  for (auto _ : st) {
    const double flops_gemm = 2.0 * double(N) * double(N) * d;
    double t_total = 0;
    const double t_qk = seconds([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(N), int(N), d, 1.0f, A.ptr<float>(), d,
                  B.ptr<float>(), d, 0.0f, C.ptr<float>(), int(N));
    });
    const double t_pv = seconds([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(N), d, int(N), 1.0f, P.ptr<float>(), int(N),
                  B.ptr<float>(), d, 0.0f, O.ptr<float>(), d);
    });
    const double sgemm_rate = 2 * flops_gemm / (t_qk + t_pv);
    const double t_fn = seconds([&] { be->attn_fwd(nc.s, nc.q, nc.k, nc.v, nc.pos, nc.pos, nc.o, nc.lse); });
    const double t_fc = seconds([&] { be->attn_fwd(ca.s, ca.q, ca.k, ca.v, ca.pos, ca.pos, ca.o, ca.lse); });
    const double t_bn = seconds([&] {
      be->attn_bwd(nc.s, nc.q, nc.k, nc.v, nc.dout, nc.lse, nc.delta, nc.pos, nc.pos, nc.dq, nc.dk, nc.dv);
    });
    const double t_bc = seconds([&] {
      be->attn_bwd(ca.s, ca.q, ca.k, ca.v, ca.dout, ca.lse, ca.delta, ca.pos, ca.pos, ca.dq, ca.dk, ca.dv);
    });
    t_total = t_qk + t_pv + t_fn + t_fc + t_bn + t_bc;
    st.SetIterationTime(t_total);
    const double fwd_nc = nc.fwd_flops / t_fn, fwd_c = ca.fwd_flops / t_fc;
    const double bwd_nc = 2 * nc.fwd_flops / t_bn, bwd_c = 2 * ca.fwd_flops / t_bc;
    r_fwd.push_back(fwd_nc / sgemm_rate);
    r_bwd.push_back(bwd_nc / sgemm_rate);
    r_fc.push_back(fwd_c / fwd_nc);
    r_bc.push_back(bwd_c / bwd_nc);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
  };
  st.counters["fwd_over_sgemm"] = median(r_fwd);
  st.counters["bwd_over_sgemm"] = median(r_bwd);
  st.counters["fwd_causal_over_noncausal"] = median(r_fc);
  st.counters["bwd_causal_over_noncausal"] = median(r_bc);
  add_context(st);
}
BENCHMARK(BM_attn_vs_sgemm)
    ->ArgNames({"N", "d"})
    ->Args({4096, 128})
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---- sliding window against causal ----------------------------------------------------------------
// Causal sliding window W against causal full attention at the same N, forward, interleaved as
// above. A window costs O(N*W) only if the tiles outside the band are really skipped: the target
// (issue 11) is t_window / t_causal <= 1.3 * (N*W / (N^2/2)). Counters: window_over_causal (the
// median ratio of times), ideal (N*W / (N^2/2)), over_ideal (their quotient: <= 1.3 passes), and
// pairs_ratio (the exact ratio of visible pairs, for reference).
void BM_attn_window_vs_causal(benchmark::State& st) {
  const int64_t N = st.range(0), W = st.range(1);
  const int d = int(st.range(2));
  auto be = backend();
  AttnProblem ca(*be, N, d, true, false), wi(*be, N, d, true, false, W);
  auto seconds = [](auto&& fn) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // idle thread pools first
    const double t0 = now_ms();
    fn();
    return (now_ms() - t0) * 1e-3;
  };
  std::vector<double> ratio;
  for (auto _ : st) {
    const double t_c = seconds([&] { be->attn_fwd(ca.s, ca.q, ca.k, ca.v, ca.pos, ca.pos, ca.o, ca.lse); });
    const double t_w = seconds([&] { be->attn_fwd(wi.s, wi.q, wi.k, wi.v, wi.pos, wi.pos, wi.o, wi.lse); });
    st.SetIterationTime(t_c + t_w);
    ratio.push_back(t_w / t_c);
  }
  std::sort(ratio.begin(), ratio.end());
  const size_t n = ratio.size();
  const double med = n == 0 ? 0.0 : (n % 2 ? ratio[n / 2] : 0.5 * (ratio[n / 2 - 1] + ratio[n / 2]));
  const double ideal = double(N) * double(W) / (0.5 * double(N) * double(N));
  st.counters["window_over_causal"] = med;
  st.counters["ideal"] = ideal;
  st.counters["over_ideal"] = med / ideal;
  st.counters["pairs_ratio"] = wi.fwd_flops / ca.fwd_flops;
  add_context(st);
}
BENCHMARK(BM_attn_window_vs_causal)
    ->ArgNames({"N", "W", "d"})
    ->Args({16384, 1024, 128})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---- memory-bound kernels -----------------------------------------------------------------------
void BM_rmsnorm_fwd(benchmark::State& st) {
  const int64_t rows = st.range(0), D = st.range(1);
  auto be = backend();
  Tensor x = random_tensor(*be, {rows, D}, 21), w = random_tensor(*be, {D}, 22);
  Tensor y = be->alloc({rows, D}, DType::f32, MemKind::activations), r = be->alloc({rows}, DType::f32, MemKind::activations);
  for (auto _ : st) {
    be->rmsnorm_fwd(x, w, 1e-5f, y, r);
    benchmark::ClobberMemory();
  }
  set_rate(st, "GB/s", 2.0 * rows * D * 4 * 1e-9);  // read x, write y
  add_context(st);
}
BENCHMARK(BM_rmsnorm_fwd)->ArgNames({"rows", "D"})->Args({4096, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_rmsnorm_bwd(benchmark::State& st) {
  const int64_t rows = st.range(0), D = st.range(1);
  auto be = backend();
  Tensor x = random_tensor(*be, {rows, D}, 21), w = random_tensor(*be, {D}, 22), dy = random_tensor(*be, {rows, D}, 23);
  Tensor y = be->alloc({rows, D}, DType::f32, MemKind::activations), r = be->alloc({rows}, DType::f32, MemKind::activations);
  Tensor dx = be->alloc({rows, D}, DType::f32, MemKind::activations), dw = be->alloc({D}, DType::f32, MemKind::activations);
  be->rmsnorm_fwd(x, w, 1e-5f, y, r);
  be->fill(dw, 0.0f);
  for (auto _ : st) {
    be->rmsnorm_bwd(x, w, r, dy, dx, dw);
    benchmark::ClobberMemory();
  }
  set_rate(st, "GB/s", 3.0 * rows * D * 4 * 1e-9);  // read x, dy, write dx
  add_context(st);
}
BENCHMARK(BM_rmsnorm_bwd)->ArgNames({"rows", "D"})->Args({4096, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_rope(benchmark::State& st) {
  const int64_t T = st.range(0);
  const int heads = 8, d = int(st.range(1));
  auto be = backend();
  Tensor x = random_tensor(*be, {1, T, heads * d}, 31);
  const Positions pos = Positions::contiguous(0, T);
  for (auto _ : st) {
    be->rope(x, 1, T, heads, d, int64_t(heads) * d, pos, 10000.0, false);
    benchmark::ClobberMemory();
  }
  set_rate(st, "GB/s", 2.0 * T * heads * d * 4 * 1e-9);  // read and write x
  add_context(st);
}
BENCHMARK(BM_rope)->ArgNames({"T", "d"})->Args({4096, 128})->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_attn_merge(benchmark::State& st) {
  const int64_t N = st.range(0);
  const int d = int(st.range(1));
  AttnShape s;
  s.B = 1;
  s.nq = N;
  s.nk = N;
  s.hq = s.hk = 8;
  s.d = d;
  auto be = backend();
  Tensor oa = random_tensor(*be, {1, N, 8, d}, 41), ob = random_tensor(*be, {1, N, 8, d}, 42);
  Tensor la = random_tensor(*be, {1, 8, N}, 43), lb = random_tensor(*be, {1, 8, N}, 44);
  for (auto _ : st) {
    be->attn_merge(s, oa, la, ob, lb);
    benchmark::ClobberMemory();
  }
  set_rate(st, "GB/s", (3.0 * N * 8 * d + 3.0 * 8 * N) * 4 * 1e-9);  // o_acc r/w, o_blk r; lse likewise
  add_context(st);
}
BENCHMARK(BM_attn_merge)->ArgNames({"N", "d"})->Args({4096, 128})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
