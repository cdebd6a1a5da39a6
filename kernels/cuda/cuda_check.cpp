// The CUDA error layer (see cuda_check.h).
#include "kernels/cuda/cuda_check.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>

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

}  // namespace cpbench
