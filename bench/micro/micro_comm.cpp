// Communication micro-benchmarks: the comm layer against raw MPI on the same data.
//
//   BM_CommAlltoallRaw/<MiB>       MPI_Alltoall on buffers already packed per destination
//   BM_CommAlltoallLayer/<MiB>     Communicator::all_to_all on the same packed buffers (the layer's
//                                  own cost: checks, record, no copies on CPU)
//   BM_CommAlltoallUlysses/<MiB>   the Ulysses tokens->heads step through the comm layer, layout
//                                  change included: pack x [T, H, d] into per-destination chunks
//                                  [P][T, H/P, d], all_to_all, unpack into [P*T, H/P, d]
//   BM_CommAlltoallUlyssesW/<MiB>  the same Ulysses step, paired with raw MPI doing the same layout
//                                  change itself: MPI_Alltoallw with a strided vector datatype per
//                                  destination reading x in place and writing `out` in place (the
//                                  best raw MPI can do without hand-written copies)
//   BM_CommRingShiftRaw/<MiB>      MPI_Sendrecv: send to rank+1, receive from rank-1
//   BM_CommRingShiftLayer/<MiB>    isend / irecv / wait through the comm layer (comm thread)
//   BM_GemmDuringRingShift/<MiB>   overlap interference (docs/SIMULATION.md): a 512^3 fp32 GEMM on
//                                  one thread alone, and again while the comm layer's ring shift of
//                                  <MiB> is in flight (posted before, waited after); the same shift
//                                  alone. Counters: gemm_slowdown = median GEMM time during / alone
//                                  - 1 (scripts/calibrate_platform.py writes it into local.json),
//                                  shift_slowdown the same for the shift (compute slowing the
//                                  communication), shift_over_gemm = shift alone / GEMM alone (> 1:
//                                  the GEMM runs wholly under the transfer).
//
// <MiB> is the send volume per rank. Every iteration: barrier, time the operation on each rank,
// take the maximum over ranks (MPI_Allreduce MAX) and report it with SetIterationTime, so all
// ranks report the same time and make the same iteration-count decisions (manual time is the only
// input to them). Counters (nccl-tests conventions, GB = 1e9 bytes): algbw_GBps = bytes per rank /
// mean time; busbw_GBps = algbw * (P-1)/P for all-to-all, = algbw for the ring shift; p50_ms.
//
// Paired baseline: the comm-layer cases also time their raw-MPI counterpart in every iteration
// (same buffers, alternating which goes first; not part of the reported time) and report
// raw_p50_ms and ratio_vs_raw = raw_p50 / p50 (1.0 = no overhead). Interleaved pairs cancel the
// drift of a shared machine that separate benchmark cases, minutes apart, would see.
// scripts/comm_ratios.py prints these ratios.
//
// NOTE: needs World::init before the benchmarks run (micro_main.cpp does it); all ranks must run
// the same benchmark filter (each case checks it: micro_mpi.h).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <type_traits>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/world.h"
#include "kernels/backend.h"
#include "bench/micro/micro_mpi.h"

namespace {

using namespace cpbench;

constexpr int kHeads = 32;     // H: divisible by P for P in {1, 2, 4, 8, 16, 32}
constexpr int kHeadDim = 128;  // d: one token of x is H*d*4 = 16 KiB

// One communicator over all ranks plus a duplicate of MPI_COMM_WORLD for the raw calls and the
// timing reductions. Created on first use (collective: every rank runs the same benchmarks) and
// kept for the life of the process.
struct CommEnv {
  std::unique_ptr<Backend> be;
  CommLog log;
  std::unique_ptr<Communicator> comm;
  MPI_Comm raw = MPI_COMM_NULL;
  int P = 1, rank = 0;
};

CommEnv& env() {
  static CommEnv* e = [] {
    auto* c = new CommEnv();
    World& w = World::get();
    c->P = w.size();
    c->rank = w.rank();
    c->be = make_backend(BackendOptions{});
    std::vector<int> all(static_cast<size_t>(c->P));
    std::iota(all.begin(), all.end(), 0);
    c->comm = w.make_group(all, "cp", c->log, *c->be, "mpi");
    MPI_Comm_dup(MPI_COMM_WORLD, &c->raw);
    return c;
  }();
  return *e;
}

Tensor filled(Backend& be, int64_t n, float base) {
  Tensor t = be.alloc({n}, DType::f32, MemKind::comm);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = base + static_cast<float>(i % 4096);
  be.upload(v, t);  // touches every page before timing
  return t;
}

int64_t mib_bytes(const benchmark::State& st) { return st.range(0) << 20; }

// Seconds `op` takes on the slowest rank, all ranks starting together.
template <class Op>
double time_max_over_ranks(MPI_Comm comm, Op& op) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  op();
  double dt = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm);
  return dt;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct NoBaseline {
  void operator()() const {}
};

// Runs `op` (and `baseline`, when given) once untimed, then once per iteration, reporting the
// max-over-ranks time of `op`; sets the bandwidth counters and, with a baseline, the paired ratio.
template <class Op, class Base = NoBaseline>
void timed_loop(benchmark::State& st, int64_t bytes, double bus_factor, Op&& op, Base&& baseline = Base{}) {
  constexpr bool paired = !std::is_same<std::decay_t<Base>, NoBaseline>::value;
  CommEnv& e = env();
  op();  // warm-up: first touch of MPI's internal buffers, connection set-up
  if (paired) baseline();
  std::vector<double> t_op, t_base;
  bool base_first = false;
  for (auto _ : st) {
    if (paired && base_first) t_base.push_back(time_max_over_ranks(e.raw, baseline));
    const double dt = time_max_over_ranks(e.raw, op);
    if (paired && !base_first) t_base.push_back(time_max_over_ranks(e.raw, baseline));
    base_first = !base_first;
    st.SetIterationTime(dt);
    t_op.push_back(dt);
  }
  e.log.clear();
  if (t_op.empty()) return;
  const double mean = std::accumulate(t_op.begin(), t_op.end(), 0.0) / static_cast<double>(t_op.size());
  const double algbw = static_cast<double>(bytes) / mean / 1e9;
  st.counters["algbw_GBps"] = algbw;
  st.counters["busbw_GBps"] = algbw * bus_factor;
  st.counters["p50_ms"] = median(t_op) * 1e3;
  st.counters["bytes_per_rank"] = static_cast<double>(bytes);
  st.counters["ranks"] = e.P;
  if (paired) {
    st.counters["raw_p50_ms"] = median(t_base) * 1e3;
    st.counters["ratio_vs_raw"] = median(t_base) / median(t_op);
  }
}

// Tokens per rank for a send volume of `bytes`; 0 (and the state skipped) when H % P != 0.
int64_t tokens_for(benchmark::State& st, int64_t bytes) {
  const int P = env().P;
  if (kHeads % P != 0) {
    st.SkipWithError(("H=" + std::to_string(kHeads) + " is not divisible by P=" + std::to_string(P)).c_str());
    return 0;
  }
  return bytes / (int64_t(kHeads) * kHeadDim * 4);
}

void BM_CommAlltoallRaw(benchmark::State& st) {
  CPBENCH_MICRO_SAME_CASE(st);  // before any collective: ranks must be in the same case
  CommEnv& e = env();
  const int64_t bytes = mib_bytes(st);
  const int64_t T = tokens_for(st, bytes);
  if (T == 0) return;
  const int64_t n = T * kHeads * kHeadDim;
  Tensor send = filled(*e.be, n, float(e.rank)), recv = filled(*e.be, n, -1.f);
  const int chunk = static_cast<int>(bytes / e.P);
  timed_loop(st, bytes, double(e.P - 1) / e.P, [&] {
    MPI_Alltoall(send.data, chunk, MPI_BYTE, recv.data, chunk, MPI_BYTE, e.raw);
  });
}

void BM_CommAlltoallLayer(benchmark::State& st) {
  CPBENCH_MICRO_SAME_CASE(st);  // before any collective: ranks must be in the same case
  CommEnv& e = env();
  const int64_t bytes = mib_bytes(st);
  const int64_t T = tokens_for(st, bytes);
  if (T == 0) return;
  const int64_t n = T * kHeads * kHeadDim;
  Tensor send = filled(*e.be, n, float(e.rank)), recv = filled(*e.be, n, -1.f);
  const int chunk = static_cast<int>(bytes / e.P);
  timed_loop(
      st, bytes, double(e.P - 1) / e.P, [&] { e.comm->all_to_all(send, recv); },
      [&] { MPI_Alltoall(send.data, chunk, MPI_BYTE, recv.data, chunk, MPI_BYTE, e.raw); });
}

// The Ulysses tokens->heads step through the comm layer: pack head block j of every token of
// x [T, H, d] (row pitch hd) into chunk j of send, all_to_all, and place the chunks, which hold
// tokens [j*T, (j+1)*T) of the sequence, in order into out [P*T, H/P, d] (a strategy unpacks into
// its own q/k/v tensors). Returns the pack and unpack times of this rank.
std::pair<double, double> ulysses_layer_step(Backend& be, Communicator& comm, const Tensor& x, Tensor& send,
                                             Tensor& recv, Tensor& out, int64_t T, int64_t hd, int P) {
  const int64_t w = hd / P;
  const double t0 = MPI_Wtime();
  for (int j = 0; j < P; ++j) {
    Tensor dst = send.view(j * T * w, {T * w});
    be.copy_2d(dst, w, x.view(j * w, {x.numel() - j * w}), hd, T, w);
  }
  const double t1 = MPI_Wtime();
  comm.all_to_all(send, recv);
  const double t2 = MPI_Wtime();
  be.copy_2d(out, w, recv, w, int64_t(P) * T, w);
  return {t1 - t0, MPI_Wtime() - t2};
}

void BM_CommAlltoallUlysses(benchmark::State& st) {
  CPBENCH_MICRO_SAME_CASE(st);  // before any collective: ranks must be in the same case
  CommEnv& e = env();
  Backend& be = *e.be;
  const int64_t bytes = mib_bytes(st);
  const int64_t T = tokens_for(st, bytes);
  if (T == 0) return;
  const int P = e.P;
  const int64_t hd = int64_t(kHeads) * kHeadDim;  // row pitch of x
  Tensor x = filled(be, T * hd, float(e.rank));   // [T, H, d]
  Tensor send = filled(be, T * hd, 0.f);          // [P][T, H/P, d]
  Tensor recv = filled(be, T * hd, 0.f);          // [P][T, H/P, d] = [P*T, H/P, d] by source
  Tensor out = filled(be, T * hd, 0.f);           // [P*T, H/P, d]: the sequence for my heads
  const int chunk = static_cast<int>(bytes / P);
  std::vector<double> t_pack, t_unpack;  // this rank's layout copies, for the breakdown
  timed_loop(
      st, bytes, double(P - 1) / P,
      [&] {
        const auto [pack, unpack] = ulysses_layer_step(be, *e.comm, x, send, recv, out, T, hd, P);
        t_pack.push_back(pack);
        t_unpack.push_back(unpack);
      },
      [&] { MPI_Alltoall(send.data, chunk, MPI_BYTE, recv.data, chunk, MPI_BYTE, e.raw); });
  st.counters["pack_p50_ms"] = median(t_pack) * 1e3;
  st.counters["unpack_p50_ms"] = median(t_unpack) * 1e3;
}

void BM_CommAlltoallUlyssesW(benchmark::State& st) {
  CPBENCH_MICRO_SAME_CASE(st);  // before any collective: ranks must be in the same case
  CommEnv& e = env();
  Backend& be = *e.be;
  const int64_t bytes = mib_bytes(st);
  const int64_t T = tokens_for(st, bytes);
  if (T == 0) return;
  const int P = e.P;
  const int64_t hd = int64_t(kHeads) * kHeadDim, w = hd / P;
  Tensor x = filled(be, T * hd, float(e.rank));  // [T, H, d]
  Tensor send = filled(be, T * hd, 0.f), recv = filled(be, T * hd, 0.f);
  Tensor out = filled(be, T * hd, 0.f), out_raw = filled(be, T * hd, 0.f);  // [P*T, H/P, d]
  // Raw MPI: destination j gets T rows of w floats at stride hd, starting at column j*w of x;
  // source j's chunk lands contiguously at rows [j*T, (j+1)*T) of out_raw.
  MPI_Datatype rows;
  MPI_Type_vector(int(T), int(w), int(hd), MPI_FLOAT, &rows);
  MPI_Type_commit(&rows);
  MPI_Datatype chunk;
  MPI_Type_contiguous(int(T * w), MPI_FLOAT, &chunk);
  MPI_Type_commit(&chunk);
  std::vector<int> counts(P, 1), sdispl(P), rdispl(P);
  std::vector<MPI_Datatype> stypes(P, rows), rtypes(P, chunk);
  for (int j = 0; j < P; ++j) {
    sdispl[j] = int(j * w * 4);
    rdispl[j] = int(j * T * w * 4);
  }
  timed_loop(
      st, bytes, double(P - 1) / P,
      [&] { ulysses_layer_step(be, *e.comm, x, send, recv, out, T, hd, P); },
      [&] {
        MPI_Alltoallw(x.data, counts.data(), sdispl.data(), stypes.data(), out_raw.data, counts.data(),
                      rdispl.data(), rtypes.data(), e.raw);
      });
  // Both paths must produce the same sequence for my heads.
  if (be.download(out) != be.download(out_raw)) st.SkipWithError("Alltoallw and the comm layer disagree");
  MPI_Type_free(&rows);
  MPI_Type_free(&chunk);
}

void BM_CommRingShiftRaw(benchmark::State& st) {
  CPBENCH_MICRO_SAME_CASE(st);  // before any collective: ranks must be in the same case
  CommEnv& e = env();
  const int64_t bytes = mib_bytes(st);
  const int64_t n = bytes / 4;
  Tensor send = filled(*e.be, n, float(e.rank)), recv = filled(*e.be, n, -1.f);
  const int next = (e.rank + 1) % e.P, prev = (e.rank + e.P - 1) % e.P;
  timed_loop(st, bytes, 1.0, [&] {
    MPI_Sendrecv(send.data, static_cast<int>(bytes), MPI_BYTE, next, 7, recv.data, static_cast<int>(bytes),
                 MPI_BYTE, prev, 7, e.raw, MPI_STATUS_IGNORE);
  });
}

void BM_CommRingShiftLayer(benchmark::State& st) {
  CPBENCH_MICRO_SAME_CASE(st);  // before any collective: ranks must be in the same case
  CommEnv& e = env();
  const int64_t bytes = mib_bytes(st);
  const int64_t n = bytes / 4;
  Tensor send = filled(*e.be, n, float(e.rank)), recv = filled(*e.be, n, -1.f);
  const int next = (e.rank + 1) % e.P, prev = (e.rank + e.P - 1) % e.P;
  timed_loop(
      st, bytes, 1.0,
      [&] {
        Request r = e.comm->irecv(recv, prev, 7);
        Request s = e.comm->isend(send, next, 7);
        e.comm->wait(r);
        e.comm->wait(s);
      },
      [&] {
        MPI_Sendrecv(send.data, static_cast<int>(bytes), MPI_BYTE, next, 7, recv.data, static_cast<int>(bytes),
                     MPI_BYTE, prev, 7, e.raw, MPI_STATUS_IGNORE);
      });
}

void BM_GemmDuringRingShift(benchmark::State& st) {
  CPBENCH_MICRO_SAME_CASE(st);
  CommEnv& e = env();
  const int64_t bytes = mib_bytes(st), n = bytes / 4, m = 512;
  Tensor send = filled(*e.be, n, float(e.rank)), recv = filled(*e.be, n, -1.f);
  Tensor A = filled(*e.be, m * m, 0.5f), B = filled(*e.be, m * m, 0.25f), C = filled(*e.be, m * m, 0.f);
  const int next = (e.rank + 1) % e.P, prev = (e.rank + e.P - 1) % e.P;
  auto gemm = [&] {
    e.be->gemm(false, false, m, m, m, 1.0f, A, m, B, m, 0.0f, C, m);
    e.be->synchronize();
  };
  auto seconds = [](auto&& f) {
    const double t0 = MPI_Wtime();
    f();
    return MPI_Wtime() - t0;
  };
  std::vector<double> g_alone, g_during, s_alone, s_during;
  gemm();
  for (auto _ : st) {
    MPI_Barrier(e.raw);
    g_alone.push_back(seconds(gemm));
    MPI_Barrier(e.raw);
    s_alone.push_back(seconds([&] {
      Request r = e.comm->irecv(recv, prev, 9);
      Request s = e.comm->isend(send, next, 9);
      e.comm->wait(r);
      e.comm->wait(s);
    }));
    MPI_Barrier(e.raw);
    double g = 0;
    s_during.push_back(seconds([&] {
      Request r = e.comm->irecv(recv, prev, 9);
      Request s = e.comm->isend(send, next, 9);
      g = seconds(gemm);
      e.comm->wait(r);
      e.comm->wait(s);
    }));
    g_during.push_back(g);
    st.SetIterationTime(g);
  }
  e.log.clear();
  if (g_alone.empty()) return;
  st.counters["gemm_alone_ms"] = median(g_alone) * 1e3;
  st.counters["gemm_during_ms"] = median(g_during) * 1e3;
  st.counters["gemm_slowdown"] = median(g_during) / median(g_alone) - 1;
  st.counters["shift_slowdown"] = median(s_during) / median(s_alone) - 1;
  st.counters["shift_over_gemm"] = median(s_alone) / median(g_alone);
}
BENCHMARK(BM_GemmDuringRingShift)->Arg(64)->ArgName("MiB")->Iterations(15)->UseManualTime()->Unit(benchmark::kMillisecond);

#define CPBENCH_COMM_SIZES ->Arg(1)->Arg(4)->Arg(16)->Arg(64)->ArgName("MiB")->UseManualTime()->Unit(benchmark::kMillisecond)
BENCHMARK(BM_CommAlltoallRaw) CPBENCH_COMM_SIZES;
BENCHMARK(BM_CommAlltoallLayer) CPBENCH_COMM_SIZES;
BENCHMARK(BM_CommAlltoallUlysses) CPBENCH_COMM_SIZES;
BENCHMARK(BM_CommAlltoallUlyssesW) CPBENCH_COMM_SIZES;
BENCHMARK(BM_CommRingShiftRaw) CPBENCH_COMM_SIZES;
BENCHMARK(BM_CommRingShiftLayer) CPBENCH_COMM_SIZES;
#undef CPBENCH_COMM_SIZES

}  // namespace
