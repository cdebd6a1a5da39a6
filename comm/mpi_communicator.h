// The MPI communicator: collectives on the calling thread, point-to-point traffic owned by one
// communication thread per process (the CPU analogue of a CUDA comm stream), so isend/irecv
// progress while the caller computes.
//
// Thread model: MPI is initialised with MPI_THREAD_MULTIPLE (World::init) because the comm thread
// polls its requests while the main thread may be inside a collective or a harness call.
// A Communicator object itself is used by one thread at a time (the strategy's thread).
//
// Memory: host buffers are used in place. For backends with device memory (Backend::
// device_memory()), data is staged through host buffers with copy_to_host_raw /
// copy_from_host_raw, so several ranks can share one GPU.
//
// The comm thread: isend/irecv enqueue an operation; the thread posts MPI_Isend/MPI_Irecv in
// issue order (so MPI's non-overtaking order is the issue order) and drives progress with
// MPI_Testsome. While nobody waits it sleeps between polls (CPBENCH_COMM_POLL_US, default 50 us)
// so compute keeps the cores; while a caller is blocked in wait() it polls continuously
// (yielding), as a blocking MPI call would. wait() itself spins (yielding) for
// CPBENCH_COMM_SPIN_US before sleeping on a condition variable: default 200 us when the node has
// at least two cores per local rank, else 0 (spinning would take the comm thread's core).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "comm/communicator.h"

namespace cpbench {

class Backend;

// Throws std::runtime_error naming the call, file:line, host and world rank, and MPI's message.
[[noreturn]] void mpi_fail(int rc, const char* call, const char* file, int line);
// Settles cpbench-sim's deferred clock first (kernels/tensor.h), so that the call starts when the
// rank's preceding work ends.
#define MPI_CHECK(call)                                                   \
  do {                                                                    \
    ::cpbench::settle_clock();                                            \
    int mpi_check_rc_ = (call);                                           \
    if (mpi_check_rc_ != MPI_SUCCESS)                                     \
      ::cpbench::mpi_fail(mpi_check_rc_, #call, __FILE__, __LINE__);      \
  } while (0)

// A communicator over `comm`, which it takes over (sets MPI_ERRORS_RETURN, frees it when
// destroyed). `name` is the group name put in the records.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const std::string& name,
                                                    CommLog& log, Backend& be);

// How isend/irecv progress. thread: the comm thread above (the default of cpbench). inline: posted
// with MPI_Isend/MPI_Irecv on the caller's thread and completed by MPI_Wait in wait(), no thread
// (the default and only mode of cpbench-sim: SMPI refuses MPI calls from other threads). The
// environment variable CPBENCH_COMM_PROGRESS=thread|inline overrides the default, read when a
// communicator is created (tests run inline with real MPI). Records and bytes are the same in
// both modes. Throws std::invalid_argument on another value.
enum class P2PProgress { thread, inline_ };
P2PProgress mpi_p2p_progress();
const char* p2p_progress_name(P2PProgress p);

// Point-to-point operations alive in this process (queued, in flight, or completed but not yet
// released by wait() / by dropping the Request). 0 when every request has been waited.
int64_t mpi_p2p_live_ops();
// Stops the comm thread (World::finalize calls it before MPI_Finalize). Operations still in
// flight are cancelled with a warning on stderr. The thread restarts on the next isend/irecv.
void mpi_p2p_shutdown();

}  // namespace cpbench
