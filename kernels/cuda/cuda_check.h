// The CUDA error layer: CUDA_CHECK / CUBLAS_CHECK (and NCCL_CHECK in comm/nccl_communicator.cpp)
// turn a failed call into a std::runtime_error naming the call, file:line, host and rank. Nothing
// here exits: the driver catches, prints once and aborts every rank (DESIGN, STYLE #5).
#pragma once
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace cpbench {

// "host <name> rank <r>" for error messages. The rank is the one set with set_error_rank, else
// the launcher's environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID), else "?".
std::string error_context();
void set_error_rank(int rank);

// Throws std::runtime_error("<lib> error at file:line (host h rank r): <expr> -> <msg>").
[[noreturn]] void throw_gpu_error(const char* lib, const char* expr, const char* file, int line,
                                  const std::string& msg);
const char* cublas_status_string(cublasStatus_t s);

namespace cuda {
// The bound on one host wait for the device, in seconds: the same as NCCL's host waits
// (comm/nccl_communicator.cpp), CPBENCH_NCCL_TIMEOUT_S, which cpbench sets from --timeout;
// default 600, 0 = none. Throws std::invalid_argument naming the value if it is not a number >= 0.
double host_wait_timeout_s();

// Polls `query` (cudaStreamQuery / cudaEventQuery of what to wait for) until it stops answering
// cudaErrorNotReady. Another error throws as CUDA_CHECK does; past timeout_s (> 0) it throws
// std::runtime_error("cuda <what>: the device did not finish within <t> s ..."), so a hung kernel,
// or a stream waiting on a hung communicator, ends in an error naming the call instead of
// blocking the rank for ever. Spins (yielding) for the first 2 ms, so short waits add no sleep
// latency, then sleeps 20 us doubling to 1 ms.
void wait_bounded(const std::function<cudaError_t()>& query, double timeout_s, const char* what);
}  // namespace cuda

}  // namespace cpbench

#define CUDA_CHECK(expr)                                                                        \
  do {                                                                                          \
    const cudaError_t cuda_check_e_ = (expr);                                                   \
    if (cuda_check_e_ != cudaSuccess)                                                           \
      ::cpbench::throw_gpu_error("CUDA", #expr, __FILE__, __LINE__,                             \
                                 std::string(cudaGetErrorName(cuda_check_e_)) + ": " +          \
                                     cudaGetErrorString(cuda_check_e_));                        \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                          \
    const cublasStatus_t cublas_check_s_ = (expr);                                              \
    if (cublas_check_s_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::cpbench::throw_gpu_error("cuBLAS", #expr, __FILE__, __LINE__,                           \
                                 ::cpbench::cublas_status_string(cublas_check_s_));             \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
