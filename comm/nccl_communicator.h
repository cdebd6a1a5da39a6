// The NCCL communicator: device buffers, one ncclComm per process group, its own stream.
// Built only with MPI (the unique id is broadcast over the group's MPI communicator) and the CUDA
// backend; World::make_group calls it for kind "nccl" under #ifdef CPBENCH_HAVE_NCCL.
//
// Stream ordering. Every operation runs on the communicator's stream (high priority). A
// collective records an event on the backend's compute stream, makes the comm stream wait on it,
// runs, records an end event and makes the compute stream wait on that: compute issued before the
// call is what gets sent, compute issued after it sees the result, and the host never blocks.
//
// Point-to-point. NCCL matches sends and receives per peer pair in issue order and a send blocks
// its stream until the peer's receive runs, so a ring's isend(next) + irecv(prev), posted one by
// one, would deadlock (every rank's send waits behind the peer's own send). isend/irecv therefore
// only record a "buffer ready" event on the compute stream and queue the operation; the queue is
// posted as ONE ncclGroupStart/End group (waiting on those events) at the first wait(), at the next
// collective or barrier of this communicator, in issue order. A group progresses all of its sends
// and receives together, so a ring step (every rank: send to next, receive from prev, then wait)
// cannot deadlock, and since the ready events were recorded at issue time, the transfer overlaps
// whatever compute was queued between isend/irecv and wait() as long as the host runs ahead of
// the GPU. wait() makes the compute stream wait on the group's end event. Tags are not used: the
// messages between two ranks must be issued in the same order on both sides (as the strategies
// do). isend/irecv with peer == own rank are matched locally (a device copy).
//
// Timing. Each CommRecord gets t0 = the host time at issue (cpbench::now_ms) when it is logged;
// start and end events on the comm stream are converted to the now_ms() axis at the backend's
// next synchronize() (through a sync hook): t = reference host time + elapsed(reference event,
// event), where the reference event was recorded on the idle comm stream at the previous
// synchronize. Recorded: t0 = max(issue time, start event), t1 = max(t0, end event). Approximate
// to a few microseconds; all p2p operations of one group share its interval.
//
// Failures. Host waits on the comm stream (synchronize, barrier, destruction) poll
// ncclCommGetAsyncError and stop after CPBENCH_NCCL_TIMEOUT_S seconds (default 600, 0 = none):
// on an asynchronous NCCL error or past the deadline the communicator is aborted
// (ncclCommAbort) and the call throws, naming the group and the cause, instead of hanging. A
// synchronize posts the isend/irecv still queued first, so none is left unposted across it.
// (NCCL's own connection set-up inside ncclGroupEnd runs before any of this and is not bounded.)
//
// One GPU. CPBENCH_NCCL_ONE_RANK=1 makes a group of one rank create a real one-rank NCCL
// communicator: all_to_all, all_gather, reduce_scatter, barrier and send/recv to self then go
// through NCCL (otherwise they are local copies), so the NCCL path runs on a single-GPU machine.
//
// Reduce-scatter of bf16/fp16 sums in fp32 (widen into fp32 staging, ncclReduceScatter fp32,
// round once), as the MPI path does; the staging is a tracked comm buffer.
//
// Bytes are counted with logical_bytes_sent (DESIGN). Several ranks sharing one GPU cannot use
// NCCL (NCCL rejects duplicate GPUs in a communicator): the constructor checks and says so; use
// --comm mpi for that.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/nccl_counts.h"

namespace cpbench {

class Backend;

// Counts of the calls that went through NCCL in this process, and of those done locally (a group
// of one rank copies locally and calls NCCL for nothing, unless CPBENCH_NCCL_ONE_RANK=1), so a
// report can say what a run exercised (comm/nccl_counts.h; the report's context.nccl).
NcclCallCounts nccl_call_counts();
std::string nccl_call_summary();  // one line, e.g. "NCCL calls: all_to_all 4, all_gather 2, ..."

// Collective over `comm`. Takes over `comm` (frees it after the bootstrap). `be` must be the CUDA
// backend (std::invalid_argument otherwise) and must outlive the communicator.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const std::string& name,
                                                     CommLog& log, Backend& be);

}  // namespace cpbench
