// cpbench_micro's main: Google Benchmark with an optional MPI world. Under mpirun every rank runs
// the benchmarks (the communication ones need all ranks); only rank 0 prints and writes
// --benchmark_out. Our own flag --threads=N (or CPBENCH_THREADS) sets the kernels' thread count.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

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

}  // namespace cpbench::micro

int main(int argc, char** argv) {
  bool root = true;
#ifdef CPBENCH_HAVE_MPI
  cpbench::World& world = cpbench::World::init(&argc, &argv);
  root = world.rank() == 0;
#endif
  // Take --threads=N out of argv before Google Benchmark sees it.
  int threads = 0;
  bool has_out = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
      continue;
    }
    if (std::strncmp(argv[i], "--benchmark_out=", 16) == 0) has_out = true;
    argv[kept++] = argv[i];
  }
  argc = kept;
  if (threads <= 0)
    if (const char* e = std::getenv("CPBENCH_THREADS")) threads = std::atoi(e);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpbench::micro::g_threads = threads;
  benchmark::AddCustomContext("cpbench_threads", std::to_string(threads));

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
#ifdef CPBENCH_HAVE_MPI
  world.finalize();
#endif
  return rc;
}
