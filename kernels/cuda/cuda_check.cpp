// The CUDA error layer (see cuda_check.h).
#include "kernels/cuda/cuda_check.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace cpbench {
namespace {
std::atomic<int> g_rank{-1};

std::string env_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v); s && *s) return s;
  return "?";
}
}  // namespace

void set_error_rank(int rank) { g_rank.store(rank); }

std::string error_context() {
  char host[256] = "?";
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '?', host[1] = '\0';
  host[sizeof(host) - 1] = '\0';
  const int r = g_rank.load();
  return std::string("host ") + host + " rank " + (r >= 0 ? std::to_string(r) : env_rank());
}

void throw_gpu_error(const char* lib, const char* expr, const char* file, int line,
                     const std::string& msg) {
  throw std::runtime_error(std::string(lib) + " error at " + file + ":" + std::to_string(line) +
                           " (" + error_context() + "): " + expr + " -> " + msg);
}

const char* cublas_status_string(cublasStatus_t s) { return cublasGetStatusString(s); }

namespace cuda {

double host_wait_timeout_s() {
  const char* v = std::getenv("CPBENCH_NCCL_TIMEOUT_S");
  if (!v || !*v) return 600.0;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(t >= 0))
    throw std::invalid_argument(std::string("CPBENCH_NCCL_TIMEOUT_S must be a number of seconds >= 0, got '") +
                                v + "'");
  return t;
}

void wait_bounded(const std::function<cudaError_t()>& query, double timeout_s, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    const cudaError_t q = query();
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) CUDA_CHECK(q);  // throws, naming the error
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (timeout_s > 0 && waited > timeout_s) {
      std::ostringstream os;
      os << "cuda " << what << ": the device did not finish within " << timeout_s
         << " s (CPBENCH_NCCL_TIMEOUT_S, set by --timeout): a hung kernel, or a stream waiting on a "
            "hung communicator ("
         << error_context() << ")";
      throw std::runtime_error(os.str());
    }
    if (waited < 2e-3) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

}  // namespace cuda

}  // namespace cpbench
