// nccl_one_rank_check: the NCCL communicator on ONE GPU (CPBENCH_NCCL_ONE_RANK=1), operation by
// operation, with values checked: all_to_all, all_gather, reduce_scatter in fp32 and in bf16/fp16
// (the fp32 staging), isend/irecv to self, barrier; then that every one of them went through
// NCCL (nccl_call_counts) and that a bad CPBENCH_NCCL_TIMEOUT_S is refused. Run by
// scripts/gpu_check.sh (step nccl_ops) and by ctest; without a CUDA device it prints
// "SKIPPED: no CUDA device" and exits 77 (ctest's SKIP_RETURN_CODE: reported as skipped, never
// passed). Exit status: 0 passed, 1 a check failed, 77 skipped (no device).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/nccl_communicator.h"
#include "comm/world.h"
#include "kernels/cuda/cuda_backend.h"

using namespace cpbench;

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Values exact in bf16 and fp16 (small integers and halves), so every comparison is exact.
std::vector<float> pattern(int64_t n, float base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = base + 0.5f * float(i % 64);
  return v;
}

void check_ops(Backend& be, Communicator& c, DType t) {
  const std::string dt = dtype_name(t);
  const int64_t n = 1000;
  const std::vector<float> a = pattern(n, 1.0f), b = pattern(n, -3.0f);
  Tensor s = be.alloc({n}, t, MemKind::comm), r = be.alloc({n}, t, MemKind::comm);
  be.upload(a, s);

  be.fill(r, -1.0f);
  c.all_to_all(s, r);
  be.synchronize();
  expect(be.download(r) == a, "all_to_all " + dt);

  be.fill(r, -1.0f);
  c.all_gather(s, r);
  be.synchronize();
  expect(be.download(r) == a, "all_gather " + dt);

  be.fill(r, -1.0f);
  c.reduce_scatter(s, r);  // one rank: the sum of one term, exact through the fp32 staging
  be.synchronize();
  expect(be.download(r) == a, "reduce_scatter " + dt);

  Tensor s2 = be.alloc({n}, t, MemKind::comm), r2 = be.alloc({n}, t, MemKind::comm);
  be.upload(b, s2);
  be.fill(r, -1.0f);
  be.fill(r2, -1.0f);
  // Two messages to self in flight at once, matched in issue order.
  Request q1 = c.irecv(r, 0, 1), q2 = c.irecv(r2, 0, 2);
  Request p1 = c.isend(s, 0, 1), p2 = c.isend(s2, 0, 2);
  c.wait(q1);
  c.wait(q2);
  c.wait(p1);
  c.wait(p2);
  be.synchronize();
  expect(be.download(r) == a && be.download(r2) == b, "isend/irecv to self " + dt);

  c.barrier();
  expect(true, "barrier " + dt);
}

}  // namespace

int main(int argc, char** argv) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("SKIPPED: no CUDA device (exit 77)\n");
    return 77;
  }
  World& w = World::init(&argc, &argv);
  if (w.size() != 1) {
    std::fprintf(stderr, "nccl_one_rank_check: run it on one rank (got %d)\n", w.size());
    w.abort(1);
  }
  try {
    BackendOptions bo;
    bo.name = "cuda";
    auto be = make_cuda_backend(bo);
    CommLog log;

    setenv("CPBENCH_NCCL_TIMEOUT_S", "soon", 1);
    bool refused = false;
    try {
      auto bad = w.make_group({0}, "bad", log, *be, "nccl");
    } catch (const std::invalid_argument& e) {
      refused = std::string(e.what()).find("CPBENCH_NCCL_TIMEOUT_S") != std::string::npos;
    }
    expect(refused, "CPBENCH_NCCL_TIMEOUT_S=soon is refused, naming the variable");
    setenv("CPBENCH_NCCL_TIMEOUT_S", "60", 1);

    setenv("CPBENCH_NCCL_ONE_RANK", "1", 1);
    {
      auto c = w.make_group({0}, "one", log, *be, "nccl");
      for (DType t : {DType::f32, DType::bf16, DType::f16}) check_ops(*be, *c, t);
    }
    const NcclCallCounts n = nccl_call_counts();
    std::printf("%s\n", nccl_call_summary().c_str());
    expect(n.one_rank_mode, "one-rank NCCL mode was on");
    expect(n.all_to_all == 3 && n.all_gather == 3 && n.reduce_scatter == 3,
           "every collective went through NCCL (3 dtypes)");
    expect(n.send == 6 && n.recv == 6, "every self send/recv went through NCCL");
    expect(n.barrier == 3, "every barrier went through NCCL");
    expect(n.communicators == 1, "one NCCL communicator was created");
    expect(n.local.all_to_all == 0 && n.local.all_gather == 0 && n.local.reduce_scatter == 0 &&
               n.local.send == 0 && n.local.recv == 0 && n.local.barrier == 0,
           "nothing was done locally (context.nccl.calls_local all zero)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_one_rank_check: %s\n", e.what());
    ++failures;
  }
  std::printf("nccl_one_rank_check: %s (%d failed)\n", failures ? "FAILED" : "passed", failures);
  w.finalize();
  return failures ? 1 : 0;
}
