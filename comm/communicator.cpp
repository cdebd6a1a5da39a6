// The argument checks every communicator shares (communicator.h): one place for the rules, so
// that MPI, NCCL and the one-rank world refuse the same calls with the same messages.
#include "comm/communicator.h"

#include <climits>
#include <cstdint>
#include <stdexcept>

namespace cpbench {
namespace {

bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  if (na == 0 || nb == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + nb && pb < pa + na;
}

std::string shape_of(const Tensor& t) {
  return t.shape_str() + " " + dtype_name(t.dtype) + " (" + std::to_string(t.numel()) + " elements)";
}

}  // namespace

int Communicator::max_tag() const { return INT_MAX; }

void Communicator::check_collective(OpKind op, const Tensor& send, const Tensor& recv) const {
  const int64_t g = size();
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(std::string(op_name(op)) + " on '" + name_ + "' (group size " + std::to_string(g) +
                                ", " + kind() + "): " + why + "; send " + shape_of(send) + ", recv " +
                                shape_of(recv));
  };
  int64_t want_recv = 0;
  const char* rule = "";
  switch (op) {
    case OpKind::all_to_all:
      want_recv = send.numel();
      rule = "recv.numel() == send.numel()";
      break;
    case OpKind::all_gather:
      want_recv = send.numel() * g;
      rule = "recv.numel() == group size * send.numel()";
      break;
    case OpKind::reduce_scatter:
      want_recv = send.numel() / g;
      rule = "send.numel() == group size * recv.numel()";
      break;
    default:
      throw std::logic_error("check_collective: not a collective");
  }
  if (op != OpKind::all_gather && send.numel() % g != 0)
    fail("send's element count is not a multiple of the group size");
  if (send.dtype != recv.dtype) fail("send and recv dtypes differ");
  if (recv.numel() != want_recv) fail(std::string("need ") + rule);
  if ((send.data == nullptr && send.numel() > 0) || (recv.data == nullptr && recv.numel() > 0))
    fail("a buffer has no memory");
  if (!stages_buffers() && overlaps(send.data, send.bytes(), recv.data, recv.bytes()))
    fail("send and recv overlap (in-place is not supported)");
}

void Communicator::check_p2p(OpKind op, const Tensor& buf, int peer, int tag) const {
  const std::string what = std::string(op == OpKind::send ? "isend" : "irecv") + " on '" + name_ + "' (" + kind() +
                           "): ";
  if (peer < 0 || peer >= size())
    throw std::invalid_argument(what + "peer " + std::to_string(peer) + " outside the group [0, " +
                                std::to_string(size()) + ")");
  if (tag < 0 || tag > max_tag())
    throw std::invalid_argument(what + "tag " + std::to_string(tag) + " outside [0, " + std::to_string(max_tag()) +
                                "]");
  if (buf.data == nullptr && buf.numel() > 0) throw std::invalid_argument(what + "buffer has no memory");
}

void Communicator::all_to_all(const Tensor& send, Tensor& recv) {
  check_collective(OpKind::all_to_all, send, recv);
  do_all_to_all(send, recv);
}

void Communicator::all_gather(const Tensor& send, Tensor& recv) {
  check_collective(OpKind::all_gather, send, recv);
  do_all_gather(send, recv);
}

void Communicator::reduce_scatter(const Tensor& send, Tensor& recv) {
  check_collective(OpKind::reduce_scatter, send, recv);
  do_reduce_scatter(send, recv);
}

Request Communicator::isend(const Tensor& buf, int peer, int tag) {
  check_p2p(OpKind::send, buf, peer, tag);
  return do_isend(buf, peer, tag);
}

Request Communicator::irecv(Tensor& buf, int peer, int tag) {
  check_p2p(OpKind::recv, buf, peer, tag);
  return do_irecv(buf, peer, tag);
}

}  // namespace cpbench
