// cpbench_micro's main: Google Benchmark with an optional MPI world. Under mpirun every rank runs
// the benchmarks (the communication ones need all ranks); only rank 0 prints and writes
// --benchmark_out. Our own flag --threads=N (or CPBENCH_THREADS) sets the kernels' thread count.
// On more than one rank the ranks must run the same cases in the same order (micro_mpi.h):
// --benchmark_enable_random_interleaving is refused there (Google Benchmark shuffles with a
// per-process random seed we cannot set), and a final agreement catches a rank left behind.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/micro/micro_mpi.h"

#ifdef CPBENCH_HAVE_MPI
#include "comm/world.h"
#endif

namespace cpbench::micro {

namespace {
int g_threads = 0;

// Swallows everything (ranks other than 0).
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};
}  // namespace

// Threads for the kernels under test: --threads=N, else CPBENCH_THREADS, else every hardware thread.
int threads() { return g_threads; }

void agree_on_case(const char* case_name, int64_t arg) {
#ifdef CPBENCH_HAVE_MPI
  World& w = World::get();
  if (w.size() == 1) return;
  const std::string name = std::string(case_name) + "/" + std::to_string(arg);
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  h >>= 11;  // 53 bits: exact in the double the world's allreduce carries
  std::vector<double> lo = {double(h)}, hi = {double(h)};
  w.allreduce_min(lo);
  w.allreduce_max(hi);
  if (lo[0] != hi[0]) {
    std::fprintf(stderr,
                 "cpbench_micro: error (rank %d of %d): reached case %s while another rank reached a different "
                 "case; every rank must run the same cases in the same order (the same --benchmark_filter on "
                 "every rank, no random interleaving)\n",
                 w.rank(), w.size(), name.c_str());
    std::fflush(stderr);
    // Every rank saw the same min and max, so every rank is here: let all print before the abort.
    w.barrier();
    w.abort(2);
  }
#else
  (void)case_name;
  (void)arg;
#endif
}

namespace {
// Google Benchmark's reading of a boolean flag value: false when it starts with 0, f, n (any case).
bool flag_true(const char* v) {
  return v == nullptr || *v == '\0' || std::strchr("0fFnN", *v) == nullptr;
}
}  // namespace

}  // namespace cpbench::micro

int main(int argc, char** argv) {
  bool root = true;
#ifdef CPBENCH_HAVE_MPI
  cpbench::World& world = cpbench::World::init(&argc, &argv);
  root = world.rank() == 0;
#endif
  // Take --threads=N out of argv before Google Benchmark sees it.
  int threads = 0;
  bool has_out = false, interleave = false;
  if (const char* e = std::getenv("BENCHMARK_ENABLE_RANDOM_INTERLEAVING")) interleave = cpbench::micro::flag_true(e);
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
      continue;
    }
    if (std::strncmp(argv[i], "--benchmark_out=", 16) == 0) has_out = true;
    if (std::strcmp(argv[i], "--benchmark_enable_random_interleaving") == 0) interleave = true;
    if (std::strncmp(argv[i], "--benchmark_enable_random_interleaving=", 39) == 0)
      interleave = cpbench::micro::flag_true(argv[i] + 39);
    argv[kept++] = argv[i];
  }
  argc = kept;
  if (threads <= 0)
    if (const char* e = std::getenv("CPBENCH_THREADS")) threads = std::atoi(e);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpbench::micro::g_threads = threads;
  benchmark::AddCustomContext("cpbench_threads", std::to_string(threads));

#ifdef CPBENCH_HAVE_MPI
  // Decided together: a rank started with other flags (mpirun MPMD) must not go on alone.
  std::vector<double> any_interleave = {interleave ? 1.0 : 0.0};
  world.allreduce_max(any_interleave);
  if (any_interleave[0] > 0 && world.size() > 1) {
    std::fprintf(stderr,
                 "cpbench_micro: error (rank %d of %d): --benchmark_enable_random_interleaving shuffles the cases "
                 "differently on each rank, which would meet in different collectives; run it on one rank only\n",
                 world.rank(), world.size());
    world.finalize();
    return 2;
  }
#endif
  benchmark::Initialize(&argc, argv);
  int rc = 0;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    rc = 1;
  } else if (root) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    cpbench::micro::NullReporter null_display, null_file;
    if (has_out)
      benchmark::RunSpecifiedBenchmarks(&null_display, &null_file);
    else
      benchmark::RunSpecifiedBenchmarks(&null_display);
  }
  benchmark::Shutdown();
  // A rank that ran fewer communication cases waits in one of them: meet it here and abort.
  cpbench::micro::agree_on_case("<end of cases>", 0);
#ifdef CPBENCH_HAVE_MPI
  world.finalize();
#endif
  return rc;
}
