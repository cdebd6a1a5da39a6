// World over MPI. MPI_THREAD_MULTIPLE is required: each rank's comm thread polls its
// point-to-point requests while the main thread runs collectives (see mpi_communicator.h).
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/world.h"
#ifdef CPBENCH_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace cpbench {

namespace {

World* g_world = nullptr;

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

// Every rank learns whether all ranks are ok; returns the lowest failing world rank or -1.
int first_failure(bool ok, int my_rank) {
  int mine = ok ? INT32_MAX : my_rank, lowest = INT32_MAX;
  MPI_CHECK(MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return lowest == INT32_MAX ? -1 : lowest;
}

std::string list_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// The first step of a Gatherv to rank 0: every rank's element count n, and on rank 0 the counts,
// their displacements (prefix sums) and the total (0 on the other ranks).
int gather_counts(int n, int world_size, std::vector<int>& counts, std::vector<int>& displs) {
  counts.assign(static_cast<size_t>(world_size), 0);
  displs.assign(static_cast<size_t>(world_size), 0);
  MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  int total = 0;
  for (int r = 0; r < world_size; ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += counts[static_cast<size_t>(r)];
  }
  return total;
}

}  // namespace

World& World::init(int* argc, char*** argv) {
  if (g_world) return *g_world;
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  }
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
#ifdef CPBENCH_SIMULATED
  // cpbench-sim: SMPI serves MPI only on each rank's own thread (it reports MPI_THREAD_SINGLE) and
  // the communicator progresses point-to-point inline on that thread (mpi_communicator.h).
  const int needed = MPI_THREAD_SINGLE;
#else
  const int needed = MPI_THREAD_MULTIPLE;
#endif
  if (provided < needed)
    // Same on every rank, so every rank throws; no rank is left waiting.
    throw std::runtime_error(std::string("cpbench needs MPI_THREAD_MULTIPLE (a comm thread polls while the main "
                                         "thread runs collectives), but the MPI library provides ") +
                             thread_level_name(provided));
  auto* w = new World();
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w->rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w->size_));
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &w->local_rank_));
  MPI_CHECK(MPI_Comm_size(node, &w->local_size_));
  MPI_CHECK(MPI_Allreduce(&w->rank_, &w->node_leader_, 1, MPI_INT, MPI_MIN, node));
  MPI_CHECK(MPI_Comm_free(&node));
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &len));
  w->host_.assign(name, static_cast<size_t>(len));
  g_world = w;
  return *w;
}

World& World::get() {
  if (!g_world) throw std::logic_error("World::get() before World::init()");
  return *g_world;
}

void World::finalize() {
  mpi_p2p_shutdown();  // the comm thread makes MPI calls: stop it first
#if defined(__SANITIZE_ADDRESS__)
  // Sanitizer build: check for leaks now, while Open MPI's own allocations are still reachable
  // from its globals (after MPI_Finalize they are not, and the frames of its unloaded components
  // cannot be symbolized or suppressed). The end-of-process check is then skipped.
  __lsan_do_leak_check();
#endif
  int fin = 0;
  MPI_Finalized(&fin);
  settle_clock();
  if (!fin) MPI_Finalize();
}

std::vector<std::string> World::all_hosts() const {
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, '\0');
  std::copy(host_.begin(), host_.begin() + std::min<size_t>(host_.size(), MPI_MAX_PROCESSOR_NAME - 1), mine.begin());
  std::vector<char> all(rank_ == 0 ? static_cast<size_t>(MPI_MAX_PROCESSOR_NAME) * static_cast<size_t>(size_) : 0);
  MPI_CHECK(MPI_Gather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
                       MPI_COMM_WORLD));
  std::vector<std::string> hosts;
  if (rank_ != 0) return hosts;
  std::unordered_set<std::string> seen;
  for (int r = 0; r < size_; ++r) {
    std::string h(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    if (seen.insert(h).second) hosts.push_back(h);
  }
  return hosts;
}

std::vector<int> World::node_map(int ranks_per_node) {
  std::vector<int> node(static_cast<size_t>(size_));
  if (ranks_per_node > 0) {
    for (int r = 0; r < size_; ++r) node[static_cast<size_t>(r)] = r / ranks_per_node;
    return node;
  }
  std::vector<int> leader(static_cast<size_t>(size_));
  MPI_CHECK(MPI_Allgather(&node_leader_, 1, MPI_INT, leader.data(), 1, MPI_INT, MPI_COMM_WORLD));
  std::vector<int> number_of_leader(static_cast<size_t>(size_), -1);
  int next = 0;
  for (int r = 0; r < size_; ++r) {
    int& n = number_of_leader[static_cast<size_t>(leader[static_cast<size_t>(r)])];
    if (n < 0) n = next++;
    node[static_cast<size_t>(r)] = n;
  }
  return node;
}

std::string World::mpi_version() const {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_CHECK(MPI_Get_library_version(buf, &len));
  std::string s(buf, static_cast<size_t>(len));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

void World::barrier() { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

void World::allreduce_max(std::vector<double>& v) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
}
void World::allreduce_min(std::vector<double>& v) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
}
void World::allreduce_sum(std::vector<double>& v) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}
void World::allreduce_sum(std::vector<float>& v) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
}

void World::gather_to_root(const std::vector<double>& mine, std::vector<double>& all) {
  const int n = static_cast<int>(mine.size());
  std::vector<int> counts, displs;
  const int total = gather_counts(n, size_, counts, displs);
  all.assign(static_cast<size_t>(total), 0.0);
  MPI_CHECK(MPI_Gatherv(mine.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0,
                        MPI_COMM_WORLD));
}

void World::bcast_string(std::string& s) {
  long long n = static_cast<long long>(s.size());
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
  s.resize(static_cast<size_t>(n));
  if (n > 0) MPI_CHECK(MPI_Bcast(&s[0], static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD));
}

std::vector<std::string> World::gather_strings(const std::string& mine) {
  const int n = static_cast<int>(mine.size());
  std::vector<int> counts, displs;
  const int total = gather_counts(n, size_, counts, displs);
  std::vector<char> all(static_cast<size_t>(total) + 1);
  MPI_CHECK(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0,
                        MPI_COMM_WORLD));
  std::vector<std::string> out;
  if (rank_ == 0)
    for (int r = 0; r < size_; ++r)
      out.emplace_back(all.data() + displs[static_cast<size_t>(r)], static_cast<size_t>(counts[static_cast<size_t>(r)]));
  return out;
}

void World::abort(int code) {
  std::fflush(nullptr);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::unique_ptr<Communicator> World::make_group(const std::vector<int>& ranks, const std::string& name, CommLog& log,
                                                Backend& backend, const std::string& kind) {
  // Argument errors are the same on every rank (same kind string), so all ranks throw together.
  if (kind != "mpi" && kind != "nccl")
    throw std::invalid_argument("unknown comm kind '" + kind + "' (expected mpi or nccl)");
#ifndef CPBENCH_HAVE_NCCL
  if (kind == "nccl")
    throw std::invalid_argument("comm 'nccl' is not built in: this build has no NCCL (configure with the CUDA "
                                "backend and NCCL installed)");
#endif
  // Check the partition locally, then agree: a rank that throws alone would leave the others
  // blocked in the split.
  std::string why;
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (ranks.empty() || sorted.front() < 0 || sorted.back() >= size_)
    why = "ranks " + list_str(ranks) + " must be non-empty world ranks in [0, " + std::to_string(size_) + ")";
  else if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    why = "ranks " + list_str(ranks) + " list a rank twice";
  else if (!std::binary_search(sorted.begin(), sorted.end(), rank_))
    why = "ranks " + list_str(ranks) + " do not include this rank " + std::to_string(rank_);
  int bad = first_failure(why.empty(), rank_);
  if (bad >= 0)
    throw std::invalid_argument("make_group '" + name + "': invalid group on world rank " + std::to_string(bad) +
                                (why.empty() ? std::string() : " (here: " + why + ")"));

  const int color = sorted.front();  // the lowest member identifies the group
  const int key = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm));
  // The ranks must have listed a consistent partition: check the members MPI put together.
  int gsize = 0;
  MPI_CHECK(MPI_Comm_size(comm, &gsize));
  std::vector<int> members(static_cast<size_t>(gsize));
  MPI_CHECK(MPI_Allgather(&rank_, 1, MPI_INT, members.data(), 1, MPI_INT, comm));
  bad = first_failure(members == ranks, rank_);
  if (bad >= 0) {
    MPI_Comm_free(&comm);
    throw std::invalid_argument("make_group '" + name + "': ranks do not list a consistent partition of the world" +
                                " (world rank " + std::to_string(bad) + " disagrees; here: listed " +
                                list_str(ranks) + ", grouped with " + list_str(members) + ")");
  }
#ifdef CPBENCH_HAVE_NCCL
  // The NCCL communicator takes over `comm` (it may use it to share its unique id, and frees it).
  if (kind == "nccl") return make_nccl_communicator(comm, name, log, backend);
#endif
  return make_mpi_communicator(comm, name, log, backend);
}

}  // namespace cpbench
