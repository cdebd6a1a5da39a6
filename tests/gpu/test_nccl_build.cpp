// The NCCL communicator is compiled and linked into cpbench_comm (registered only when configure
// found NCCL and MPI). Without a GPU no communicator can be made; what can be checked is the
// process-wide call accounting that a report would show: nothing went through NCCL yet.
#include <catch2/catch.hpp>

#include <string>

#include "comm/nccl_communicator.h"

TEST_CASE("NCCL communicator is built in and has made no NCCL call", "[nccl]") {
#ifndef CPBENCH_HAVE_NCCL
  FAIL("CPBENCH_HAVE_NCCL is not defined although configure found NCCL");
#endif
  const cpbench::NcclCallCounts c = cpbench::nccl_call_counts();
  CHECK_FALSE(c.one_rank_mode);
  CHECK(c.all_to_all + c.all_gather + c.reduce_scatter + c.send + c.recv + c.barrier == 0);
  CHECK(cpbench::nccl_call_summary() ==
        "NCCL calls: all_to_all 0, all_gather 0, reduce_scatter 0, send 0, recv 0, barrier 0");
}
