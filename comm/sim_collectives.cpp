// cpbench-sim's collectives and receive count (see sim_collectives.h).
#include "comm/sim_collectives.h"

#include <cstdint>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "kernels/tensor.h"

// Only the SimGrid sub-build compiles this file: the costs it defers exist only there
// (defer_clock throws elsewhere).
static_assert(cpbench::kSimulatedMpi, "comm/sim_collectives.cpp belongs to the cpbench-sim build only");

namespace cpbench {

namespace {

// The tags of the collectives, written as NCCL runs them over point-to-point (below); the
// strategies' tags are below 1000.
constexpr int kSimReduceScatterTag = 32001;
constexpr int kSimAllToAllTag = 32002;
constexpr int kSimAllGatherTag = 32003;

// Every member on one node (CommLog's node map; none set: one node), where the platform's
// intra-node NCCL curve applies. Groups across nodes run at the links' rates.
bool one_node(const SimGroup& g) {
  const std::vector<int>& node_of = g.log.node_map();
  if (node_of.empty()) return true;
  for (int w : g.world_ranks)
    if (node_of[static_cast<size_t>(w)] != node_of[static_cast<size_t>(g.world_ranks[0])]) return false;
  return true;
}

// The start of every simulated collective: defers the operation's fixed cost once (its tier by
// whether the group lies within one node; nothing for a group of one) and returns that.
bool start_collective(const SimGroup& g) {
  const bool within_node = one_node(g);
  if (g.size > 1) defer_clock(sim_op_fixed_s(within_node));
  return within_node;
}

// The ring collectives (NCCL's all-gather and reduce-scatter): P - 1 steps, each sending one
// block to the next rank and receiving one from the previous, the blocks of step s at send_at(s)
// and recv_at(s). Each step pays, within one node, what the platform's published NCCL curve takes
// beyond the links for the block (deferred, settled as the step's Sendrecv is posted); the
// operation's fixed cost (SimPlatform::op_fixed_seconds) is paid once, before the first step.
template <class SendAt, class RecvAt>
void ring_steps(const SimGroup& g, const SimBlock& block, int tag, SendAt send_at, RecvAt recv_at) {
  const int right = (g.rank + 1) % g.size, left = (g.rank + g.size - 1) % g.size;
  const double extra = start_collective(g) ? sim_collective_extra_s(static_cast<int64_t>(block.bytes), 1) : 0.0;
  for (int step = 0; step < g.size - 1; ++step) {
    defer_clock(extra);
    MPI_CHECK(MPI_Sendrecv(send_at(step), block.count, block.type, right, tag, recv_at(step), block.count,
                           block.type, left, tag, g.comm, MPI_STATUS_IGNORE));
  }
}

}  // namespace

// NCCL's all-to-all is a group of point-to-point transfers, one to and one from every other rank,
// all in flight at once (ncclGroupStart; ncclSend/ncclRecv per peer; ncclGroupEnd), so the
// transfers share each rank's links and pay one latency, where Open MPI's pairwise exchange
// (SMPI's choice for large messages) runs P - 1 exchanges in turn. Within one node the
// platform's published NCCL curve adds what NCCL takes beyond the links (SimPlatform::
// nccl_extra_seconds), deferred so it is settled as the first transfer is posted; so is the
// operation's fixed cost (SimPlatform::op_fixed_seconds), once.
void sim_all_to_all(const SimGroup& g, const void* send, void* recv, const SimBlock& chunk) {
  if (start_collective(g)) defer_clock(sim_collective_extra_s(static_cast<int64_t>(chunk.bytes), g.size - 1));
  const auto* sb = static_cast<const char*>(send);
  auto* rb = static_cast<char*>(recv);
  std::vector<MPI_Request> reqs;
  reqs.reserve(2 * static_cast<size_t>(g.size));
  for (int i = 1; i < g.size; ++i) {  // receives first, from the nearest peers on
    const int from = (g.rank - i + g.size) % g.size;
    reqs.emplace_back();
    MPI_CHECK(MPI_Irecv(rb + static_cast<size_t>(from) * chunk.bytes, chunk.count, chunk.type, from, kSimAllToAllTag,
                        g.comm, &reqs.back()));
  }
  for (int i = 1; i < g.size; ++i) {
    const int to = (g.rank + i) % g.size;
    reqs.emplace_back();
    MPI_CHECK(MPI_Isend(sb + static_cast<size_t>(to) * chunk.bytes, chunk.count, chunk.type, to, kSimAllToAllTag,
                        g.comm, &reqs.back()));
  }
  MPI_CHECK(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
}

// NCCL's ring all-gather: each rank sends to the next rank the block it received in the step
// before (its own first) and receives one from the previous. Open MPI's choice (SMPI's ompi
// selector) depends on the message size and P (recursive doubling, Bruck, neighbour exchange,
// ring), so SMPI's MPI_Allgather would not time what NCCL runs.
void sim_all_gather(const SimGroup& g, const void* send, void* recv, const SimBlock& block) {
  auto* rb = static_cast<char*>(recv);
  ring_steps(g, block, kSimAllGatherTag, [&](int step) -> const void* {
    const int out = (g.rank - step + g.size) % g.size;
    return step == 0 ? send : rb + static_cast<size_t>(out) * block.bytes;
  }, [&](int step) -> void* { return rb + static_cast<size_t>((g.rank - step - 1 + g.size) % g.size) * block.bytes; });
}

// NCCL's ring reduce-scatter (and Open MPI's ring): each rank sends one block to the next rank
// and receives one from the previous, the block it received feeding the next step. Written over
// MPI_Sendrecv on the tensors' own (shared) memory because SMPI's reduce-scatter first copies the
// whole input into a private buffer on every rank: at P ranks, P full copies at once (4.5 GB at
// P = 1,024 for allgather-kv's dK, dV).
void sim_reduce_scatter(const SimGroup& g, const void* send, void* recv, const SimBlock& block) {
  const auto* base = static_cast<const char*>(send);
  ring_steps(g, block, kSimReduceScatterTag, [&](int step) -> const void* {
    const int sent = (g.rank - step - 1 + 2 * g.size) % g.size;  // partial sums of this block go right
    return base + static_cast<size_t>(sent) * block.bytes;
  }, [&](int) -> void* { return recv; });
}

// SMPI has no MPI_Get_elements_x; its int count is MPI_UNDEFINED past 2 GiB (then unchecked).
bool sim_received_bytes(MPI_Status& st, MPI_Count& got) {
  int got_int = 0;
  const bool counted = MPI_Get_count(&st, MPI_BYTE, &got_int) == MPI_SUCCESS && got_int != MPI_UNDEFINED;
  got = got_int;
  return counted;
}

}  // namespace cpbench
