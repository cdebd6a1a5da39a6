// Meshes: named levels, outermost first, and which world ranks form each level's groups
// (Mesh::group_of: mixed radix, the last level contiguous). Group order is ascending world rank,
// so group rank = index in the list. The meaning of the levels (tp, ulysses, ring, the placement)
// belongs to bench/strategy.h's MeshSpec.
#include <cstdint>
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
  if (!d.mlp.empty()) {
    s += "; mlp:";
    for (const MeshLevel& l : d.mlp) s += " " + l.name + "=" + std::to_string(l.size);
  }
  return "{" + s + "}";
}

int64_t product(const std::vector<MeshLevel>& levels) {
  int64_t p = 1;
  for (const MeshLevel& l : levels) p *= l.size;
  return p;
}

// Every level of both factorizations, `levels` first (the order of Mesh::groups).
std::vector<MeshLevel> all_levels(const MeshDesc& d) {
  std::vector<MeshLevel> all = d.levels;
  all.insert(all.end(), d.mlp.begin(), d.mlp.end());
  return all;
}

void check_desc(const MeshDesc& d) {
  const std::vector<MeshLevel> all = all_levels(d);
  for (size_t i = 0; i < all.size(); ++i) {
    const MeshLevel& l = all[i];
    if (l.size < 1 || l.name.empty())
      throw std::invalid_argument("mesh: level sizes must be >= 1 and names non-empty: " + levels_str(d));
    for (size_t j = 0; j < i; ++j)
      if (all[j].name == l.name)
        throw std::invalid_argument("mesh: level '" + l.name + "' appears twice: " + levels_str(d));
  }
  if (!d.mlp.empty() && product(d.mlp) != product(d.levels))
    throw std::invalid_argument("mesh: the MLP's levels span " + std::to_string(product(d.mlp)) + " ranks, the mesh " +
                                std::to_string(product(d.levels)) + ": " + levels_str(d));
}

// The factorization that holds `level` (null: neither).
const std::vector<MeshLevel>* factorization_of(const MeshDesc& d, const std::string& level) {
  for (const std::vector<MeshLevel>* f : {&d.levels, &d.mlp})
    for (const MeshLevel& l : *f)
      if (l.name == level) return f;
  return nullptr;
}

// The index of `level` in `levels` then `mlp` (the order of Mesh::groups); -1: neither. No copy:
// Mesh::group runs in a strategy's timed step.
int level_index(const MeshDesc& d, const std::string& level) {
  for (size_t i = 0; i < d.levels.size(); ++i)
    if (d.levels[i].name == level) return int(i);
  for (size_t i = 0; i < d.mlp.size(); ++i)
    if (d.mlp[i].name == level) return int(d.levels.size() + i);
  return -1;
}

void check_rank(int rank, int P) {
  if (rank < 0 || rank >= P)
    throw std::invalid_argument("mesh: rank " + std::to_string(rank) + " is outside [0, " +
                                std::to_string(P) + ")");
}

}  // namespace

int MeshDesc::ranks() const { return int(product(levels)); }

bool MeshDesc::has(const std::string& level) const { return level_index(*this, level) >= 0; }

int MeshDesc::size_of(const std::string& level) const {
  const int i = level_index(*this, level);
  if (i < 0) return 1;
  return size_t(i) < levels.size() ? levels[size_t(i)].size : mlp[size_t(i) - levels.size()].size;
}

std::string MeshDesc::key() const {
  std::string k;
  for (const MeshLevel& l : levels) k += (k.empty() ? "" : "/") + l.name + "=" + std::to_string(l.size);
  for (size_t i = 0; i < mlp.size(); ++i) k += (i == 0 ? "|" : "/") + mlp[i].name + "=" + std::to_string(mlp[i].size);
  return k;
}

std::vector<int> Mesh::group_of(int rank, const MeshDesc& d, const std::string& level) {
  check_desc(d);
  const int P = d.ranks();
  check_rank(rank, P);
  // Mixed radix within the level's factorization: its last level varies fastest. The group keeps
  // every other coordinate.
  const std::vector<MeshLevel>* f = factorization_of(d, level);
  if (!f) throw std::invalid_argument("mesh: no level '" + level + "' in " + levels_str(d));
  int stride = 1;
  for (size_t i = f->size(); i-- > 0;) {
    const MeshLevel& l = (*f)[i];
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
  const int i = level_index(desc, level);
  if (i >= 0 && size_t(i) < groups.size() && groups[size_t(i)]) return *groups[size_t(i)];
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
  m.log = &log;
  std::vector<int> all(static_cast<size_t>(P));
  std::iota(all.begin(), all.end(), 0);
  m.cp = w.make_group(all, "cp", log, be, comm_kind);
  for (const MeshLevel& l : all_levels(d))
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
