// The communicator interface over one process group, and the per-rank log of every call.
// Implementations: MPI (comm/mpi_communicator.*) and NCCL (comm/nccl_communicator.*).
//
// Byte accounting (DESIGN, the nccl-tests convention): bytes_sent is the logical volume that
// leaves this rank, independent of the algorithm. With g = group size:
//   all_to_all     (g-1)/g of its send buffer      all_gather   its shard, g-1 times
//   reduce_scatter (g-1)/g of its input            send         its buffer;   recv sends 0
// A group of one rank sends nothing (and the call is recorded with 0 bytes).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace cpbench {

// recompute: a forward repeated inside the backward (--recompute selective|full), its bytes a term
// of their own (DESIGN "Recompute").
enum class Phase { fwd = 0, bwd = 1, other = 2, recompute = 3 };
const char* phase_name(Phase p);

enum class OpKind { all_to_all, all_gather, reduce_scatter, send, recv, barrier };
const char* op_name(OpKind k);

struct CommRecord {
  OpKind op;
  std::string group;  // "world", "ulysses", "ring", "tp", ...
  int group_size;
  Phase phase;
  int64_t bytes_sent;    // this rank's logical bytes out (see above)
  int64_t buffer_bytes;  // the op's buffer size (send buffer; recv for recv)
  int peer;              // send/recv: peer rank within the group; -1 otherwise
  double t0_ms, t1_ms;   // issue and completion, on the rank's clock (CommLog::now_ms)
  // bytes_sent split by destination (DESIGN "Nodes and tiers"): to ranks on this rank's node,
  // and to ranks on other nodes. intra + inter == bytes_sent.
  int64_t intra_node_bytes = 0, inter_node_bytes = 0;
};

// DESIGN's per-destination split of one call's logical bytes: all_to_all and reduce_scatter send
// buffer/g to each other member, all_gather its shard to each other member, send its buffer to
// the peer. `members` are the group's world ranks in group order, `me` and `peer` group ranks,
// `node_of` the node of every world rank (empty: one node).
struct TierBytes {
  int64_t intra = 0, inter = 0;
};
TierBytes split_by_tier(OpKind op, int64_t buffer_bytes, const std::vector<int>& members, int me, int peer,
                        const std::vector<int>& node_of);

// The blocking call a rank is in now (what the watchdog reports when it lasts too long).
struct InFlightCall {
  OpKind op = OpKind::barrier;
  std::string group;       // "ring", ...
  std::vector<int> peers;  // world ranks it waits for (the other members; the peer of a wait)
  Phase phase = Phase::other;
  double since_ms = 0;     // now_ms() at entry
};

// Every communicator of a rank appends to one log. The harness sets the phase and clears it.
class CommLog {
 public:
  // Communicators bracket every blocking call (collectives, wait, barrier) with enter/leave.
  // Thread-safe: the watchdog thread reads it.
  void enter(OpKind op, const std::string& group, std::vector<int> peers);
  void leave();
  bool in_flight(InFlightCall* out) const;  // false when in no call
  Phase phase() const { return phase_; }
  void set_phase(Phase p) { phase_ = p; }
  double now_ms() const;  // cpbench::now_ms(): the process-wide steady clock compute records use
  std::vector<CommRecord>& records() { return records_; }
  // Appends the record of one completed call of a group (members: world ranks in group order;
  // me, peer: group ranks, peer -1 for collectives): its logical bytes and their split by tier.
  // Every communicator counts its bytes here, so there is one place where a byte is counted.
  void add(OpKind op, const std::string& group, const std::vector<int>& members, int me, Phase ph,
           int64_t buffer_bytes, int peer, double t0, double t1);
  // The node of every world rank (World::node_map); empty (the default) means one node.
  void set_node_map(std::vector<int> node_of) { node_of_ = std::move(node_of); }
  const std::vector<int>& node_map() const { return node_of_; }
  void clear() { records_.clear(); }

 private:
  Phase phase_ = Phase::other;
  std::vector<CommRecord> records_;
  std::vector<int> node_of_;
  mutable std::mutex call_mu_;
  bool in_call_ = false;
  InFlightCall call_;
};

// Logical bytes sent by one call, per DESIGN's convention.
int64_t logical_bytes_sent(OpKind op, int64_t buffer_bytes, int group_size);

// Handle for a non-blocking send/recv.
struct Request {
  std::shared_ptr<void> impl;
  bool active() const { return impl != nullptr; }
};

// A communicator over one process group. Operations are stream-ordered with respect to the
// backend's compute stream: a buffer written by compute issued before the call is sent, and
// compute issued after the call (after wait(), for non-blocking ones) sees received data.
// On CPU the collectives block; isend/irecv progress in the background (comm thread).
//
// The public operations are non-virtual: they check their arguments here, once for every
// implementation (comm/communicator.cpp: sizes, dtypes, memory, overlap, peer, tag), and then
// call the implementation's do_*, which only moves data and logs it.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // within the group
  virtual int size() const = 0;
  const std::string& name() const { return name_; }

  // send [g * c] elements -> recv [g * c]: chunk j of send goes to rank j; chunk j of recv
  // comes from rank j.
  void all_to_all(const Tensor& send, Tensor& recv);
  // send [c] -> recv [g * c], chunk j from rank j.
  void all_gather(const Tensor& send, Tensor& recv);
  // send [g * c] -> recv [c] = sum over ranks of their chunk rank(); float32 sum (dtype of send).
  void reduce_scatter(const Tensor& send, Tensor& recv);
  // Non-blocking point-to-point; the buffer must stay alive until wait(). peer in [0, size()),
  // tag in [0, max_tag()].
  Request isend(const Tensor& buf, int peer, int tag);
  Request irecv(Tensor& buf, int peer, int tag);
  // Completes the request; afterwards compute may use (recv) or overwrite (send) the buffer.
  virtual void wait(Request& r) = 0;
  virtual void barrier() = 0;

 protected:
  // Called with arguments that passed the checks.
  virtual void do_all_to_all(const Tensor& send, Tensor& recv) = 0;
  virtual void do_all_gather(const Tensor& send, Tensor& recv) = 0;
  virtual void do_reduce_scatter(const Tensor& send, Tensor& recv) = 0;
  virtual Request do_isend(const Tensor& buf, int peer, int tag) = 0;
  virtual Request do_irecv(Tensor& buf, int peer, int tag) = 0;
  // The largest tag the transport accepts (MPI: the communicator's MPI_TAG_UB).
  virtual int max_tag() const;
  // True when the implementation copies send and recv through host buffers of its own, so that
  // they may overlap (MPI on device memory); otherwise in-place calls are refused.
  virtual bool stages_buffers() const { return false; }
  // What the checks' messages call the implementation ("mpi", "nccl", "self").
  virtual const char* kind() const = 0;

  std::string name_;

 private:
  void check_collective(OpKind op, const Tensor& send, const Tensor& recv) const;
  void check_p2p(OpKind op, const Tensor& buf, int peer, int tag) const;
};

}  // namespace cpbench
