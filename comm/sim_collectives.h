// cpbench-sim's side of the MPI communicator (comm/mpi_communicator.cpp): the three collectives
// the strategies use, run as NCCL runs them over point-to-point messages, with the platform's
// collective costs on the rank's deferred clock (kernels/tensor.h), and SMPI's receive count.
//
// Compiled into the SimGrid sub-build only (comm/CMakeLists.txt). The communicator takes these
// paths under `if constexpr (kSimulatedMpi)`, so in the normal build the calls sit in discarded
// statements: they are still type-checked there, but need no definition.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <vector>

namespace cpbench {

class CommLog;

// True in cpbench-sim (CPBENCH_SIMULATED, cmake/simgrid.cmake): the one switch between the
// communicator's MPI paths and the simulated ones below.
#ifdef CPBENCH_SIMULATED
inline constexpr bool kSimulatedMpi = true;
#else
inline constexpr bool kSimulatedMpi = false;
#endif

// The communicator's group as a simulated collective needs it: the MPI communicator, this rank
// and the size in it, and where the members live (the world ranks of the members in group-rank
// order and the log's node map) to tell whether the group lies within one node.
struct SimGroup {
  MPI_Comm comm;
  int rank, size;
  const std::vector<int>& world_ranks;
  const CommLog& log;
};

// One block of a collective as MPI counts it: `count` elements of `type` (the communicator's
// ByteSpan, which keeps counts past INT_MAX expressible) making `bytes` bytes.
struct SimBlock {
  size_t bytes;
  MPI_Datatype type;
  int count;
};

// NCCL's all-to-all: one receive from and one send to every other member, all in flight at once.
// `chunk` is what goes to each member: send holds the members' chunks in group-rank order, recv
// receives them in the same order (the own chunk is not copied: the tensors hold no data).
void sim_all_to_all(const SimGroup& g, const void* send, void* recv, const SimBlock& chunk);

// NCCL's ring all-gather of `block` from every member into recv (group-rank order).
void sim_all_gather(const SimGroup& g, const void* send, void* recv, const SimBlock& block);

// NCCL's ring reduce-scatter: send holds size blocks of `block`, recv one (no sums are formed:
// the tensors hold no data, only the messages matter).
void sim_reduce_scatter(const SimGroup& g, const void* send, void* recv, const SimBlock& block);

// The bytes a completed receive got, where the normal build asks MPI_Get_elements_x (SMPI has
// none: sim_collectives.cpp). False when they could not be counted, past 2 GiB under SMPI: such a
// receive goes unchecked.
bool sim_received_bytes(MPI_Status& st, MPI_Count& got);

}  // namespace cpbench
