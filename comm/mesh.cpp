// Placement names and meshes: named levels, outermost first, and which world ranks form each
// level's groups (Mesh::group_of). The two-level USP mesh is one case of it:
//
//   ulysses-inner (default): Ulysses group k = ranks [k*U, (k+1)*U)  (contiguous: intra-node)
//                            ring group j    = ranks {j, j+U, j+2U, ...}  (stride U)
//   ring-inner:              ring group k    = ranks [k*R, (k+1)*R)
//                            Ulysses group j = ranks {j, j+R, j+2R, ...}  (stride R)
// Group order is ascending world rank, so group rank = index in the list.
#include <numeric>
#include <stdexcept>
#include <string>

#include "comm/communicator.h"
#include "comm/world.h"

namespace cpbench {

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::ulysses_inner: return "ulysses-inner";
    case Placement::ring_inner: return "ring-inner";
  }
  return "?";
}

Placement parse_placement(const std::string& s) {
  if (s == "ulysses-inner") return Placement::ulysses_inner;
  if (s == "ring-inner") return Placement::ring_inner;
  throw std::invalid_argument("unknown placement '" + s + "' (expected ulysses-inner or ring-inner)");
}

namespace {

std::string levels_str(const MeshDesc& d) {
  std::string s;
  for (const MeshLevel& l : d.levels) s += (s.empty() ? "" : ", ") + l.name + "=" + std::to_string(l.size);
  return "{" + s + "}";
}

void check_desc(const MeshDesc& d) {
  for (size_t i = 0; i < d.levels.size(); ++i) {
    const MeshLevel& l = d.levels[i];
    if (l.size < 1 || l.name.empty())
      throw std::invalid_argument("mesh: level sizes must be >= 1 and names non-empty: " + levels_str(d));
    for (size_t j = 0; j < i; ++j)
      if (d.levels[j].name == l.name)
        throw std::invalid_argument("mesh: level '" + l.name + "' appears twice: " + levels_str(d));
  }
}

void check_mesh(int P, int U, int R) {
  if (P < 1 || U < 1 || R < 1 || int64_t(U) * R != P)
    throw std::invalid_argument("mesh U x R must equal the number of ranks P with U, R >= 1: U=" +
                                std::to_string(U) + " R=" + std::to_string(R) +
                                " P=" + std::to_string(P));
}

void check_rank(int rank, int P) {
  if (rank < 0 || rank >= P)
    throw std::invalid_argument("mesh: rank " + std::to_string(rank) + " is outside [0, " +
                                std::to_string(P) + ")");
}

}  // namespace

int MeshDesc::ranks() const {
  int64_t p = 1;
  for (const MeshLevel& l : levels) p *= l.size;
  return int(p);
}

bool MeshDesc::has(const std::string& level) const {
  for (const MeshLevel& l : levels)
    if (l.name == level) return true;
  return false;
}

int MeshDesc::size_of(const std::string& level) const {
  for (const MeshLevel& l : levels)
    if (l.name == level) return l.size;
  return 1;
}

std::string MeshDesc::key() const {
  std::string k;
  for (const MeshLevel& l : levels) k += (k.empty() ? "" : "/") + l.name + "=" + std::to_string(l.size);
  return k;
}

MeshDesc MeshDesc::two_level(int U, int R, Placement pl) {
  MeshDesc d;
  if (pl == Placement::ulysses_inner) d.levels = {{"ring", R}, {"ulysses", U}};
  else d.levels = {{"ulysses", U}, {"ring", R}};
  return d;
}

std::vector<int> Mesh::group_of(int rank, const MeshDesc& d, const std::string& level) {
  check_desc(d);
  const int P = d.ranks();
  check_rank(rank, P);
  // Mixed radix: the last level varies fastest. The group keeps every other coordinate.
  int stride = 1;
  for (size_t i = d.levels.size(); i-- > 0;) {
    const MeshLevel& l = d.levels[i];
    if (l.name == level) {
      const int coord = rank / stride % l.size;
      const int first = rank - coord * stride;
      std::vector<int> g(static_cast<size_t>(l.size));
      for (int j = 0; j < l.size; ++j) g[static_cast<size_t>(j)] = first + j * stride;
      return g;
    }
    stride *= l.size;
  }
  throw std::invalid_argument("mesh: no level '" + level + "' in " + levels_str(d));
}

Communicator& Mesh::group(const std::string& level) const {
  for (size_t i = 0; i < desc.levels.size(); ++i)
    if (desc.levels[i].name == level && groups[i]) return *groups[i];
  throw std::invalid_argument("mesh: no level '" + level + "' in " + levels_str(desc));
}

Mesh Mesh::build(World& w, const MeshDesc& d, CommLog& log, Backend& be, const std::string& comm_kind) {
  check_desc(d);  // same description on every rank: all ranks throw together, before any collective
  const int P = w.size();
  if (d.ranks() != P)
    throw std::invalid_argument("mesh " + levels_str(d) + " has " + std::to_string(d.ranks()) +
                                " ranks, but P=" + std::to_string(P));
  Mesh m;
  m.P = P;
  m.desc = d;
  std::vector<int> all(static_cast<size_t>(P));
  std::iota(all.begin(), all.end(), 0);
  m.cp = w.make_group(all, "cp", log, be, comm_kind);
  for (const MeshLevel& l : d.levels)
    m.groups.push_back(w.make_group(group_of(w.rank(), d, l.name), l.name, log, be, comm_kind));
  m.U = d.size_of("ulysses");
  m.R = d.size_of("ring");
  // The placement orders ulysses against ring; the tp level (always innermost) does not count.
  m.placement = Placement::ulysses_inner;
  for (size_t i = d.levels.size(); i-- > 0;)
    if (d.levels[i].name != "tp") {
      if (d.levels[i].name.rfind("ring", 0) == 0) m.placement = Placement::ring_inner;
      break;
    }
  for (size_t i = 0; i < d.levels.size(); ++i) {
    if (d.levels[i].name == "ulysses") m.ulysses = m.groups[i].get();
    if (d.levels[i].name == "ring") m.ring = m.groups[i].get();
  }
  return m;
}

std::vector<int> Mesh::ulysses_group_of(int rank, int P, int U, int R, Placement pl) {
  check_mesh(P, U, R);
  return group_of(rank, MeshDesc::two_level(U, R, pl), "ulysses");
}

std::vector<int> Mesh::ring_group_of(int rank, int P, int U, int R, Placement pl) {
  check_mesh(P, U, R);
  return group_of(rank, MeshDesc::two_level(U, R, pl), "ring");
}

Mesh Mesh::build(World& w, int U, int R, Placement pl, CommLog& log, Backend& be,
                 const std::string& comm_kind) {
  check_mesh(w.size(), U, R);
  Mesh m = build(w, MeshDesc::two_level(U, R, pl), log, be, comm_kind);
  m.placement = pl;
  return m;
}

MeshCache::MeshCache(World& w, CommLog& log, Backend& be, std::string comm_kind)
    : w_(w), log_(log), be_(be), comm_kind_(std::move(comm_kind)) {}
MeshCache::~MeshCache() = default;

Mesh& MeshCache::get(const MeshDesc& d) {
  const std::string key = d.key();
  for (auto& [k, m] : meshes_)
    if (k == key) return *m;
  meshes_.emplace_back(key, std::make_unique<Mesh>(Mesh::build(w_, d, log_, be_, comm_kind_)));
  return *meshes_.back().second;
}

}  // namespace cpbench
