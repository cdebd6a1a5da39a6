// The job's world: rank, size, node-local rank, and the harness's own (uncounted, untimed)
// collectives on small host data. Backed by MPI, or by a single-rank stub when built without MPI.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cpbench {

class Communicator;
class CommLog;
class Backend;

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
  // Distinct host names, in rank order, on rank 0 (which writes the report); the other ranks get an
  // empty list. Collective: a gather to rank 0, not an all-gather (P x MPI_MAX_PROCESSOR_NAME bytes
  // on every rank, and P^2 messages for a simulated cluster of thousands of hosts).
  std::vector<std::string> all_hosts() const;
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

// One level of a mesh: its name ("ulysses", "ring", "ring_inner", ...) and its group size.
struct MeshLevel {
  std::string name;
  int size = 1;
  bool operator==(const MeshLevel& o) const { return name == o.name && size == o.size; }
};

// A mesh description: named levels, OUTERMOST FIRST. The last level's groups are contiguous
// ranks (stride 1); level i has stride = product of the sizes after it. The product of the sizes
// is the number of ranks P. A level's group of a rank: the ranks that differ from it only in
// that level's coordinate. Pure data, independent of the job's sequence and shape, so equal
// descriptions give equal meshes (a harness may build one per description and reuse it).
struct MeshDesc {
  std::vector<MeshLevel> levels;
  // A second factorization of the same ranks for the MLP sub-layer (per-sub-layer meshes:
  // `--mlp-tp N` is {mlp_dp = P/N, mlp_tp = N}), outermost first, its names distinct from
  // `levels`'; empty: the MLP runs on `levels`. Its groups are looked up by name like the others.
  std::vector<MeshLevel> mlp;

  int ranks() const;                            // product of the sizes (1 when empty)
  bool has(const std::string& level) const;    // in `levels` or `mlp`
  int size_of(const std::string& level) const;  // 1 for a level the mesh does not have
  std::string key() const;                      // "ring=4/ulysses=2[|mlp_dp=1/mlp_tp=4]": one key per description
  bool operator==(const MeshDesc& o) const { return levels == o.levels && mlp == o.mlp; }
};

// The process groups of one strategy run: the whole CP group and one group per mesh level.
// Built once per description: nothing here depends on a job's sequence or shape. What the levels
// mean (tp, ulysses, ring; the placement that orders them) is the strategies' business
// (bench/strategy.h MeshSpec): here a mesh is only named levels.
struct Mesh {
  int P = 1;
  MeshDesc desc;
  std::unique_ptr<Communicator> cp;                  // all P ranks, "cp"
  std::vector<std::unique_ptr<Communicator>> groups;  // this rank's group of desc.levels[i], then of desc.mlp[i]
  // The log its communicators record into (the harness sets the phase; a block repeating its
  // forward under --recompute switches it to Phase::recompute and back).
  CommLog* log = nullptr;

  // This rank's group of `level` (named as the level). Throws std::invalid_argument naming the
  // levels when the mesh has no such level.
  Communicator& group(const std::string& level) const;
  int size_of(const std::string& level) const { return desc.size_of(level); }

  // World ranks of `rank`'s group at `level`, in group order (ascending world rank). Pure
  // function of the description and the rank; throws std::invalid_argument naming the values
  // for an unknown level or a rank outside [0, P).
  static std::vector<int> group_of(int rank, const MeshDesc& d, const std::string& level);
  // Collective over the world: every rank builds the cp group and one group per level.
  static Mesh build(World& w, const MeshDesc& d, CommLog& log, Backend& be,
                    const std::string& comm_kind);
};

// Meshes built once per description and reused across jobs (issue: three group splits or NCCL
// inits per job otherwise). Building is collective over the world: every rank must ask for the
// same descriptions in the same order (the harness's job loop does); a description seen before
// returns the mesh built then, without any communication.
class MeshCache {
 public:
  MeshCache(World& w, CommLog& log, Backend& be, std::string comm_kind);
  ~MeshCache();  // out of line: Communicator is complete only in the .cpp
  Mesh& get(const MeshDesc& d);
  size_t built() const { return meshes_.size(); }  // distinct meshes built so far

 private:
  World& w_;
  CommLog& log_;
  Backend& be_;
  std::string comm_kind_;
  std::vector<std::pair<std::string, std::unique_ptr<Mesh>>> meshes_;  // key(), mesh
};

}  // namespace cpbench
