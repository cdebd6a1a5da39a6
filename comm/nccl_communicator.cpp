// NCCL communicator (see nccl_communicator.h for the stream, point-to-point and timing rules).
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace cpbench {
namespace {

std::string nccl_message(ncclResult_t r) {
  std::string m = ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (const char* last = ncclGetLastError(nullptr); last && *last) m += " (" + std::string(last) + ")";
#endif
  return m;
}

}  // namespace
}  // namespace cpbench

#define NCCL_CHECK(expr)                                                                       \
  do {                                                                                         \
    const ncclResult_t nccl_check_r_ = (expr);                                                 \
    if (nccl_check_r_ != ncclSuccess)                                                          \
      ::cpbench::throw_gpu_error("NCCL", #expr, __FILE__, __LINE__,                            \
                                 ::cpbench::nccl_message(nccl_check_r_));                      \
  } while (0)

namespace cpbench {
namespace {

constexpr size_t kMaxPendingTimings = 4096;  // resolve early past this many

// Process-wide counts of the calls that went through NCCL itself, and of those done locally
// (comm/nccl_counts.h says which is which).
struct OpCounters {
  std::atomic<int64_t> all_to_all{0}, all_gather{0}, reduce_scatter{0}, send{0}, recv{0}, barrier{0};
  NcclOpCounts load() const {
    NcclOpCounts c;
    c.all_to_all = all_to_all.load();
    c.all_gather = all_gather.load();
    c.reduce_scatter = reduce_scatter.load();
    c.send = send.load();
    c.recv = recv.load();
    c.barrier = barrier.load();
    return c;
  }
};
struct Counters {
  OpCounters nccl, local;
  std::atomic<int64_t> communicators{0};
  std::atomic<bool> one_rank{false};
};
Counters& counters() {
  static Counters c;
  return c;
}


bool one_rank_requested() {
  const char* v = std::getenv("CPBENCH_NCCL_ONE_RANK");
  return v && *v && std::string(v) != "0";
}

void mpi_ok(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string("MPI error in ") + call + " (" + error_context() + "): " + msg);
}

// Start and end events of one operation (or one group of p2p operations) on the comm stream.
struct Span {
  cudaEvent_t start = nullptr, end = nullptr;
  Span() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&end));
  }
  ~Span() {
    if (start) (void)cudaEventDestroy(start);
    if (end) (void)cudaEventDestroy(end);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
};

struct P2POp {
  const void* owner = nullptr;
  OpKind kind = OpKind::send;
  Tensor buf;  // keeps the buffer alive until the operation is done
  int peer = 0;
  size_t bytes = 0;
  Phase phase = Phase::other;
  double t_issue = 0;
  cudaEvent_t ready = nullptr;  // on the compute stream at issue; until posted
  bool posted = false;
  std::shared_ptr<Span> span;  // of the group it was posted in
};

// A log record whose interval is patched from its events at the next synchronize.
struct TimingFix {
  size_t index;
  OpKind op;
  int64_t buffer_bytes;
  int peer;
  double t_issue;
  std::shared_ptr<Span> span;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm comm, const std::string& name, CommLog& log, CudaBackend& be);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void wait(Request& r) override;
  void barrier() override;

 protected:
  const char* kind() const override { return "nccl"; }
  void do_all_to_all(const Tensor& send, Tensor& recv) override;
  void do_all_gather(const Tensor& send, Tensor& recv) override;
  void do_reduce_scatter(const Tensor& send, Tensor& recv) override;
  Request do_isend(const Tensor& buf, int peer, int tag) override;
  Request do_irecv(Tensor& buf, int peer, int tag) override;

 private:
  std::vector<int> world_ranks_;  // of the members, in group order
  void set_device() { CUDA_CHECK(cudaSetDevice(be_.device())); }
  // compute stream -> comm stream dependency, then the start event.
  std::shared_ptr<Span> begin_op();
  // end event; the compute stream waits on it.
  void end_op(Span& sp);
  void flush();  // post the queued isend/irecv as one group
  Request queue_p2p(OpKind op_kind, const Tensor& buf, int peer);
  void log_record(OpKind op, Phase ph, int64_t buffer_bytes, int peer, double t_issue,
                  const std::shared_ptr<Span>& sp);
  void on_sync();
  // Blocks until the comm stream is idle, polling ncclCommGetAsyncError; on an NCCL error or
  // past the deadline the communicator is aborted and this throws (naming `what`).
  void wait_comm_stream(const char* what);
  [[noreturn]] void abort_and_throw(const std::string& why);
  bool use_nccl() const { return nc_ != nullptr; }
  void check_alive(const char* op) const;  // throws once the communicator was aborted
  Tensor& staging(Tensor& t, int64_t numel);  // an fp32 comm buffer of at least numel elements
  void resolve_timings();
  void take_reference();

  CudaBackend& be_;
  CommLog& log_;
  int rank_ = 0, size_ = 1;
  ncclComm_t nc_ = nullptr;  // null for a group of one rank, unless CPBENCH_NCCL_ONE_RANK=1
  bool one_rank_nccl_ = false;  // a one-rank group that still goes through NCCL
  bool aborted_ = false;
  double timeout_s_ = 600;
  Tensor stage_send_, stage_recv_;  // fp32 staging of bf16/fp16 reduce_scatter
  std::vector<Tensor> retired_;     // replaced staging, alive until the next synchronize
  cudaStream_t cs_ = nullptr;
  int hook_ = 0;
  cudaEvent_t ref_ = nullptr;
  double ref_host_ = 0;
  int* barrier_buf_ = nullptr;
  std::vector<std::shared_ptr<P2POp>> queue_;     // issued, not yet posted
  std::vector<std::shared_ptr<P2POp>> inflight_;  // posted; kept alive until the next sync
  std::unordered_set<const void*> live_;          // requests not yet waited
  std::vector<TimingFix> fixes_;
};

NcclCommunicator::NcclCommunicator(MPI_Comm comm, const std::string& name, CommLog& log,
                                   CudaBackend& be)
    : be_(be), log_(log) {
  name_ = name;
  // We own `comm`: freed (collectively) when the bootstrap is done or has failed.
  struct CommGuard {
    MPI_Comm c;
    ~CommGuard() {
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    }
  } guard{comm};
  int world_rank = -1;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &world_rank) == MPI_SUCCESS) set_error_rank(world_rank);
  mpi_ok(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  mpi_ok(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  {  // world ranks of the members (group order): the log splits bytes by their nodes
    MPI_Group world_group, group;
    mpi_ok(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
    mpi_ok(MPI_Comm_group(comm, &group), "MPI_Comm_group");
    std::vector<int> mine(static_cast<size_t>(size_));
    for (int i = 0; i < size_; ++i) mine[static_cast<size_t>(i)] = i;
    world_ranks_.resize(static_cast<size_t>(size_));
    mpi_ok(MPI_Group_translate_ranks(group, size_, mine.data(), world_group, world_ranks_.data()),
           "MPI_Group_translate_ranks");
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
  }
  set_device();

  // NCCL needs one GPU per rank: say so clearly (and on every rank) instead of NCCL's error.
  constexpr int kLen = 256;
  char mine[kLen] = {0};
  {
    char host[128] = "?", bus[64] = "?";
    if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), be_.device()));
    std::snprintf(mine, kLen, "%s GPU %s", host, bus);
  }
  std::vector<char> all(size_t(kLen) * size_t(size_));
  mpi_ok(MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, comm), "MPI_Allgather");
  for (int i = 0; i < size_; ++i)
    for (int j = i + 1; j < size_; ++j)
      if (std::strncmp(&all[size_t(i) * kLen], &all[size_t(j) * kLen], kLen) == 0)
        throw std::runtime_error("comm nccl, group '" + name + "': group ranks " + std::to_string(i) +
                                 " and " + std::to_string(j) + " use the same device (" +
                                 std::string(&all[size_t(i) * kLen]) +
                                 "); NCCL needs one GPU per rank. Start one rank per GPU, or use "
                                 "--comm mpi to share a GPU between ranks.");

  timeout_s_ = cuda::host_wait_timeout_s();  // CPBENCH_NCCL_TIMEOUT_S, shared with the backend's host waits
  one_rank_nccl_ = size_ == 1 && one_rank_requested();
  if (one_rank_nccl_) counters().one_rank = true;
  int prio_lo = 0, prio_hi = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&prio_lo, &prio_hi));
  CUDA_CHECK(cudaStreamCreateWithPriority(&cs_, cudaStreamNonBlocking, prio_hi));
  if (size_ > 1 || one_rank_nccl_) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    mpi_ok(MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, comm), "MPI_Bcast");
    NCCL_CHECK(ncclCommInitRank(&nc_, size_, id, rank_));
    counters().communicators++;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&barrier_buf_), sizeof(int)));
    CUDA_CHECK(cudaMemset(barrier_buf_, 0, sizeof(int)));
  }
  CUDA_CHECK(cudaEventCreate(&ref_));
  take_reference();
  hook_ = be_.add_sync_hook([this] { on_sync(); });
}

std::string nccl_call_summary_impl();

NcclCommunicator::~NcclCommunicator() {
  be_.remove_sync_hook(hook_);
  // One-rank NCCL mode exists to show that NCCL ran: say what went through it (process totals).
  if (one_rank_nccl_)
    std::fprintf(stderr, "cpbench: one-rank NCCL group '%s' closed; %s\n", name_.c_str(),
                 nccl_call_summary_impl().c_str());
  if (!queue_.empty())
    std::fprintf(stderr,
                 "cpbench: NCCL communicator '%s' destroyed with %zu isend/irecv never waited; "
                 "dropped\n",
                 name_.c_str(), queue_.size());
  for (auto& op : queue_)
    if (op->ready) (void)cudaEventDestroy(op->ready);
  (void)cudaSetDevice(be_.device());
  if (cs_ && !aborted_) {
    try {
      wait_comm_stream("destruction");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cpbench: %s\n", e.what());  // aborted; a destructor must not throw
    }
  }
  inflight_.clear();
  fixes_.clear();
  if (nc_) (void)(aborted_ ? ncclCommAbort(nc_) : ncclCommDestroy(nc_));
  if (barrier_buf_) (void)cudaFree(barrier_buf_);
  if (ref_) (void)cudaEventDestroy(ref_);
  if (cs_) (void)cudaStreamDestroy(cs_);
  (void)cudaGetLastError();
}

// ---- stream plumbing and timing ---------------------------------------------------------------
std::shared_ptr<Span> NcclCommunicator::begin_op() {
  check_alive("a collective");
  set_device();
  cudaEvent_t ready = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(ready, be_.compute_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(cs_, ready, 0));
  CUDA_CHECK(cudaEventDestroy(ready));  // the wait is enqueued; the event may go
  auto sp = std::make_shared<Span>();
  CUDA_CHECK(cudaEventRecord(sp->start, cs_));
  return sp;
}

void NcclCommunicator::end_op(Span& sp) {
  CUDA_CHECK(cudaEventRecord(sp.end, cs_));
  CUDA_CHECK(cudaStreamWaitEvent(be_.compute_stream(), sp.end, 0));
}

void NcclCommunicator::log_record(OpKind op, Phase ph, int64_t buffer_bytes, int peer,
                                  double t_issue, const std::shared_ptr<Span>& sp) {
  auto& recs = log_.records();
  log_.add(op, name_, world_ranks_, rank_, ph, buffer_bytes, peer, t_issue, t_issue);
  if (sp) fixes_.push_back(TimingFix{recs.size() - 1, op, buffer_bytes, peer, t_issue, sp});
  if (fixes_.size() > kMaxPendingTimings) resolve_timings();
}

void NcclCommunicator::take_reference() {
  const double h0 = log_.now_ms();
  CUDA_CHECK(cudaEventRecord(ref_, cs_));
  CUDA_CHECK(cudaEventSynchronize(ref_));
  const double h1 = log_.now_ms();
  ref_host_ = 0.5 * (h0 + h1);
}

// Patches the logged intervals from the events (blocks until they have completed). A record
// that is no longer where it was logged (the harness cleared the log) is left alone.
void NcclCommunicator::resolve_timings() {
  auto& recs = log_.records();
  for (const TimingFix& f : fixes_) {
    float a = 0, b = 0;
    CUDA_CHECK(cudaEventSynchronize(f.span->end));
    CUDA_CHECK(cudaEventElapsedTime(&a, ref_, f.span->start));
    CUDA_CHECK(cudaEventElapsedTime(&b, ref_, f.span->end));
    if (f.index >= recs.size()) continue;
    CommRecord& r = recs[f.index];
    if (r.op != f.op || r.buffer_bytes != f.buffer_bytes || r.peer != f.peer || r.t0_ms != f.t_issue ||
        r.group != name_)
      continue;
    const double t0 = std::max(f.t_issue, ref_host_ + double(a));
    r.t0_ms = t0;
    r.t1_ms = std::max(t0, ref_host_ + double(b));
  }
  fixes_.clear();
}

// A synchronize completes everything issued: isend/irecv still queued are posted now (their
// buffers are alive, held by the queue), so no transfer outlives the sync unposted.
void NcclCommunicator::on_sync() {
  set_device();
  flush();
  wait_comm_stream("synchronize");
  retired_.clear();
  resolve_timings();
  inflight_.clear();
  take_reference();
}

void NcclCommunicator::abort_and_throw(const std::string& why) {
  if (nc_ && !aborted_) (void)ncclCommAbort(nc_);
  aborted_ = true;
  nc_ = nullptr;
  throw std::runtime_error("NCCL communicator '" + name_ + "' (group size " + std::to_string(size_) +
                           ", " + error_context() + "): " + why +
                           "; the communicator was aborted (ncclCommAbort)");
}

void NcclCommunicator::check_alive(const char* op) const {
  if (aborted_)
    throw std::runtime_error(std::string(op) + " on NCCL communicator '" + name_ +
                             "': the communicator was aborted after an earlier error");
}

void NcclCommunicator::wait_comm_stream(const char* what) {
  if (aborted_) abort_and_throw(std::string(what) + " after an earlier abort");
  const auto t0 = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    const cudaError_t q = cudaStreamQuery(cs_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      (void)cudaGetLastError();
      abort_and_throw(std::string(what) + ": the comm stream failed: " + cudaGetErrorString(q));
    }
    if (nc_) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(nc_, &async);
      if (r != ncclSuccess) abort_and_throw(std::string(what) + ": ncclCommGetAsyncError failed: " + nccl_message(r));
      if (async != ncclSuccess && async != ncclInProgress)
        abort_and_throw(std::string(what) + ": NCCL reported an asynchronous error: " + nccl_message(async));
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (timeout_s_ > 0 && waited > timeout_s_)
      abort_and_throw(std::string(what) + ": the NCCL operations did not complete within " +
                      std::to_string(int(timeout_s_)) +
                      " s (CPBENCH_NCCL_TIMEOUT_S; a peer that never joined, or a hang)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

// Grows only (allocated in the warm-up, reused by the timed iterations). A replaced buffer may
// still be read by queued comm work: kept alive until the next synchronize.
Tensor& NcclCommunicator::staging(Tensor& t, int64_t numel) {
  if (t.data == nullptr || t.numel() < numel) {
    if (t.data) retired_.push_back(t);
    t = be_.alloc({numel}, DType::f32, MemKind::comm);
  }
  return t;
}

// ---- collectives ----------------------------------------------------------------------------------
void NcclCommunicator::do_all_to_all(const Tensor& send, Tensor& recv) {
  const double t0 = log_.now_ms();
  const Phase ph = log_.phase();
  flush();
  auto sp = begin_op();
  const size_t bytes = send.bytes(), cb = bytes / size_t(size_);
  const char* sb = static_cast<const char*>(send.data);
  char* rb = static_cast<char*>(recv.data);
  if (cb > 0) {
    // The own chunk is a local copy, except in one-rank NCCL mode (a send/recv to self).
    if (!one_rank_nccl_)
      CUDA_CHECK(cudaMemcpyAsync(rb + size_t(rank_) * cb, sb + size_t(rank_) * cb, cb,
                                 cudaMemcpyDeviceToDevice, cs_));
    if (use_nccl()) {
      counters().nccl.all_to_all++;
      NCCL_CHECK(ncclGroupStart());
      for (int j = 0; j < size_; ++j) {
        if (j == rank_ && !one_rank_nccl_) continue;
        NCCL_CHECK(ncclSend(sb + size_t(j) * cb, cb, ncclUint8, j, nc_, cs_));
        NCCL_CHECK(ncclRecv(rb + size_t(j) * cb, cb, ncclUint8, j, nc_, cs_));
      }
      NCCL_CHECK(ncclGroupEnd());
    } else {
      counters().local.all_to_all++;
    }
  }
  end_op(*sp);
  log_record(OpKind::all_to_all, ph, int64_t(bytes), -1, t0, sp);
}

void NcclCommunicator::do_all_gather(const Tensor& send, Tensor& recv) {
  const double t0 = log_.now_ms();
  const Phase ph = log_.phase();
  flush();
  auto sp = begin_op();
  const size_t bytes = send.bytes();
  if (bytes > 0) {
    if (!use_nccl()) {
      counters().local.all_gather++;
      CUDA_CHECK(cudaMemcpyAsync(recv.data, send.data, bytes, cudaMemcpyDeviceToDevice, cs_));
    } else {
      counters().nccl.all_gather++;
      NCCL_CHECK(ncclAllGather(send.data, recv.data, bytes, ncclUint8, nc_, cs_));
    }
  }
  end_op(*sp);
  log_record(OpKind::all_gather, ph, int64_t(bytes), -1, t0, sp);
}

void NcclCommunicator::do_reduce_scatter(const Tensor& send, Tensor& recv) {
  const double t0 = log_.now_ms();
  const Phase ph = log_.phase();
  flush();
  // Staging before begin_op: a new buffer's poisoning fill runs on the compute stream, which the
  // comm stream then waits for.
  const bool widen = use_nccl() && send.dtype != DType::f32 && recv.numel() > 0;
  Tensor* ws = widen ? &staging(stage_send_, send.numel()) : nullptr;
  Tensor* wr = widen ? &staging(stage_recv_, recv.numel()) : nullptr;
  auto sp = begin_op();
  if (recv.numel() > 0) {
    if (!use_nccl()) {
      counters().local.reduce_scatter++;
      CUDA_CHECK(cudaMemcpyAsync(recv.data, send.data, recv.bytes(), cudaMemcpyDeviceToDevice, cs_));
    } else if (send.dtype == DType::f32) {
      counters().nccl.reduce_scatter++;
      NCCL_CHECK(ncclReduceScatter(send.data, recv.data, size_t(recv.numel()), ncclFloat32, ncclSum,
                                   nc_, cs_));
    } else {
      // bf16/fp16: sum in fp32 like the MPI path (NCCL would add in the 16-bit type, one rounding
      // per hop): widen into fp32 staging, reduce-scatter fp32, round once into recv. The wire
      // carries fp32 (twice the logical bytes, which are what the log counts, per DESIGN's s).
      cuda::convert(ws->data, DType::f32, send.data, send.dtype, send.numel(), cs_);
      counters().nccl.reduce_scatter++;
      NCCL_CHECK(ncclReduceScatter(ws->data, wr->data, size_t(recv.numel()), ncclFloat32, ncclSum, nc_, cs_));
      cuda::convert(recv.data, recv.dtype, wr->data, DType::f32, recv.numel(), cs_);
    }
  }
  end_op(*sp);
  log_record(OpKind::reduce_scatter, ph, int64_t(send.bytes()), -1, t0, sp);
}

void NcclCommunicator::barrier() {
  const double t0 = log_.now_ms();
  const Phase ph = log_.phase();
  check_alive("barrier");
  flush();
  if (use_nccl()) {
    set_device();
    counters().nccl.barrier++;
    NCCL_CHECK(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, nc_, cs_));
    wait_comm_stream("barrier");
  } else {
    counters().local.barrier++;  // one rank: nothing to wait for
  }
  log_.add(OpKind::barrier, name_, world_ranks_, rank_, ph, 0, -1, t0, log_.now_ms());
}

// ---- point-to-point ----------------------------------------------------------------------------
Request NcclCommunicator::queue_p2p(OpKind op_kind, const Tensor& buf, int peer) {
  check_alive(op_kind == OpKind::send ? "isend" : "irecv");
  auto op = std::make_shared<P2POp>();
  op->owner = this;
  op->kind = op_kind;
  op->buf = buf;
  op->peer = peer;
  op->bytes = buf.bytes();
  op->phase = log_.phase();
  op->t_issue = log_.now_ms();
  set_device();
  CUDA_CHECK(cudaEventCreateWithFlags(&op->ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(op->ready, be_.compute_stream()));
  queue_.push_back(op);
  live_.insert(op.get());
  return Request{op};
}

Request NcclCommunicator::do_isend(const Tensor& buf, int peer, int /*tag: see header*/) {
  return queue_p2p(OpKind::send, buf, peer);
}

Request NcclCommunicator::do_irecv(Tensor& buf, int peer, int /*tag: see header*/) {
  return queue_p2p(OpKind::recv, buf, peer);
}

void NcclCommunicator::flush() {
  if (queue_.empty()) return;
  check_alive("posting isend/irecv");
  set_device();
  std::vector<std::shared_ptr<P2POp>> ops;
  ops.swap(queue_);
  for (auto& op : ops) {
    CUDA_CHECK(cudaStreamWaitEvent(cs_, op->ready, 0));
    CUDA_CHECK(cudaEventDestroy(op->ready));
    op->ready = nullptr;
  }
  auto sp = std::make_shared<Span>();
  CUDA_CHECK(cudaEventRecord(sp->start, cs_));
  // Messages to self: matched locally, in issue order (through NCCL in one-rank NCCL mode).
  std::deque<P2POp*> self_send, self_recv;
  bool remote = false;
  for (auto& op : ops) {
    if (op->peer == rank_)
      (op->kind == OpKind::send ? self_send : self_recv).push_back(op.get());
    if ((op->peer != rank_ || one_rank_nccl_) && op->bytes > 0) remote = true;
  }
  if (self_send.size() != self_recv.size())
    throw std::invalid_argument("nccl communicator '" + name_ + "': " +
                                std::to_string(self_send.size()) + " isend and " +
                                std::to_string(self_recv.size()) +
                                " irecv to/from this rank itself were issued before a wait; they "
                                "must pair up");
  for (size_t i = 0; i < self_send.size(); ++i) {
    if (self_send[i]->bytes != self_recv[i]->bytes)
      throw std::invalid_argument("nccl communicator '" + name_ + "': self send of " +
                                  std::to_string(self_send[i]->bytes) + " bytes matched with a receive of " +
                                  std::to_string(self_recv[i]->bytes) + " bytes");
    if (self_send[i]->bytes && !one_rank_nccl_) {
      counters().local.send++;
      counters().local.recv++;
      CUDA_CHECK(cudaMemcpyAsync(self_recv[i]->buf.data, self_send[i]->buf.data, self_send[i]->bytes,
                                 cudaMemcpyDeviceToDevice, cs_));
    }
  }
  if (remote) {
    NCCL_CHECK(ncclGroupStart());
    for (auto& op : ops) {
      if ((op->peer == rank_ && !one_rank_nccl_) || op->bytes == 0) continue;
      if (op->kind == OpKind::send) {
        counters().nccl.send++;
        NCCL_CHECK(ncclSend(op->buf.data, op->bytes, ncclUint8, op->peer, nc_, cs_));
      } else {
        counters().nccl.recv++;
        NCCL_CHECK(ncclRecv(op->buf.data, op->bytes, ncclUint8, op->peer, nc_, cs_));
      }
    }
    NCCL_CHECK(ncclGroupEnd());
  }
  CUDA_CHECK(cudaEventRecord(sp->end, cs_));
  for (auto& op : ops) {
    op->posted = true;
    op->span = sp;
    inflight_.push_back(op);
  }
}

void NcclCommunicator::wait(Request& r) {
  if (!r.active()) return;
  if (!live_.count(r.impl.get()))
    throw std::invalid_argument("wait on '" + name_ +
                                "': the request was not issued by this NCCL communicator, or was "
                                "already waited");
  auto op = std::static_pointer_cast<P2POp>(r.impl);
  if (!op->posted) flush();
  set_device();
  CUDA_CHECK(cudaStreamWaitEvent(be_.compute_stream(), op->span->end, 0));
  live_.erase(op.get());
  r.impl.reset();
  log_record(op->kind, op->phase, int64_t(op->bytes), op->peer, op->t_issue, op->span);
}

}  // namespace

NcclCallCounts nccl_call_counts() {
  const Counters& c = counters();
  NcclCallCounts r;
  r.one_rank_mode = c.one_rank.load();
  r.communicators = c.communicators.load();
  static_cast<NcclOpCounts&>(r) = c.nccl.load();
  r.local = c.local.load();
  return r;
}

namespace {
std::string nccl_call_summary_impl() {
  const NcclCallCounts c = nccl_call_counts();
  return std::string("NCCL calls") + (c.one_rank_mode ? " (one-rank NCCL mode)" : "") +
         ": all_to_all " + std::to_string(c.all_to_all) + ", all_gather " + std::to_string(c.all_gather) +
         ", reduce_scatter " + std::to_string(c.reduce_scatter) + ", send " + std::to_string(c.send) +
         ", recv " + std::to_string(c.recv) + ", barrier " + std::to_string(c.barrier);
}
}  // namespace

std::string nccl_call_summary() { return nccl_call_summary_impl(); }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const std::string& name,
                                                     CommLog& log, Backend& be) {
  auto* cb = dynamic_cast<CudaBackend*>(&be);
  if (!cb) {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    throw std::invalid_argument("comm 'nccl' needs the cuda backend (this run uses backend '" +
                                be.name() + "')");
  }
  return std::make_unique<NcclCommunicator>(comm, name, log, *cb);
}

}  // namespace cpbench
