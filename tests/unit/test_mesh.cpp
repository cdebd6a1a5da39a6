// Mesh groups (pure functions of the levels and the rank), byte accounting, names and the
// comm log's clock. No MPI needed. Without MPI (CPBENCH_MPI=OFF) also the one-rank world.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <thread>

#include "comm/communicator.h"
#include "comm/world.h"
#include "tests/unit/comm_test_backend.h"

using namespace cpbench;

namespace {

std::vector<std::pair<int, int>> factorizations(int P) {
  std::vector<std::pair<int, int>> f;
  for (int U = 1; U <= P; ++U)
    if (P % U == 0) f.emplace_back(U, P / U);
  return f;
}

// usp's two levels, the inner one last (contiguous ranks), as bench/strategy.h's MeshSpec::desc
// orders them: ulysses-inner {ring R, ulysses U}, ring-inner {ulysses U, ring R}.
MeshDesc two_levels(int U, int R, bool ulysses_inner) {
  MeshDesc d;
  if (ulysses_inner) d.levels = {{"ring", R}, {"ulysses", U}};
  else d.levels = {{"ulysses", U}, {"ring", R}};
  return d;
}
std::vector<int> ulysses_group(int rank, int U, int R, bool ulysses_inner) {
  return Mesh::group_of(rank, two_levels(U, R, ulysses_inner), "ulysses");
}
std::vector<int> ring_group(int rank, int U, int R, bool ulysses_inner) {
  return Mesh::group_of(rank, two_levels(U, R, ulysses_inner), "ring");
}

bool is_arith(const std::vector<int>& g, int first, int stride) {
  for (size_t j = 0; j < g.size(); ++j)
    if (g[j] != first + static_cast<int>(j) * stride) return false;
  return true;
}

}  // namespace

TEST_CASE("mesh groups partition the ranks for every P <= 16, U x R and placement", "[mesh]") {
  for (int P = 1; P <= 16; ++P) {
    for (auto [U, R] : factorizations(P)) {
      for (const bool pl : {true, false}) {  // ulysses-inner, ring-inner
        INFO("P=" << P << " U=" << U << " R=" << R << (pl ? " ulysses-inner" : " ring-inner"));
        std::vector<int> uly_count(static_cast<size_t>(P), 0), ring_count(static_cast<size_t>(P), 0);
        std::set<std::vector<int>> uly_groups, ring_groups;
        for (int r = 0; r < P; ++r) {
          INFO("rank " << r);
          const auto ug = ulysses_group(r, U, R, pl);
          const auto rg = ring_group(r, U, R, pl);
          REQUIRE(ug.size() == static_cast<size_t>(U));
          REQUIRE(rg.size() == static_cast<size_t>(R));
          // Each member of a group computes the same group (consistent partition).
          for (int m : ug) CHECK(ulysses_group(m, U, R, pl) == ug);
          for (int m : rg) CHECK(ring_group(m, U, R, pl) == rg);
          // The Ulysses and ring groups of a rank meet in that rank only (a 2-D mesh).
          std::vector<int> both;
          std::set_intersection(ug.begin(), ug.end(), rg.begin(), rg.end(), std::back_inserter(both));
          CHECK(both == std::vector<int>{r});
          // Contiguity per placement; group order = ascending world rank.
          if (pl) {
            CHECK(is_arith(ug, r / U * U, 1));
            CHECK(is_arith(rg, r % U, U));
          } else {
            CHECK(is_arith(rg, r / R * R, 1));
            CHECK(is_arith(ug, r % R, R));
          }
          if (uly_groups.insert(ug).second)
            for (int m : ug) ++uly_count[static_cast<size_t>(m)];
          if (ring_groups.insert(rg).second)
            for (int m : rg) ++ring_count[static_cast<size_t>(m)];
        }
        CHECK(uly_groups.size() == static_cast<size_t>(R));
        CHECK(ring_groups.size() == static_cast<size_t>(U));
        for (int r = 0; r < P; ++r) {
          CHECK(uly_count[static_cast<size_t>(r)] == 1);  // every rank in exactly one group
          CHECK(ring_count[static_cast<size_t>(r)] == 1);
        }
      }
    }
  }
}

TEST_CASE("mesh groups: worked examples", "[mesh]") {
  // P = 8, U = 2, R = 4
  CHECK(ulysses_group(5, 2, 4, true) == std::vector<int>{4, 5});
  CHECK(ring_group(5, 2, 4, true) == std::vector<int>{1, 3, 5, 7});
  CHECK(ring_group(5, 2, 4, false) == std::vector<int>{4, 5, 6, 7});
  CHECK(ulysses_group(5, 2, 4, false) == std::vector<int>{1, 5});
  // P = 6, U = 3, R = 2
  CHECK(ulysses_group(4, 3, 2, true) == std::vector<int>{3, 4, 5});
  CHECK(ring_group(4, 3, 2, true) == std::vector<int>{1, 4});
  CHECK(ring_group(4, 3, 2, false) == std::vector<int>{4, 5});
  CHECK(ulysses_group(4, 3, 2, false) == std::vector<int>{0, 2, 4});
  // Degenerate meshes: pure Ulysses and pure ring.
  CHECK(ulysses_group(2, 4, 1, true) == std::vector<int>{0, 1, 2, 3});
  CHECK(ring_group(2, 4, 1, true) == std::vector<int>{2});
  CHECK(ring_group(2, 1, 4, true) == std::vector<int>{0, 1, 2, 3});
  CHECK(ulysses_group(2, 1, 4, true) == std::vector<int>{2});
}

TEST_CASE("mesh rejects ranks outside the mesh, naming the values", "[mesh]") {
  CHECK_THROWS_WITH(ring_group(4, 2, 2, true), Catch::Contains("rank 4 is outside [0, 4)"));
  CHECK_THROWS_AS(ulysses_group(-1, 2, 2, true), std::invalid_argument);
  CHECK_THROWS_AS(ulysses_group(0, 0, 4, true), std::invalid_argument);  // a level of size 0
}

TEST_CASE("N-level meshes: each level partitions the ranks, levels meet in one rank", "[mesh]") {
  // Every 3-level factorization of P <= 12, in every order of the level names.
  for (int P = 1; P <= 12; ++P) {
    for (int a = 1; a <= P; ++a) {
      if (P % a) continue;
      for (int b = 1; b <= P / a; ++b) {
        if ((P / a) % b) continue;
        const int c = P / a / b;
        MeshDesc d;
        d.levels = {{"ring_outer", a}, {"ring_inner", b}, {"ulysses", c}};
        INFO("mesh " << d.key());
        REQUIRE(d.ranks() == P);
        const int stride[3] = {b * c, c, 1};
        for (int li = 0; li < 3; ++li) {
          const MeshLevel& l = d.levels[static_cast<size_t>(li)];
          std::set<std::vector<int>> groups;
          for (int r = 0; r < P; ++r) {
            const auto g = Mesh::group_of(r, d, l.name);
            REQUIRE(g.size() == static_cast<size_t>(l.size));
            CHECK(std::find(g.begin(), g.end(), r) != g.end());
            CHECK(is_arith(g, g.front(), stride[li]));  // the level's stride, ascending
            for (int m : g) CHECK(Mesh::group_of(m, d, l.name) == g);
            groups.insert(g);
          }
          CHECK(groups.size() == static_cast<size_t>(P / l.size));  // disjoint groups cover P
        }
        for (int r = 0; r < P; ++r)
          for (int i = 0; i < 3; ++i)
            for (int j = i + 1; j < 3; ++j) {
              const auto gi = Mesh::group_of(r, d, d.levels[static_cast<size_t>(i)].name);
              const auto gj = Mesh::group_of(r, d, d.levels[static_cast<size_t>(j)].name);
              std::vector<int> both;
              std::set_intersection(gi.begin(), gi.end(), gj.begin(), gj.end(), std::back_inserter(both));
              CHECK(both == std::vector<int>{r});
            }
      }
    }
  }
}

TEST_CASE("N-level meshes: worked example, two-level equivalence, errors", "[mesh]") {
  // P = 8: a double ring of 2 windows x 2 ranks around Ulysses pairs.
  MeshDesc d;
  d.levels = {{"ring_outer", 2}, {"ring_inner", 2}, {"ulysses", 2}};
  CHECK(Mesh::group_of(5, d, "ulysses") == std::vector<int>{4, 5});
  CHECK(Mesh::group_of(5, d, "ring_inner") == std::vector<int>{5, 7});
  CHECK(Mesh::group_of(5, d, "ring_outer") == std::vector<int>{1, 5});
  CHECK(d.key() == "ring_outer=2/ring_inner=2/ulysses=2");
  CHECK(d.size_of("ring_inner") == 2);
  CHECK(d.size_of("ring") == 1);  // a level the mesh lacks has groups of one
  CHECK_FALSE(d.has("ring"));
  CHECK_THROWS_WITH(Mesh::group_of(0, d, "ring"),
                    Catch::Contains("no level 'ring'") && Catch::Contains("ring_outer=2"));
  CHECK_THROWS_WITH(Mesh::group_of(8, d, "ulysses"), Catch::Contains("rank 8 is outside [0, 8)"));
  MeshDesc twice;
  twice.levels = {{"ring", 2}, {"ring", 2}};
  CHECK_THROWS_WITH(Mesh::group_of(0, twice, "ring"), Catch::Contains("'ring' appears twice"));
  MeshDesc zero;
  zero.levels = {{"ring", 0}};
  CHECK_THROWS_AS(Mesh::group_of(0, zero, "ring"), std::invalid_argument);
}

TEST_CASE("logical_bytes_sent follows the nccl-tests convention", "[comm]") {
  // all_to_all: (g-1)/g of the send buffer
  CHECK(logical_bytes_sent(OpKind::all_to_all, 1200, 4) == 900);
  CHECK(logical_bytes_sent(OpKind::all_to_all, 4096, 2) == 2048);
  CHECK(logical_bytes_sent(OpKind::all_to_all, 10, 3) == 6);  // floor(10 * 2 / 3)
  // all_gather: the shard, g-1 times
  CHECK(logical_bytes_sent(OpKind::all_gather, 100, 4) == 300);
  CHECK(logical_bytes_sent(OpKind::all_gather, 100, 8) == 700);
  // reduce_scatter: (g-1)/g of the input
  CHECK(logical_bytes_sent(OpKind::reduce_scatter, 1200, 3) == 800);
  // send: its buffer; recv and barrier: nothing
  CHECK(logical_bytes_sent(OpKind::send, 123, 2) == 123);
  CHECK(logical_bytes_sent(OpKind::send, 123, 7) == 123);
  CHECK(logical_bytes_sent(OpKind::recv, 123, 7) == 0);
  CHECK(logical_bytes_sent(OpKind::barrier, 0, 7) == 0);
  // A group of one rank sends nothing.
  for (OpKind k : {OpKind::all_to_all, OpKind::all_gather, OpKind::reduce_scatter, OpKind::send, OpKind::recv,
                   OpKind::barrier})
    CHECK(logical_bytes_sent(k, 4096, 1) == 0);
  // Large buffers do not overflow.
  CHECK(logical_bytes_sent(OpKind::all_to_all, int64_t(1) << 40, 8) == (int64_t(1) << 40) / 8 * 7);
  CHECK_THROWS_AS(logical_bytes_sent(OpKind::send, -1, 2), std::invalid_argument);
  CHECK_THROWS_AS(logical_bytes_sent(OpKind::send, 1, 0), std::invalid_argument);
}

TEST_CASE("CommLog uses the process-wide clock of the compute log", "[comm]") {
  CommLog early;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CommLog late;  // a log created later reads the same clock, not one starting at its creation
  const double a = now_ms();
  const double e = early.now_ms();
  const double l = late.now_ms();
  const double b = now_ms();
  CHECK(a <= e);
  CHECK(e <= l);
  CHECK(l <= b);
  CHECK(l >= 30.0);  // the origin is the process start, at least the sleep ago
  CHECK(early.phase() == Phase::other);
  early.set_phase(Phase::bwd);
  CHECK(early.phase() == Phase::bwd);
}

#ifndef CPBENCH_HAVE_MPI
// ---- the world of one rank (builds without MPI) -------------------------------------------------
namespace {
std::vector<float> iota_f(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}
}  // namespace

TEST_CASE("serial world: groups of one copy, record zero bytes, match sends to self", "[comm][serial]") {
  int argc = 0;
  char** argv = nullptr;
  World& w = World::init(&argc, &argv);
  CHECK(w.rank() == 0);
  CHECK(w.size() == 1);
  for (bool device_like : {false, true}) {
    INFO("device_like=" << device_like);
    testing::CommTestBackend be(device_like);
    CommLog log;
    log.set_phase(Phase::fwd);
    auto c = w.make_group({0}, "cp", log, be, "mpi");
    REQUIRE(c->size() == 1);
    CHECK(c->rank() == 0);
    CHECK(c->name() == "cp");
    Tensor s = be.alloc({6}, DType::f32, MemKind::comm), r = be.alloc({6}, DType::f32, MemKind::comm);
    be.upload(iota_f(6, 0), s);
    be.upload(std::vector<float>(6, -1.f), r);
    c->all_to_all(s, r);
    CHECK(be.download(r) == iota_f(6, 0));
    be.upload(std::vector<float>(6, -1.f), r);
    c->all_gather(s, r);
    CHECK(be.download(r) == iota_f(6, 0));
    be.upload(std::vector<float>(6, -1.f), r);
    c->reduce_scatter(s, r);
    CHECK(be.download(r) == iota_f(6, 0));
    // Two messages with one tag arrive in issue order; a receive posted first is filled later.
    Tensor r2 = be.alloc({6}, DType::f32, MemKind::comm), s2 = be.alloc({6}, DType::f32, MemKind::comm);
    be.upload(iota_f(6, 100), s2);
    Request q1 = c->irecv(r, 0, 3);
    Request p1 = c->isend(s, 0, 3);
    Request p2 = c->isend(s2, 0, 3);
    Request q2 = c->irecv(r2, 0, 3);
    c->wait(q2);
    c->wait(p1);
    c->wait(q1);
    c->wait(p2);
    CHECK(be.download(r) == iota_f(6, 0));
    CHECK(be.download(r2) == iota_f(6, 100));
    c->barrier();
    REQUIRE(log.records().size() == 8);
    for (const auto& rec : log.records()) {
      CHECK(rec.bytes_sent == 0);
      CHECK(rec.group == "cp");
      CHECK(rec.group_size == 1);
      CHECK(rec.phase == Phase::fwd);
      CHECK(rec.t1_ms >= rec.t0_ms);
    }
    CHECK(log.records()[0].op == OpKind::all_to_all);
    CHECK(log.records()[0].buffer_bytes == 24);
    // A receive without a send fails instead of hanging; bad arguments are named.
    Request lonely = c->irecv(r, 0, 9);
    CHECK_THROWS_AS(c->wait(lonely), std::runtime_error);
    CHECK_THROWS_AS(c->isend(s, 1, 0), std::invalid_argument);
    Tensor small = be.alloc({5}, DType::f32, MemKind::comm);
    CHECK_THROWS_AS(c->all_to_all(s, small), std::invalid_argument);
    CHECK_THROWS_WITH(w.make_group({0}, "cp", log, be, "bogus"), Catch::Contains("bogus"));
    CHECK_THROWS_WITH(w.make_group({0}, "cp", log, be, "nccl"), Catch::Contains("nccl"));
    Mesh m = Mesh::build(w, two_levels(1, 1, true), log, be, "mpi");
    CHECK(m.cp->size() == 1);
    CHECK(m.group("ulysses").name() == "ulysses");
    CHECK(m.group("ring").name() == "ring");
    CHECK_THROWS_AS(Mesh::build(w, two_levels(2, 1, true), log, be, "mpi"), std::invalid_argument);
  }
}
#endif
