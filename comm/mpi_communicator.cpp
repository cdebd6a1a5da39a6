// MPI communicator and the per-process communication thread (see mpi_communicator.h).
#include "comm/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "comm/sim_collectives.h"
#include "comm/world.h"
#include "kernels/backend.h"
#include "kernels/float16.h"

namespace cpbench {

// ---- errors -----------------------------------------------------------------------------------

namespace {

std::string where() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  std::string host = "?";
  int rank = -1;
  if (init && !fin) {
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS) host.assign(name, static_cast<size_t>(len));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  }
  return "host " + host + " rank " + std::to_string(rank);
}

std::string mpi_error_string(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(msg, static_cast<size_t>(len));
}

}  // namespace

void mpi_fail(int rc, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                           " (" + where() + "): " + mpi_error_string(rc));
}

namespace {

// ---- counts larger than INT_MAX ---------------------------------------------------------------

// `bytes` as (datatype, count) with count <= INT_MAX: MPI_BYTE when it fits, else a contiguous
// block of a power-of-two size that divides it.
class ByteSpan {
 public:
  explicit ByteSpan(size_t bytes) {
    if (bytes <= static_cast<size_t>(INT_MAX)) {
      count_ = static_cast<int>(bytes);
      return;
    }
    for (size_t block = size_t(1) << 12; block <= (size_t(1) << 30); block <<= 1) {
      if (bytes % block == 0 && bytes / block <= static_cast<size_t>(INT_MAX)) {
        MPI_CHECK(MPI_Type_contiguous(static_cast<int>(block), MPI_BYTE, &type_));
        MPI_CHECK(MPI_Type_commit(&type_));
        owned_ = true;
        count_ = static_cast<int>(bytes / block);
        return;
      }
    }
    throw std::invalid_argument("message of " + std::to_string(bytes) +
                                " bytes cannot be expressed as an MPI count (not a multiple of 4 KiB)");
  }
  ~ByteSpan() {
    if (owned_) MPI_Type_free(&type_);
  }
  ByteSpan(const ByteSpan&) = delete;
  ByteSpan& operator=(const ByteSpan&) = delete;
  MPI_Datatype type() const { return type_; }
  int count() const { return count_; }

 private:
  MPI_Datatype type_ = MPI_BYTE;
  int count_ = 0;
  bool owned_ = false;
};

// ---- float32 staging of 16-bit buffers (reduce_scatter sums in float32; kernels/float16.h) ---

void to_f32(DType t, const void* src, float* dst, size_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  if (t == DType::f32) {
    std::memcpy(dst, src, n * 4);
  } else if (t == DType::bf16) {
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
  }
}

void from_f32(DType t, const float* src, void* dst, size_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  if (t == DType::f32) {
    std::memcpy(dst, src, n * 4);
  } else if (t == DType::bf16) {
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
  }
}

// ---- the communication thread ------------------------------------------------------------------

// An MPI communicator handle shared by the communicator and its in-flight operations, freed
// when the last of them goes (so destroying a Communicator with a request in flight is safe).
struct CommHandle {
  MPI_Comm comm = MPI_COMM_NULL;
  explicit CommHandle(MPI_Comm c) : comm(c) {}
  ~CommHandle() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && comm != MPI_COMM_NULL && comm != MPI_COMM_WORLD && comm != MPI_COMM_SELF)
      MPI_Comm_free(&comm);
  }
};

std::atomic<int64_t> g_live_ops{0};
std::mutex g_live_mu;
std::unordered_set<const void*> g_live_set;  // addresses of live P2POp (validates wait())

struct P2POp {
  // Set by the issuing thread before submit; read-only afterwards.
  OpKind kind = OpKind::send;
  std::shared_ptr<CommHandle> comm;
  const void* owner = nullptr;  // the issuing communicator
  int peer = 0, tag = 0;
  void* buf = nullptr;  // what MPI reads/writes: the tensor's memory or `stage`
  size_t bytes = 0;
  Tensor tensor;                      // keeps the caller's buffer alive until release
  std::unique_ptr<unsigned char[]> stage;  // host staging (device-memory backends), not zeroed
  Phase phase = Phase::other;
  double t0 = 0;
  // cpbench-sim: when the transfer's bytes stop moving, t0 plus its modelled duration (the
  // platform's point-to-point time for its size and tier); set once, with t0.
  double sim_end_ms = 0;
  // Owned by the comm thread while in flight; published under the engine mutex.
  MPI_Request req = MPI_REQUEST_NULL;
  std::atomic<bool> done{false};  // set (release) after error and t_done
  double t_done = 0;
  std::string error;

  P2POp() {
    g_live_ops.fetch_add(1);
    std::lock_guard<std::mutex> lk(g_live_mu);
    g_live_set.insert(this);
  }
  ~P2POp() {
    std::lock_guard<std::mutex> lk(g_live_mu);
    g_live_set.erase(this);
    g_live_ops.fetch_sub(1);
  }
  P2POp(const P2POp&) = delete;
  P2POp& operator=(const P2POp&) = delete;
};

// A completed receive must have filled its whole buffer: a shorter message is a layout bug.
std::string check_status(const P2POp& op, MPI_Status& st, bool status_has_error) {
  if (status_has_error && st.MPI_ERROR != MPI_SUCCESS)
    return std::string(op.kind == OpKind::send ? "send" : "recv") + " to/from peer " +
           std::to_string(op.peer) + " tag " + std::to_string(op.tag) + " failed (" + where() +
           "): " + mpi_error_string(st.MPI_ERROR);
  if (op.kind == OpKind::recv) {
    MPI_Count got = 0;
    bool counted = false;
    if constexpr (kSimulatedMpi) counted = sim_received_bytes(st, got);  // SMPI counts otherwise
    else counted = MPI_Get_elements_x(&st, MPI_BYTE, &got) == MPI_SUCCESS;
    if (counted && got != static_cast<MPI_Count>(op.bytes))
      return "recv from peer " + std::to_string(op.peer) + " tag " + std::to_string(op.tag) +
             " got " + std::to_string(static_cast<long long>(got)) + " bytes, expected " +
             std::to_string(op.bytes) + " (" + where() + ")";
  }
  return {};
}

class P2PEngine {
 public:
  static P2PEngine& get() {
    static P2PEngine* e = new P2PEngine();  // never destroyed: the thread is stopped explicitly
    return *e;
  }

  void submit(std::shared_ptr<P2POp> op) {
    release_finished();
    std::lock_guard<std::mutex> lk(mu_);
    if (!running_) {
      stop_ = false;
      running_ = true;
      thread_ = std::thread([this] { run(); });
    }
    incoming_.push_back(std::move(op));
    work_cv_.notify_one();
  }

  void wait(P2POp& op) {
    if (!op.done.load(std::memory_order_acquire)) {
      std::unique_lock<std::mutex> lk(mu_);
      ++waiters_;  // switches the thread to continuous polling
      work_cv_.notify_one();
      // Spin (yielding) for a while before sleeping: a condition-variable wake-up costs tens of
      // microseconds, as much as moving a few hundred KiB.
      const auto spin_end = std::chrono::steady_clock::now() + spin_;
      while (!op.done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < spin_end) {
        lk.unlock();
        std::this_thread::yield();
        lk.lock();
      }
      done_cv_.wait(lk, [&] { return op.done.load(std::memory_order_acquire); });
      --waiters_;
    }
    release_finished();
  }

  // Completed operations are handed back here and destroyed on a caller's thread, never on the
  // comm thread: destroying one may free a backend buffer (the allocator is not thread-safe).
  void release_finished() {
    std::vector<std::shared_ptr<P2POp>> dead;
    {
      std::lock_guard<std::mutex> lk(mu_);
      dead.swap(finished_);
    }
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!running_) return;
      stop_ = true;
      work_cv_.notify_one();
    }
    thread_.join();
    {
      std::lock_guard<std::mutex> lk(mu_);
      running_ = false;
    }
    release_finished();
  }

 private:
  P2PEngine() {
    const char* env = std::getenv("CPBENCH_COMM_POLL_US");
    long us = env ? std::strtol(env, nullptr, 10) : 50;
    poll_ = std::chrono::microseconds(std::max(1L, us));
    const char* spin = std::getenv("CPBENCH_COMM_SPIN_US");
    spin_ = std::chrono::microseconds(spin ? std::max(0L, std::strtol(spin, nullptr, 10)) : default_spin_us());
  }

  // Spinning in wait() pays off only when this rank's main and comm threads each have a core:
  // on an oversubscribed node the spinning thread takes CPU from the comm thread that moves the
  // data (measured: 1 MiB ring shift at 0.56 of raw MPI with a 1 ms spin, 0.77 without).
  static long default_spin_us() {
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    int local = 1;
    try {
      local = World::get().local_size();
    } catch (const std::exception&) {
    }
    return cores >= 2 * local ? 200 : 0;
  }

  // Under mu_. The op moves to finished_ (see release_finished).
  void finish(std::shared_ptr<P2POp>& op, std::string error) {
    op->error = std::move(error);
    op->t_done = now_ms();
    op->done.store(true, std::memory_order_release);
    finished_.push_back(std::move(op));
  }

  // Posts one operation; returns false (and sets its error) when MPI refuses it.
  bool post(std::shared_ptr<P2POp>& op) {
    try {
      ByteSpan span(op->bytes);
      int rc = op->kind == OpKind::send
                   ? MPI_Isend(op->buf, span.count(), span.type(), op->peer, op->tag, op->comm->comm, &op->req)
                   : MPI_Irecv(op->buf, span.count(), span.type(), op->peer, op->tag, op->comm->comm, &op->req);
      if (rc != MPI_SUCCESS) {
        std::lock_guard<std::mutex> lk(mu_);
        finish(op, std::string(op->kind == OpKind::send ? "MPI_Isend" : "MPI_Irecv") + " failed (" +
                       where() + "): " + mpi_error_string(rc));
        done_cv_.notify_all();
        return false;
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu_);
      finish(op, e.what());
      done_cv_.notify_all();
      return false;
    }
    return true;
  }

  void run() {
    std::vector<std::shared_ptr<P2POp>> active, fresh;
    std::vector<MPI_Request> reqs;
    std::vector<int> idx;
    std::vector<MPI_Status> st;
    for (;;) {
      bool hot = false;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (active.empty()) {
          work_cv_.wait(lk, [&] { return stop_ || !incoming_.empty(); });
        } else if (waiters_ == 0 && incoming_.empty() && !stop_) {
          // Nobody waits: let compute have the core between polls.
          work_cv_.wait_for(lk, poll_, [&] { return stop_ || !incoming_.empty() || waiters_ > 0; });
        }
        if (stop_) break;
        fresh.swap(incoming_);
        hot = waiters_ > 0;
      }
      for (auto& op : fresh)
        if (post(op)) active.push_back(std::move(op));
      fresh.clear();  // ops that failed to post were moved to finished_
      if (active.empty()) continue;

      reqs.resize(active.size());
      for (size_t i = 0; i < active.size(); ++i) reqs[i] = active[i]->req;
      idx.resize(active.size());
      st.resize(active.size());
      int outcount = 0;
      const int rc = MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &outcount, idx.data(), st.data());
      if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& op : active) finish(op, "MPI_Testsome failed (" + where() + "): " + mpi_error_string(rc));
        active.clear();
        done_cv_.notify_all();
        continue;
      }
      if (outcount > 0 && outcount != MPI_UNDEFINED) {
        std::lock_guard<std::mutex> lk(mu_);
        for (int j = 0; j < outcount; ++j) {
          auto& op = active[static_cast<size_t>(idx[static_cast<size_t>(j)])];
          op->req = MPI_REQUEST_NULL;
          std::string err = check_status(*op, st[static_cast<size_t>(j)], rc == MPI_ERR_IN_STATUS);
          finish(op, std::move(err));  // leaves a null in `active`
        }
        active.erase(std::remove(active.begin(), active.end(), nullptr), active.end());
        done_cv_.notify_all();
      } else if (hot) {
        std::this_thread::yield();
      }
    }
    // Stopped with operations outstanding: a program error (requests never waited).
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& op : incoming_) active.push_back(std::move(op));
    incoming_.clear();
    if (!active.empty())
      std::fprintf(stderr, "cpbench: comm thread stopped with %zu point-to-point operation(s) in flight (%s); cancelling\n",
                   active.size(), where().c_str());
    for (auto& op : active) {
      if (op->req != MPI_REQUEST_NULL) {
        MPI_Cancel(&op->req);
        MPI_Request_free(&op->req);
      }
      finish(op, "cancelled: the comm thread was stopped (World::finalize) before completion");
    }
    done_cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::shared_ptr<P2POp>> incoming_;
  std::vector<std::shared_ptr<P2POp>> finished_;
  int waiters_ = 0;
  bool stop_ = false, running_ = false;
  std::thread thread_;
  std::chrono::microseconds poll_{50};   // between polls while nobody waits
  std::chrono::microseconds spin_{0};  // wait() spins (yielding) this long before sleeping
};

// ---- the communicator ----------------------------------------------------------------------------

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const std::string& name, CommLog& log, Backend& be)
      : comm_(std::make_shared<CommHandle>(comm)),
        log_(log),
        be_(be),
        staged_(be.device_memory()),
        progress_(mpi_p2p_progress()) {
    name_ = name;
    MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    void* attr = nullptr;
    int flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag));
    if (flag && attr) tag_ub_ = *static_cast<int*>(attr);
    // World ranks of the members (group-rank order): the peers a blocked call waits for.
    MPI_Group world_group, group;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    MPI_CHECK(MPI_Comm_group(comm, &group));
    std::vector<int> mine(static_cast<size_t>(size_));
    for (int i = 0; i < size_; ++i) mine[static_cast<size_t>(i)] = i;
    world_ranks_.resize(static_cast<size_t>(size_));
    MPI_CHECK(MPI_Group_translate_ranks(group, size_, mine.data(), world_group, world_ranks_.data()));
    MPI_CHECK(MPI_Group_free(&group));
    MPI_CHECK(MPI_Group_free(&world_group));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  const char* kind() const override { return "mpi"; }
  int max_tag() const override { return tag_ub_; }
  bool stages_buffers() const override { return staged_; }

  void do_all_to_all(const Tensor& send, Tensor& recv) override {
    const double t0 = log_.now_ms();
    const Phase ph = log_.phase();
    InCall in_call(log_, OpKind::all_to_all, name_, others());
    const size_t bytes = send.bytes(), c = bytes / static_cast<size_t>(size_);
    ByteSpan chunk(c);
    if constexpr (kSimulatedMpi) {  // NCCL's all-to-all over point-to-point (comm/sim_collectives.cpp)
      sim_all_to_all(sim_group(), send.data, recv.data, SimBlock{c, chunk.type(), chunk.count()});
      record(OpKind::all_to_all, ph, static_cast<int64_t>(bytes), -1, t0, log_.now_ms());
      return;
    }
    through_host_if_staged(send, recv, [&](const void* sb, void* rb) {
      MPI_CHECK(MPI_Alltoall(sb, chunk.count(), chunk.type(), rb, chunk.count(), chunk.type(), comm_->comm));
    });
    record(OpKind::all_to_all, ph, static_cast<int64_t>(bytes), -1, t0, log_.now_ms());
  }

  void do_all_gather(const Tensor& send, Tensor& recv) override {
    const double t0 = log_.now_ms();
    const Phase ph = log_.phase();
    InCall in_call(log_, OpKind::all_gather, name_, others());
    const size_t bytes = send.bytes();
    ByteSpan chunk(bytes);
    if constexpr (kSimulatedMpi) {  // NCCL's ring all-gather (comm/sim_collectives.cpp)
      sim_all_gather(sim_group(), send.data, recv.data, SimBlock{bytes, chunk.type(), chunk.count()});
      record(OpKind::all_gather, ph, static_cast<int64_t>(bytes), -1, t0, log_.now_ms());
      return;
    }
    through_host_if_staged(send, recv, [&](const void* sb, void* rb) {
      MPI_CHECK(MPI_Allgather(sb, chunk.count(), chunk.type(), rb, chunk.count(), chunk.type(), comm_->comm));
    });
    record(OpKind::all_gather, ph, static_cast<int64_t>(bytes), -1, t0, log_.now_ms());
  }

  void do_reduce_scatter(const Tensor& send, Tensor& recv) override {
    const double t0 = log_.now_ms();
    const Phase ph = log_.phase();
    InCall in_call(log_, OpKind::reduce_scatter, name_, others());
    const int64_t c = recv.numel();
    if (c > INT_MAX)
      throw std::invalid_argument("reduce_scatter on '" + name_ + "': " + std::to_string(c) +
                                  " elements per rank exceed MPI's int count");
    const size_t n = static_cast<size_t>(send.numel());
    if constexpr (kSimulatedMpi) {  // NCCL's ring reduce-scatter, no sums (comm/sim_collectives.cpp)
      const size_t block = recv.bytes();
      ByteSpan span(block);
      sim_reduce_scatter(sim_group(), send.data, recv.data, SimBlock{block, span.type(), span.count()});
      record(OpKind::reduce_scatter, ph, static_cast<int64_t>(send.bytes()), -1, t0, log_.now_ms());
      return;
    }
    if (!staged_ && send.dtype == DType::f32) {
      MPI_CHECK(MPI_Reduce_scatter_block(send.data, recv.data, static_cast<int>(c), MPI_FLOAT, MPI_SUM, comm_->comm));
    } else {
      // Device memory and/or 16-bit data: reduce in fp32 on the host, convert back once.
      const void* src = send.data;
      if (staged_) {
        stage_in(send, host_send_);
        src = host_send_.data();
      }
      f32_send_.resize(n);
      f32_recv_.resize(static_cast<size_t>(c));
      to_f32(send.dtype, src, f32_send_.data(), n);
      MPI_CHECK(MPI_Reduce_scatter_block(f32_send_.data(), f32_recv_.data(), static_cast<int>(c), MPI_FLOAT,
                                         MPI_SUM, comm_->comm));
      if (staged_) {
        host_recv_.resize(recv.bytes());
        from_f32(recv.dtype, f32_recv_.data(), host_recv_.data(), static_cast<size_t>(c));
        be_.copy_from_host_raw(recv, host_recv_.data(), recv.bytes());
      } else {
        from_f32(recv.dtype, f32_recv_.data(), recv.data, static_cast<size_t>(c));
      }
    }
    record(OpKind::reduce_scatter, ph, static_cast<int64_t>(send.bytes()), -1, t0, log_.now_ms());
  }

  Request do_isend(const Tensor& buf, int peer, int tag) override {
    auto op = make_op(OpKind::send, buf, peer, tag);
    if (staged_) be_.copy_to_host_raw(op->stage.get(), buf, op->bytes);  // caller's thread: after its compute
    start(op);
    return Request{op};
  }

  Request do_irecv(Tensor& buf, int peer, int tag) override {
    auto op = make_op(OpKind::recv, buf, peer, tag);
    start(op);
    return Request{op};
  }

 public:
  void wait(Request& r) override {
    if (!r.active()) return;  // like MPI_Wait on MPI_REQUEST_NULL
    {
      std::lock_guard<std::mutex> lk(g_live_mu);
      if (!g_live_set.count(r.impl.get()))
        throw std::invalid_argument("wait on '" + name_ + "': the request was not issued by an MPI communicator");
    }
    auto op = std::static_pointer_cast<P2POp>(r.impl);
    if (op->owner != this)
      throw std::invalid_argument("wait on '" + name_ + "': the request was issued by another communicator");
    {
      InCall in_call(log_, op->kind, name_, {world_ranks_[static_cast<size_t>(op->peer)]});
      if (progress_ == P2PProgress::inline_) finish_inline(*op);
      else P2PEngine::get().wait(*op);
    }
    if constexpr (kSimulatedMpi) {
      // cpbench-sim: a transfer ends no earlier than its post plus its modelled duration, the
      // platform's published point-to-point time for its size and tier where it has one (SimGrid
      // charges the links' latency and rate only); from this rank's own post, the peer's being
      // about the same in a ring hop.
      const double late_ms = op->sim_end_ms - now_ms();
      if (late_ms > 0) {
        defer_clock(late_ms * 1e-3);
        settle_clock();
        op->t_done = now_ms();
      }
    }
    r.impl.reset();
    if (!op->error.empty()) throw std::runtime_error("comm '" + name_ + "': " + op->error);
    double t1 = op->t_done;
    if (op->kind == OpKind::recv && staged_) {
      be_.copy_from_host_raw(op->tensor, op->stage.get(), op->bytes);
      t1 = log_.now_ms();
    }
    record(op->kind, op->phase, static_cast<int64_t>(op->bytes), op->peer, op->t0, t1);
  }

  void barrier() override {
    const double t0 = log_.now_ms();
    const Phase ph = log_.phase();
    InCall in_call(log_, OpKind::barrier, name_, others());
    MPI_CHECK(MPI_Barrier(comm_->comm));
    record(OpKind::barrier, ph, 0, -1, t0, log_.now_ms());
  }

 private:
  // Comm thread: queue the op for it. Inline: post it now, on the caller's thread.
  void start(std::shared_ptr<P2POp>& op) {
    if (progress_ == P2PProgress::thread) {
      P2PEngine::get().submit(op);
      return;
    }
    ByteSpan span(op->bytes);
    settle_clock();  // cpbench-sim: the message leaves when the rank's preceding work ends
    const int rc = op->kind == OpKind::send
                       ? MPI_Isend(op->buf, span.count(), span.type(), op->peer, op->tag, comm_->comm, &op->req)
                       : MPI_Irecv(op->buf, span.count(), span.type(), op->peer, op->tag, comm_->comm, &op->req);
    if constexpr (kSimulatedMpi)  // the bytes move from the post for the transfer's modelled duration
      note_p2p_moving_until(op->sim_end_ms);
    if (rc != MPI_SUCCESS)
      throw std::runtime_error("comm '" + name_ + "': " + (op->kind == OpKind::send ? "MPI_Isend" : "MPI_Irecv") +
                               " to/from peer " + std::to_string(op->peer) + " failed (" + where() + "): " +
                               mpi_error_string(rc));
  }

  // Inline progress: MPI_Wait on the caller's thread; sets the op's completion time and error as
  // the comm thread would.
  static void finish_inline(P2POp& op) {
    MPI_Status st;
    settle_clock();  // cpbench-sim: the wait starts when the rank's work up to it ends
    const int rc = MPI_Wait(&op.req, &st);
    op.req = MPI_REQUEST_NULL;
    op.error = rc == MPI_SUCCESS ? check_status(op, st, false)
                                 : std::string(op.kind == OpKind::send ? "send" : "recv") + " to/from peer " +
                                       std::to_string(op.peer) + " failed (" + where() + "): " + mpi_error_string(rc);
    op.t_done = now_ms();
    op.done.store(true, std::memory_order_release);
  }

  std::shared_ptr<P2POp> make_op(OpKind op_kind, const Tensor& buf, int peer, int tag) {
    auto op = std::make_shared<P2POp>();
    op->kind = op_kind;
    op->comm = comm_;
    op->owner = this;
    op->peer = peer;
    op->tag = tag;
    op->tensor = buf;
    op->bytes = buf.bytes();
    op->phase = log_.phase();
    op->t0 = log_.now_ms();
    if constexpr (kSimulatedMpi) op->sim_end_ms = op->t0 + 1e3 * sim_p2p_s(static_cast<int64_t>(op->bytes), same_node(peer));
    if (staged_) op->stage.reset(new unsigned char[std::max<size_t>(op->bytes, 1)]);
    op->buf = staged_ ? op->stage.get() : buf.data;
    return op;
  }

  void stage_in(const Tensor& t, std::vector<unsigned char>& host) {
    host.resize(t.bytes());
    be_.copy_to_host_raw(host.data(), t, t.bytes());
  }

  // Runs call(send_buffer, recv_buffer), an MPI collective that moves bytes unchanged: on the
  // tensors' own memory, or, when the backend's memory is not host memory (staged), through the
  // host buffers, copying send in before and recv out after.
  template <class Call>
  void through_host_if_staged(const Tensor& send, Tensor& recv, Call call) {
    if (!staged_) return call(send.data, recv.data);
    stage_in(send, host_send_);
    host_recv_.resize(recv.bytes());
    call(host_send_.data(), host_recv_.data());
    be_.copy_from_host_raw(recv, host_recv_.data(), recv.bytes());
  }

  void record(OpKind k, Phase ph, int64_t buffer_bytes, int peer, double t0, double t1) {
    log_.add(k, name_, world_ranks_, rank_, ph, buffer_bytes, peer, t0, t1);
  }

  // Marks the rank as blocked in a call for the watchdog while it lives.
  struct InCall {
    InCall(CommLog& log, OpKind op, const std::string& group, std::vector<int> peers) : log_(log) {
      log_.enter(op, group, std::move(peers));
    }
    ~InCall() { log_.leave(); }
    CommLog& log_;
  };
  // This communicator's group for cpbench-sim's collectives.
  // Whether group member `peer` lives on this rank's node (the log's node map; none: one node).
  bool same_node(int peer) const {
    const std::vector<int>& node_of = log_.node_map();
    if (node_of.empty()) return true;
    return node_of[static_cast<size_t>(world_ranks_[static_cast<size_t>(peer)])] ==
           node_of[static_cast<size_t>(world_ranks_[static_cast<size_t>(rank_)])];
  }

  SimGroup sim_group() const { return SimGroup{comm_->comm, rank_, size_, world_ranks_, log_}; }

  std::vector<int> others() const {
    std::vector<int> v;
    for (int i = 0; i < size_; ++i)
      if (i != rank_) v.push_back(world_ranks_[static_cast<size_t>(i)]);
    return v;
  }

  std::vector<int> world_ranks_;  // of the members, in group-rank order
  std::shared_ptr<CommHandle> comm_;
  CommLog& log_;
  Backend& be_;
  const bool staged_;
  const P2PProgress progress_;
  int rank_ = 0, size_ = 1;
  int tag_ub_ = 32767;
  std::vector<unsigned char> host_send_, host_recv_;  // staging for collectives (grow-only)
  std::vector<float> f32_send_, f32_recv_;            // fp32 reduction of 16-bit data
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const std::string& name, CommLog& log,
                                                    Backend& be) {
  return std::make_unique<MpiCommunicator>(comm, name, log, be);
}

const char* p2p_progress_name(P2PProgress p) { return p == P2PProgress::thread ? "thread" : "inline"; }

P2PProgress mpi_p2p_progress() {
  const P2PProgress build_default = kSimulatedMpi ? P2PProgress::inline_ : P2PProgress::thread;
  const char* env = std::getenv("CPBENCH_COMM_PROGRESS");
  if (!env || !*env) return build_default;
  const std::string v = env;
  if (v == "inline") return P2PProgress::inline_;
  if (v == "thread") {
    if (kSimulatedMpi)
      throw std::invalid_argument("CPBENCH_COMM_PROGRESS=thread: cpbench-sim cannot use a communication thread "
                                  "(SMPI refuses MPI calls from threads other than the rank's own); use inline");
    return P2PProgress::thread;
  }
  throw std::invalid_argument("CPBENCH_COMM_PROGRESS='" + v + "': expected 'thread' or 'inline'");
}

int64_t mpi_p2p_live_ops() {
  P2PEngine::get().release_finished();
  return g_live_ops.load();
}

void mpi_p2p_shutdown() { P2PEngine::get().shutdown(); }

}  // namespace cpbench
