// World of one rank, for builds without MPI (CPBENCH_MPI=OFF). Groups have one member: the
// collectives copy send to recv, sends to self are matched with receives by tag in issue order,
// and every call is recorded (with 0 bytes sent: nothing leaves a group of one rank).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/world.h"
#include "kernels/backend.h"

namespace cpbench {

namespace {

World* g_world = nullptr;

// Copies `bytes` from src to dst through the backend (host memcpy when it has host memory).
void copy_tensor(Backend& be, Tensor& dst, const Tensor& src, size_t bytes) {
  if (bytes == 0) return;
  if (!be.device_memory()) {
    std::memmove(dst.data, src.data, bytes);
    return;
  }
  std::vector<unsigned char> host(bytes);
  be.copy_to_host_raw(host.data(), src, bytes);
  be.copy_from_host_raw(dst, host.data(), bytes);
}

void to_host(Backend& be, void* dst, const Tensor& src, size_t bytes) {
  if (bytes == 0) return;
  if (be.device_memory()) be.copy_to_host_raw(dst, src, bytes);
  else std::memcpy(dst, src.data, bytes);
}

void from_host(Backend& be, Tensor& dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (be.device_memory()) be.copy_from_host_raw(dst, src, bytes);
  else std::memcpy(dst.data, src, bytes);
}

struct SelfOp {
  OpKind kind;
  int tag;
  Tensor tensor;
  std::vector<unsigned char> data;  // send: the bytes at issue time
  bool done = false;
  Phase phase;
  double t0 = 0, t_done = 0;
  const void* owner = nullptr;
};

class SerialCommunicator final : public Communicator {
 public:
  SerialCommunicator(const std::string& name, CommLog& log, Backend& be) : log_(log), be_(be) { name_ = name; }
  int rank() const override { return 0; }
  int size() const override { return 1; }

 protected:
  const char* kind() const override { return "self"; }
  void do_all_to_all(const Tensor& send, Tensor& recv) override { copy_op(OpKind::all_to_all, send, recv); }
  void do_all_gather(const Tensor& send, Tensor& recv) override { copy_op(OpKind::all_gather, send, recv); }
  void do_reduce_scatter(const Tensor& send, Tensor& recv) override { copy_op(OpKind::reduce_scatter, send, recv); }

  Request do_isend(const Tensor& buf, int peer, int tag) override {
    auto op = make_op(OpKind::send, buf, peer, tag);
    op->data.resize(buf.bytes());
    to_host(be_, op->data.data(), buf, buf.bytes());
    op->done = true;
    op->t_done = log_.now_ms();
    // Deliver to the oldest pending receive with this tag, else keep it for a later irecv.
    for (auto it = recvs_.begin(); it != recvs_.end(); ++it)
      if ((*it)->tag == tag) {
        deliver(**it, *op);
        recvs_.erase(it);
        return Request{op};
      }
    sends_.push_back(op);
    return Request{op};
  }

  Request do_irecv(Tensor& buf, int peer, int tag) override {
    auto op = make_op(OpKind::recv, buf, peer, tag);
    for (auto it = sends_.begin(); it != sends_.end(); ++it)
      if ((*it)->tag == tag) {
        deliver(*op, **it);
        sends_.erase(it);
        return Request{op};
      }
    recvs_.push_back(op);
    return Request{op};
  }

 public:
  void wait(Request& r) override {
    if (!r.active()) return;
    auto op = std::static_pointer_cast<SelfOp>(r.impl);
    if (op->owner != this)
      throw std::invalid_argument("wait on '" + name_ + "': the request was issued by another communicator");
    if (!op->done)
      throw std::runtime_error("wait on '" + name_ + "': receive with tag " + std::to_string(op->tag) +
                               " has no matching isend (a world of one rank would deadlock here)");
    r.impl.reset();
    record(op->kind, op->phase, static_cast<int64_t>(op->tensor.bytes()), 0, op->t0, op->t_done);
  }

  void barrier() override {
    const double t = log_.now_ms();
    record(OpKind::barrier, log_.phase(), 0, -1, t, log_.now_ms());
  }

 private:
  void copy_op(OpKind k, const Tensor& send, Tensor& recv) {
    const double t0 = log_.now_ms();
    copy_tensor(be_, recv, send, send.bytes());
    record(k, log_.phase(), static_cast<int64_t>(send.bytes()), -1, t0, log_.now_ms());
  }

  std::shared_ptr<SelfOp> make_op(OpKind op_kind, const Tensor& buf, int /*peer: 0, checked*/, int tag) {
    auto op = std::make_shared<SelfOp>();
    op->kind = op_kind;
    op->tag = tag;
    op->tensor = buf;
    op->phase = log_.phase();
    op->t0 = log_.now_ms();
    op->owner = this;
    return op;
  }

  void deliver(SelfOp& recv, const SelfOp& send) {
    if (send.data.size() != recv.tensor.bytes())
      throw std::runtime_error("recv on '" + name_ + "' tag " + std::to_string(recv.tag) + ": message of " +
                               std::to_string(send.data.size()) + " bytes into a buffer of " +
                               std::to_string(recv.tensor.bytes()));
    from_host(be_, recv.tensor, send.data.data(), send.data.size());
    recv.done = true;
    recv.t_done = log_.now_ms();
  }

  void record(OpKind k, Phase ph, int64_t buffer_bytes, int peer, double t0, double t1) {
    log_.add(k, name_, {0}, 0, ph, buffer_bytes, peer, t0, t1);
  }

  CommLog& log_;
  Backend& be_;
  std::deque<std::shared_ptr<SelfOp>> sends_, recvs_;
};

}  // namespace

World& World::init(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  if (g_world) return *g_world;
  auto* w = new World();
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) std::strcpy(name, "localhost");
  w->host_ = name;
  g_world = w;
  return *w;
}

World& World::get() {
  if (!g_world) throw std::logic_error("World::get() before World::init()");
  return *g_world;
}

void World::finalize() {}
std::vector<int> World::node_map(int) { return {0}; }

std::vector<std::string> World::all_hosts() const { return {host_}; }
std::string World::mpi_version() const { return "none (built without MPI)"; }
void World::barrier() {}
void World::allreduce_max(std::vector<double>&) {}
void World::allreduce_min(std::vector<double>&) {}
void World::allreduce_sum(std::vector<double>&) {}
void World::allreduce_sum(std::vector<float>&) {}
void World::gather_to_root(const std::vector<double>& mine, std::vector<double>& all) { all = mine; }
void World::bcast_string(std::string&) {}
std::vector<std::string> World::gather_strings(const std::string& mine) { return {mine}; }

void World::abort(int code) {
  std::fflush(nullptr);
  std::_Exit(code);
}

std::unique_ptr<Communicator> World::make_group(const std::vector<int>& ranks, const std::string& name, CommLog& log,
                                                Backend& backend, const std::string& kind) {
  if (kind == "nccl")
    throw std::invalid_argument("comm 'nccl' is not built in: this build has no MPI (CPBENCH_MPI=OFF), which NCCL "
                                "groups need");
  if (kind != "mpi") throw std::invalid_argument("unknown comm kind '" + kind + "' (expected mpi or nccl)");
  if (ranks.size() != 1 || ranks[0] != 0)
    throw std::invalid_argument("make_group '" + name + "': a world of one rank has only the group [0]");
  return std::make_unique<SerialCommunicator>(name, log, backend);
}

}  // namespace cpbench
