// Meshes: named levels, outermost first, and which world ranks form each level's groups
// (Mesh::group_of: mixed radix, the last level contiguous). Group order is ascending world rank,
// so group rank = index in the list. The meaning of the levels (tp, ulysses, ring, the placement)
// belongs to bench/strategy.h's MeshSpec.
#include <numeric>
#include <stdexcept>
#include <string>

#include "comm/communicator.h"
#include "comm/world.h"

namespace cpbench {

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
