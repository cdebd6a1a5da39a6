// make_backend(): the one place that knows every backend compiled into this build.
#include <stdexcept>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef CPBENCH_HAVE_SIM
#include "kernels/sim/sim_backend.h"
#endif
#ifdef CPBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace cpbench {

std::vector<std::string> available_backends() {
  std::vector<std::string> v{"cpu"};
#ifdef CPBENCH_HAVE_CUDA
  v.push_back("cuda");
#endif
#ifdef CPBENCH_HAVE_SIM
  v.push_back("sim");
#endif
  return v;
}

std::unique_ptr<Backend> make_backend(const BackendOptions& opt) {
  if (opt.name == "cpu") return make_cpu_backend(opt);
#ifdef CPBENCH_HAVE_CUDA
  if (opt.name == "cuda") return make_cuda_backend(opt);
#endif
#ifdef CPBENCH_HAVE_SIM
  if (opt.name == "sim") return make_sim_backend(opt);
#endif
  std::string avail;
  for (const std::string& n : available_backends()) avail += (avail.empty() ? "" : ", ") + n;
  if (opt.name == "cuda")
    throw std::invalid_argument("backend 'cuda' is not compiled into this build (configure with "
                                "CPBENCH_CUDA=ON on a machine with the CUDA toolkit); available: " +
                                avail);
  if (opt.name == "sim")
    throw std::invalid_argument("backend 'sim' exists only in cpbench-sim, the SimGrid build (CPBENCH_SIMGRID); "
                                "run it through scripts/simulate.sh; available here: " + avail);
  throw std::invalid_argument("unknown backend '" + opt.name + "'; available: " + avail);
}

}  // namespace cpbench
