// The job's world: rank, size, node-local rank, and the harness's own (uncounted, untimed)
// collectives on small host data. Backed by MPI, or by a single-rank stub when built without MPI.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace cpbench {

class Communicator;
class CommLog;
class Backend;

enum class Placement { ulysses_inner, ring_inner };
const char* placement_name(Placement p);
Placement parse_placement(const std::string& s);  // throws std::invalid_argument

class World {
 public:
  // Initialises MPI with MPI_THREAD_MULTIPLE (each rank's comm thread polls point-to-point
  // requests while the main thread runs collectives); throws if the library provides less.
  static World& init(int* argc, char*** argv);
  static World& get();
  void finalize();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  std::vector<std::string> all_hosts() const;  // distinct host names, in rank order
  // The node of every world rank (DESIGN "Nodes and tiers"). ranks_per_node K > 0 emulates nodes:
  // rank r is on node r / K (the caller checks that K divides P). 0: ranks sharing a host
  // (MPI_Comm_split_type, shared memory) form a node; nodes are numbered in order of their lowest
  // rank. Collective.
  std::vector<int> node_map(int ranks_per_node);
  std::string mpi_version() const;

  // Harness collectives (not counted as layer communication).
  void barrier();
  void allreduce_max(std::vector<double>& v);
  void allreduce_min(std::vector<double>& v);
  void allreduce_sum(std::vector<double>& v);
  void allreduce_sum(std::vector<float>& v);
  void gather_to_root(const std::vector<double>& mine, std::vector<double>& all);  // all on rank 0
  void bcast_string(std::string& s);  // from rank 0
  std::vector<std::string> gather_strings(const std::string& mine);  // all on rank 0 (rank order)
  // Abort every rank with a non-zero code (after the caller printed its message).
  [[noreturn]] void abort(int code);

  // A new communicator over the ranks in `ranks` (world ranks, in group-rank order), named
  // `name`, logging to `log`. Collective over the whole world: every rank calls it with the
  // partition it belongs to; ranks must list a partition of the world consistently.
  std::unique_ptr<Communicator> make_group(const std::vector<int>& ranks, const std::string& name,
                                           CommLog& log, Backend& backend,
                                           const std::string& kind /* "mpi" | "nccl" */);

 private:
  World() = default;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int node_leader_ = 0;  // lowest world rank on this rank's host
  std::string host_;
};

// The process groups of one strategy run: the whole CP group, and for USP the Ulysses groups
// (U contiguous ranks by default: intra-node) and the ring groups (R ranks strided by U).
// ring-inner flips it: ring groups on contiguous ranks.
struct Mesh {
  int P = 1, U = 1, R = 1;
  Placement placement = Placement::ulysses_inner;
  std::unique_ptr<Communicator> cp;       // all P ranks, "cp"
  std::unique_ptr<Communicator> ulysses;  // U ranks, "ulysses"
  std::unique_ptr<Communicator> ring;     // R ranks, "ring"
  // World ranks of this rank's Ulysses group and ring group, in group order (pure function of
  // P, U, R, placement and rank; tested).
  static std::vector<int> ulysses_group_of(int rank, int P, int U, int R, Placement pl);
  static std::vector<int> ring_group_of(int rank, int P, int U, int R, Placement pl);
  static Mesh build(World& w, int U, int R, Placement pl, CommLog& log, Backend& be,
                    const std::string& comm_kind);
};

}  // namespace cpbench
