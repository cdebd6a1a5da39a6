// Placement names and the USP mesh: which world ranks form each Ulysses group and ring group.
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

// `n` ranks starting at `first`, `stride` apart.
std::vector<int> arith(int first, int stride, int n) {
  std::vector<int> g(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) g[static_cast<size_t>(j)] = first + j * stride;
  return g;
}

// The contiguous groups have `inner` ranks; the strided groups have P/inner ranks, stride inner.
std::vector<int> contiguous_group(int rank, int inner) { return arith(rank / inner * inner, 1, inner); }
std::vector<int> strided_group(int rank, int inner, int outer) { return arith(rank % inner, inner, outer); }

}  // namespace

std::vector<int> Mesh::ulysses_group_of(int rank, int P, int U, int R, Placement pl) {
  check_mesh(P, U, R);
  check_rank(rank, P);
  return pl == Placement::ulysses_inner ? contiguous_group(rank, U) : strided_group(rank, R, U);
}

std::vector<int> Mesh::ring_group_of(int rank, int P, int U, int R, Placement pl) {
  check_mesh(P, U, R);
  check_rank(rank, P);
  return pl == Placement::ulysses_inner ? strided_group(rank, U, R) : contiguous_group(rank, R);
}

Mesh Mesh::build(World& w, int U, int R, Placement pl, CommLog& log, Backend& be,
                 const std::string& comm_kind) {
  const int P = w.size();
  check_mesh(P, U, R);  // same values on every rank: all ranks throw together, before any collective
  Mesh m;
  m.P = P;
  m.U = U;
  m.R = R;
  m.placement = pl;
  std::vector<int> all(static_cast<size_t>(P));
  std::iota(all.begin(), all.end(), 0);
  m.cp = w.make_group(all, "cp", log, be, comm_kind);
  m.ulysses = w.make_group(ulysses_group_of(w.rank(), P, U, R, pl), "ulysses", log, be, comm_kind);
  m.ring = w.make_group(ring_group_of(w.rank(), P, U, R, pl), "ring", log, be, comm_kind);
  return m;
}

}  // namespace cpbench
