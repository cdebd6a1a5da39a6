// Counts of the NCCL communicator's operations in this process: which went through NCCL and which
// were done without it (a local copy), so a report can say what a run exercised (issue 10: the
// one-rank NCCL mode). Plain data, no NCCL or MPI: the report code and its tests include it in
// any build.
#pragma once
#include <cstdint>

namespace cpbench {

struct NcclOpCounts {
  int64_t all_to_all = 0, all_gather = 0, reduce_scatter = 0, send = 0, recv = 0, barrier = 0;
};

// Through NCCL (the NcclOpCounts base: the fields at the top level) and local (`local`): each call is
// counted once, on one side. Local: every operation of a group of one rank without
// CPBENCH_NCCL_ONE_RANK (a device copy; a barrier does nothing), and isend/irecv pairs to the rank
// itself (matched and copied locally; through NCCL in one-rank mode). The own chunk of a
// multi-rank all_to_all is always copied locally; the call counts as through NCCL. Transfers of
// zero bytes are counted nowhere.
struct NcclCallCounts : NcclOpCounts {
  bool one_rank_mode = false;  // some one-rank group used a real NCCL communicator
  int64_t communicators = 0;   // NCCL communicators created (ncclCommInitRank)
  NcclOpCounts local;
};

}  // namespace cpbench
