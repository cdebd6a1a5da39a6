// The MPI communicator under mpirun (any world size; the overlap check needs exactly 2 ranks).
// Data are encoded by world rank and index (x = rank*1000 + i) so a chunk from the wrong rank or
// at the wrong offset shows. Every check runs with host memory and with a fake device backend
// (stored bytes XOR-ed with a per-rank key), which only works if the communicator stages through
// the raw copies.
//
//   mpirun -np 4 --oversubscribe ./test_comm_mpi        prints "N passed, M failed"
//
// A check that throws unexpectedly on any rank aborts every rank (MPI_Abort) rather than
// leaving the others blocked in a collective; a watchdog thread aborts a hang
// (CPBENCH_COMM_TEST_WATCHDOG_S, default 240 s).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/world.h"
#include "tests/unit/comm_test_backend.h"

using namespace cpbench;
using testing::CommTestBackend;

namespace {

// ---- a tiny check runner ---------------------------------------------------------------------

struct Ctx {
  World* w = nullptr;
  int local_failures = 0;
  std::string check;

  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++local_failures;
    if (local_failures <= 12)
      std::fprintf(stderr, "[rank %d] %s: FAILED: %s\n", w->rank(), check.c_str(), what.c_str());
  }
};

template <class T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string vec_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// Compares a downloaded buffer against the expected values; reports the first mismatch.
void expect_equal(Ctx& c, const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  if (got.size() != want.size()) {
    c.expect(false, what + ": size " + str(got.size()) + " != " + str(want.size()));
    return;
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i])) {
      c.expect(false, what + ": element " + str(i) + " is " + str(got[i]) + ", expected " + str(want[i]));
      return;
    }
}

template <class E, class F>
void expect_throw(Ctx& c, F&& f, const std::string& what, const std::string& must_contain = "") {
  try {
    f();
  } catch (const E& e) {
    if (!must_contain.empty() && std::string(e.what()).find(must_contain) == std::string::npos)
      c.expect(false, what + ": message '" + e.what() + "' lacks '" + must_contain + "'");
    return;
  } catch (const std::exception& e) {
    c.expect(false, what + ": threw the wrong exception type: " + e.what());
    return;
  }
  c.expect(false, what + ": did not throw");
}

Tensor make(Backend& be, int64_t n, DType dt = DType::f32) { return be.alloc({n}, dt, MemKind::comm); }

void put(Backend& be, Tensor& t, const std::vector<float>& v) { be.upload(v, t); }
std::vector<float> get(Backend& be, const Tensor& t) { return be.download(t); }
void poison(Backend& be, Tensor& t) {
  be.upload(std::vector<float>(static_cast<size_t>(t.numel()), std::nanf("")), t);
}

std::vector<int> all_ranks(int P) {
  std::vector<int> v(static_cast<size_t>(P));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// World ranks of the members of `comm`, in group order (via an all_gather through the comm itself).
std::vector<int> members_of(Communicator& comm, Backend& be, int world_rank) {
  Tensor s = make(be, 1), r = make(be, comm.size());
  put(be, s, {static_cast<float>(world_rank)});
  comm.all_gather(s, r);
  std::vector<int> m;
  for (float x : get(be, r)) m.push_back(static_cast<int>(x));
  return m;
}

// ---- collectives -------------------------------------------------------------------------------

// all_to_all, all_gather, reduce_scatter on `comm` whose members (world ranks) are `members`.
void check_collectives(Ctx& c, Communicator& comm, Backend& be, const std::vector<int>& members, int64_t chunk) {
  const int g = comm.size();
  const int me = comm.rank();
  const int wr = c.w->rank();
  const std::string tag = "group '" + comm.name() + "' g=" + str(g) + " chunk=" + str(chunk) + " on " + be.name();
  c.expect(static_cast<int>(members.size()) == g, tag + ": member count");
  c.expect(me >= 0 && me < g && members[static_cast<size_t>(me)] == wr, tag + ": rank() is this rank's index");

  // all_to_all: element (j, i) of my send = wr*1000 + j*chunk + i goes to member j.
  {
    Tensor s = make(be, g * chunk), r = make(be, g * chunk);
    std::vector<float> sv(static_cast<size_t>(g * chunk)), want(sv.size());
    for (int64_t k = 0; k < g * chunk; ++k) sv[static_cast<size_t>(k)] = static_cast<float>(wr * 1000 + k);
    for (int j = 0; j < g; ++j)
      for (int64_t i = 0; i < chunk; ++i)
        want[static_cast<size_t>(j * chunk + i)] = static_cast<float>(members[static_cast<size_t>(j)] * 1000 + me * chunk + i);
    put(be, s, sv);
    poison(be, r);
    comm.all_to_all(s, r);
    expect_equal(c, get(be, r), want, tag + " all_to_all");
    expect_equal(c, get(be, s), sv, tag + " all_to_all leaves send intact");
  }
  // all_gather: chunk j of recv = member j's shard.
  {
    Tensor s = make(be, chunk), r = make(be, g * chunk);
    std::vector<float> sv(static_cast<size_t>(chunk)), want(static_cast<size_t>(g * chunk));
    for (int64_t i = 0; i < chunk; ++i) sv[static_cast<size_t>(i)] = static_cast<float>(wr * 1000 + i);
    for (int j = 0; j < g; ++j)
      for (int64_t i = 0; i < chunk; ++i)
        want[static_cast<size_t>(j * chunk + i)] = static_cast<float>(members[static_cast<size_t>(j)] * 1000 + i);
    put(be, s, sv);
    poison(be, r);
    comm.all_gather(s, r);
    expect_equal(c, get(be, r), want, tag + " all_gather");
  }
  // reduce_scatter: recv[i] = sum over members m of (m*1000 + me*chunk + i).
  {
    Tensor s = make(be, g * chunk), r = make(be, chunk);
    std::vector<float> sv(static_cast<size_t>(g * chunk)), want(static_cast<size_t>(chunk));
    for (int64_t k = 0; k < g * chunk; ++k) sv[static_cast<size_t>(k)] = static_cast<float>(wr * 1000 + k);
    int64_t msum = 0;
    for (int m : members) msum += m;
    for (int64_t i = 0; i < chunk; ++i)
      want[static_cast<size_t>(i)] = static_cast<float>(msum * 1000 + g * (me * chunk + i));
    put(be, s, sv);
    poison(be, r);
    comm.reduce_scatter(s, r);
    expect_equal(c, get(be, r), want, tag + " reduce_scatter");
  }
}

// 16-bit encodings computed independently of the library's converters (small integers only).
uint16_t bf16_of_int(int k) {
  float f = static_cast<float>(k);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);  // exact for |k| < 256
}
uint16_t f16_of_int(int k) {  // 1 <= k <= 2048
  int e = 0;
  while ((2 << e) <= k) ++e;
  return static_cast<uint16_t>(((e + 15) << 10) | ((k - (1 << e)) << (10 - e)));
}

void check_reduce_scatter_16bit(Ctx& c, Communicator& comm, Backend& be, DType dt) {
  const int g = comm.size(), me = comm.rank();
  const int64_t chunk = 5;
  auto enc = [&](int k) { return dt == DType::bf16 ? bf16_of_int(k) : f16_of_int(k); };
  std::vector<uint16_t> sv(static_cast<size_t>(g * chunk)), want(static_cast<size_t>(chunk)), got(static_cast<size_t>(chunk));
  for (int j = 0; j < g; ++j)
    for (int64_t i = 0; i < chunk; ++i) sv[static_cast<size_t>(j * chunk + i)] = enc(1 + me + j + static_cast<int>(i));
  // recv[i] = sum over ranks r of (1 + r + me + i)
  for (int64_t i = 0; i < chunk; ++i) want[static_cast<size_t>(i)] = enc(g * (1 + me + static_cast<int>(i)) + g * (g - 1) / 2);
  Tensor s = make(be, g * chunk, dt), r = make(be, chunk, dt);
  be.copy_from_host_raw(s, sv.data(), s.bytes());
  comm.reduce_scatter(s, r);
  be.copy_to_host_raw(got.data(), r, r.bytes());
  for (int64_t i = 0; i < chunk; ++i)
    c.expect(got[static_cast<size_t>(i)] == want[static_cast<size_t>(i)],
             std::string("reduce_scatter ") + dtype_name(dt) + " on " + be.name() + ": element " + str(i) + " bits " +
                 str(got[static_cast<size_t>(i)]) + ", expected " + str(want[static_cast<size_t>(i)]));
}

// ---- point-to-point ----------------------------------------------------------------------------

std::vector<float> message(int from, int id, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(from * 1000 + id * 100 + i);
  return v;
}

// Ring shifts in both directions at once, several messages in flight with one tag (must arrive in
// issue order), an eager and a rendezvous size, an empty message; waits in a scrambled order.
void check_ring_shifts(Ctx& c, Communicator& comm, Backend& be, const std::vector<int>& members) {
  const int g = comm.size(), me = comm.rank();
  const int next = (me + 1) % g, prev = (me + g - 1) % g;
  const int wnext = members[static_cast<size_t>(next)], wprev = members[static_cast<size_t>(prev)];
  const std::string tag = "ring shifts on '" + comm.name() + "' g=" + str(g) + " on " + be.name();
  struct Msg {
    int peer_send, peer_recv, tag, id;
    int64_t n;
    int wfrom;  // world rank the receive comes from
  };
  // Forward (to next) with tag 1: three messages of different sizes, same tag.
  // Backward (to prev) with tag 2: one large (rendezvous) message and one empty one.
  const std::vector<Msg> msgs = {
      {next, prev, 1, 0, 7, wprev},       {next, prev, 1, 1, 300000, wprev}, {next, prev, 1, 2, 1, wprev},
      {prev, next, 2, 3, 262144, wnext},  {prev, next, 2, 4, 0, wnext},      {next, prev, 5, 5, 4096, wprev},
  };
  std::vector<Tensor> sbuf, rbuf;
  std::vector<Request> sreq, rreq;
  for (const auto& m : msgs) {
    sbuf.push_back(make(be, std::max<int64_t>(m.n, 1)).view(0, {m.n}));
    rbuf.push_back(make(be, std::max<int64_t>(m.n, 1)).view(0, {m.n}));
    if (m.n) {
      put(be, sbuf.back(), message(c.w->rank(), m.id, m.n));
      poison(be, rbuf.back());
    }
  }
  // Receives first for half the messages, sends first for the others.
  for (size_t k = 0; k < msgs.size(); ++k) {
    if (k % 2 == 0) {
      rreq.push_back(comm.irecv(rbuf[k], msgs[k].peer_recv, msgs[k].tag));
      sreq.push_back(comm.isend(sbuf[k], msgs[k].peer_send, msgs[k].tag));
    } else {
      sreq.push_back(comm.isend(sbuf[k], msgs[k].peer_send, msgs[k].tag));
      rreq.push_back(comm.irecv(rbuf[k], msgs[k].peer_recv, msgs[k].tag));
    }
  }
  for (size_t k = msgs.size(); k-- > 0;) comm.wait(rreq[k]);
  for (size_t k = 0; k < msgs.size(); ++k) comm.wait(sreq[k]);
  for (size_t k = 0; k < msgs.size(); ++k) {
    c.expect(!rreq[k].active() && !sreq[k].active(), tag + ": requests inactive after wait");
    if (msgs[k].n) expect_equal(c, get(be, rbuf[k]), message(msgs[k].wfrom, msgs[k].id, msgs[k].n), tag + " msg " + str(k));
  }
}

// ---- records -----------------------------------------------------------------------------------

void check_records(Ctx& c, Communicator& comm, Backend& be, CommLog& log) {
  const int g = comm.size(), me = comm.rank();
  const int64_t chunk = 10;  // elements
  const int64_t cb = chunk * 4;
  log.clear();
  Tensor a = make(be, g * chunk), b = make(be, g * chunk), sh = make(be, chunk);
  put(be, a, std::vector<float>(static_cast<size_t>(g * chunk), 1.f));
  put(be, sh, std::vector<float>(static_cast<size_t>(chunk), 1.f));
  const double before = log.now_ms();
  log.set_phase(Phase::fwd);
  comm.all_to_all(a, b);
  comm.all_gather(sh, b);
  log.set_phase(Phase::bwd);
  comm.reduce_scatter(a, sh);
  Tensor p = make(be, 33), q = make(be, 33);
  put(be, p, std::vector<float>(33, 2.f));
  Request rs = comm.isend(p, (me + 1) % g, 9);
  log.set_phase(Phase::other);  // the phase at issue counts, not at wait
  Request rr = comm.irecv(q, (me + g - 1) % g, 9);
  comm.wait(rr);
  comm.wait(rs);
  comm.barrier();
  const double after = log.now_ms();

  struct Want {
    OpKind op;
    Phase phase;
    int64_t buffer, sent;
    int peer;
  };
  // The convention, spelled out: all_to_all (g-1) chunks, all_gather shard*(g-1),
  // reduce_scatter (g-1) chunks of the input, send its buffer, recv and barrier nothing.
  const std::vector<Want> want = {
      {OpKind::all_to_all, Phase::fwd, g * cb, (g - 1) * cb, -1},
      {OpKind::all_gather, Phase::fwd, cb, (g - 1) * cb, -1},
      {OpKind::reduce_scatter, Phase::bwd, g * cb, (g - 1) * cb, -1},
      {OpKind::recv, Phase::other, 33 * 4, 0, (me + g - 1) % g},
      {OpKind::send, Phase::bwd, 33 * 4, g > 1 ? 33 * 4 : 0, (me + 1) % g},
      {OpKind::barrier, Phase::other, 0, 0, -1},
  };
  const auto& recs = log.records();
  c.expect(recs.size() == want.size(), "records: " + str(recs.size()) + " records, expected " + str(want.size()));
  for (size_t k = 0; k < std::min(recs.size(), want.size()); ++k) {
    const auto& r = recs[k];
    const auto& w = want[k];
    const std::string id = "record " + str(k) + " (" + op_name(r.op) + ")";
    c.expect(r.op == w.op, id + ": op, expected " + op_name(w.op));
    c.expect(r.phase == w.phase, id + ": phase " + phase_name(r.phase) + ", expected " + phase_name(w.phase));
    c.expect(r.buffer_bytes == w.buffer, id + ": buffer_bytes " + str(r.buffer_bytes) + ", expected " + str(w.buffer));
    c.expect(r.bytes_sent == w.sent, id + ": bytes_sent " + str(r.bytes_sent) + ", expected " + str(w.sent));
    c.expect(r.peer == w.peer, id + ": peer " + str(r.peer) + ", expected " + str(w.peer));
    c.expect(r.group == comm.name() && r.group_size == g, id + ": group " + r.group + "/" + str(r.group_size));
    c.expect(r.t1_ms >= r.t0_ms, id + ": t1 " + str(r.t1_ms) + " < t0 " + str(r.t0_ms));
    c.expect(r.t0_ms >= before && r.t1_ms <= after, id + ": interval outside the calls' time span");
  }
  log.clear();
  log.set_phase(Phase::other);
}

// ---- errors ------------------------------------------------------------------------------------

void check_errors(Ctx& c, World& w, Communicator& comm, Backend& be, CommLog& log) {
  const int g = comm.size();
  Tensor a = make(be, g * 4), b = make(be, g * 4 + 1), sh = make(be, 4);
  expect_throw<std::invalid_argument>(c, [&] { comm.all_to_all(a, b); }, "all_to_all with mismatched sizes", "recv");
  Tensor short_recv = a.view(0, {g * 4 - 1});
  expect_throw<std::invalid_argument>(c, [&] { comm.all_gather(sh, short_recv); }, "all_gather with a short recv");
  Tensor bf = make(be, g * 4, DType::bf16);
  expect_throw<std::invalid_argument>(c, [&] { comm.all_to_all(a, bf); }, "all_to_all with mixed dtypes", "dtype");
  if (!be.device_memory())
    expect_throw<std::invalid_argument>(c, [&] { comm.all_to_all(a, a); }, "all_to_all in place", "overlap");
  // The checks live in the Communicator base (comm/communicator.cpp): one rule and one message for
  // every implementation, naming the group, its size and the implementation.
  if (g > 1) {
    Tensor rs_out = make(be, 4);
    expect_throw<std::invalid_argument>(c, [&] { comm.reduce_scatter(b, rs_out); },
                                        "reduce_scatter of a send that does not split into g chunks",
                                        "not a multiple of the group size");
  }
  expect_throw<std::invalid_argument>(c, [&] { comm.all_gather(sh, b); }, "all_gather into a recv of the wrong size",
                                      "(group size " + str(g) + ", mpi)");
  expect_throw<std::invalid_argument>(c, [&] { comm.isend(sh, g, 0); }, "isend to a peer outside the group",
                                      "peer " + str(g));
  expect_throw<std::invalid_argument>(c, [&] { comm.irecv(sh, -1, 0); }, "irecv from peer -1");
  expect_throw<std::invalid_argument>(c, [&] { comm.isend(sh, 0, -3); }, "isend with a negative tag", "tag");
  expect_throw<std::invalid_argument>(c, [&] { w.make_group(all_ranks(w.size()), "x", log, be, "bogus"); },
                                      "make_group with an unknown kind", "bogus");
#ifndef CPBENCH_HAVE_NCCL
  expect_throw<std::invalid_argument>(c, [&] { w.make_group(all_ranks(w.size()), "x", log, be, "nccl"); },
                                      "make_group nccl without NCCL", "not built in");
#endif
  // A request belongs to the communicator that issued it; an inactive request waits for nothing.
  auto other = w.make_group(all_ranks(w.size()), "other", log, be, "mpi");
  Tensor m = make(be, 3), m2 = make(be, 3);
  put(be, m, {1, 2, 3});
  Request rq = other->irecv(m2, other->rank(), 4);
  Request sq = other->isend(m, other->rank(), 4);
  expect_throw<std::invalid_argument>(c, [&] { comm.wait(rq); }, "wait on another communicator's request");
  other->wait(rq);
  other->wait(sq);
  other->wait(rq);  // inactive now: returns at once
  Request fake{std::make_shared<int>(5)};
  expect_throw<std::invalid_argument>(c, [&] { comm.wait(fake); }, "wait on a foreign request");
  // A receive whose message is shorter than its buffer is an error, not silent garbage.
  {
    Tensor big = make(be, 8);
    Request r1 = other->irecv(big, other->rank(), 6);
    Request s1 = other->isend(m, other->rank(), 6);
    other->wait(s1);
    expect_throw<std::runtime_error>(c, [&] { other->wait(r1); }, "recv of a short message", "expected 32");
  }
  // Inconsistent partitions fail on every rank (no hang): rank 0 claims {0, 1}, the others
  // list themselves alone.
  if (w.size() >= 2) {
    std::vector<int> mine = w.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{w.rank()};
    expect_throw<std::invalid_argument>(c, [&] { w.make_group(mine, "bad", log, be, "mpi"); },
                                        "make_group with an inconsistent partition", "partition");
  }
  // A list without this rank fails everywhere too, even if only one rank got it wrong.
  {
    std::vector<int> mine = w.rank() == w.size() - 1 ? std::vector<int>{} : all_ranks(w.size());
    if (w.size() == 1) mine = {};
    expect_throw<std::invalid_argument>(c, [&] { w.make_group(mine, "bad", log, be, "mpi"); },
                                        "make_group where one rank passes no ranks", "invalid group");
  }
  // A mesh of more ranks than P: every rank throws before any collective.
  {
    MeshDesc too_big;
    too_big.levels = {{"ring", 1}, {"ulysses", w.size() + 1}};
    expect_throw<std::invalid_argument>(c, [&] { Mesh::build(w, too_big, log, be, "mpi"); },
                                        "Mesh::build with U*R != P", "P=" + str(w.size()));
  }
  log.clear();
}

// ---- mesh --------------------------------------------------------------------------------------

// ranks first, first + stride, ... (count of them)
std::vector<int> arith(int first, int stride, int count) {
  std::vector<int> g;
  for (int j = 0; j < count; ++j) g.push_back(first + j * stride);
  return g;
}

void check_mesh(Ctx& c, World& w, Backend& be, CommLog& log) {
  const int P = w.size(), me = w.rank();
  for (int U = 1; U <= P; ++U) {
    if (P % U) continue;
    const int R = P / U;
    for (const bool ulysses_inner : {true, false}) {
      // usp's two levels, the inner one last (contiguous ranks), as MeshSpec::desc orders them.
      const std::string id = "mesh U=" + str(U) + " R=" + str(R) + (ulysses_inner ? " ulysses-inner" : " ring-inner");
      MeshDesc d;
      if (ulysses_inner) d.levels = {{"ring", R}, {"ulysses", U}};
      else d.levels = {{"ulysses", U}, {"ring", R}};
      Mesh m = Mesh::build(w, d, log, be, "mpi");
      c.expect(m.P == P && m.desc == d && m.groups.size() == 2, id + ": fields");
      Communicator* uly = &m.group("ulysses");
      Communicator* ring = &m.group("ring");
      c.expect(m.cp != nullptr, id + ": groups built");
      if (!m.cp) continue;
      c.expect(m.cp->name() == "cp" && uly->name() == "ulysses" && ring->name() == "ring", id + ": names");
      const auto ug = ulysses_inner ? arith(me / U * U, 1, U) : arith(me % R, R, U);
      const auto rg = ulysses_inner ? arith(me % U, U, R) : arith(me / R * R, 1, R);
      const auto cpm = members_of(*m.cp, be, me), um = members_of(*uly, be, me), rm = members_of(*ring, be, me);
      c.expect(cpm == all_ranks(P), id + ": cp members " + vec_str(cpm));
      c.expect(um == ug, id + ": ulysses members " + vec_str(um) + ", expected " + vec_str(ug));
      c.expect(rm == rg, id + ": ring members " + vec_str(rm) + ", expected " + vec_str(rg));
      // The groups carry traffic: collectives and a ring shift on each.
      check_collectives(c, *uly, be, ug, 3);
      check_collectives(c, *ring, be, rg, 3);
      check_ring_shifts(c, *ring, be, rg);
    }
  }
  log.clear();
}

// ---- stress and request memory -------------------------------------------------------------------

void check_many_requests(Ctx& c, Communicator& comm, Backend& be, const std::vector<int>& members) {
  const int g = comm.size(), me = comm.rank();
  const int next = (me + 1) % g, prev = (me + g - 1) % g;
  const int64_t base = 0;  // every earlier request was waited
  Tensor s = make(be, 64), r = make(be, 64), s2 = make(be, 64), r2 = make(be, 64);
  int bad = 0;
  for (int it = 0; it < 300; ++it) {
    put(be, s, message(c.w->rank(), it % 10, 64));
    put(be, s2, message(c.w->rank(), (it + 5) % 10, 64));
    // Both neighbours send to each other at the same time, same tag, several in flight.
    Request a = comm.irecv(r, prev, 3), b = comm.irecv(r2, next, 3);
    Request x = comm.isend(s, next, 3), y = comm.isend(s2, prev, 3);
    comm.wait(x);
    comm.wait(b);
    comm.wait(y);
    comm.wait(a);
    if (get(be, r) != message(members[static_cast<size_t>(prev)], it % 10, 64)) ++bad;
    if (get(be, r2) != message(members[static_cast<size_t>(next)], (it + 5) % 10, 64)) ++bad;
  }
  c.expect(bad == 0, str(bad) + " corrupted messages in 300 bidirectional exchanges");
  c.expect(mpi_p2p_live_ops() == base, "live p2p operations after all waits: " + str(mpi_p2p_live_ops()) +
                                           ", expected " + str(base));
  // A dropped (never waited) request is released once it completes, not leaked.
  {
    Tensor d = make(be, 16), e = make(be, 16);
    Request keep = comm.irecv(e, prev, 8);
    { Request dropped = comm.isend(d, next, 8); }
    comm.wait(keep);
    comm.barrier();  // the peer received our message, so our dropped send completed
    int64_t live = 0;
    for (int k = 0; k < 2000 && (live = mpi_p2p_live_ops()) != base; ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    c.expect(live == base, "dropped request not released: " + str(live) + " live operations");
  }
}

// ---- overlap -----------------------------------------------------------------------------------

double busy_compute_ms(double ms) {  // pure compute on this thread, no MPI calls
  const double t0 = now_ms();
  volatile double x = 1.0;
  double t = t0;
  while (t - t0 < ms) {
    for (int k = 0; k < 20000; ++k) x = x * 1.0000001 + 1e-9;
    t = now_ms();
  }
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check_overlap(Ctx& c, World& w, Communicator& comm, Backend& be, CommLog& log) {
  const int peer = 1 - comm.rank();
  const int64_t n = (8 << 20) / 4;  // 8 MiB each way
  Tensor s = make(be, n), r = make(be, n);
  put(be, s, message(w.rank(), 0, n));
  poison(be, r);
  auto exchange_post = [&](std::vector<Request>& q) {
    q.push_back(comm.irecv(r, peer, 21));
    q.push_back(comm.isend(s, peer, 21));
  };
  // Standalone: the exchange alone, posted and waited at once.
  std::vector<double> alone;
  for (int rep = 0; rep < 7; ++rep) {
    std::vector<Request> q;
    comm.barrier();
    const double t0 = now_ms();
    exchange_post(q);
    for (auto& x : q) comm.wait(x);
    alone.push_back(now_ms() - t0);
  }
  // Overlapped: post, compute ~200 ms on this thread, then wait.
  std::vector<double> waits, early;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<Request> q;
    comm.barrier();
    log.clear();
    exchange_post(q);
    const double compute_end = busy_compute_ms(200.0);
    const double tw = now_ms();
    for (auto& x : q) comm.wait(x);
    waits.push_back(now_ms() - tw);
    // The records' completion times say when the transfer finished: during the compute.
    double done = 0;
    for (const auto& rec : log.records()) done = std::max(done, rec.t1_ms);
    early.push_back(compute_end - done);  // > 0: completed before compute ended
  }
  std::vector<double> v = {median(alone), median(waits), -*std::min_element(early.begin(), early.end())};
  w.allreduce_max(v);  // slowest rank
  const double t_alone = v[0], t_wait = v[1], min_margin = -v[2];
  if (w.rank() == 0)
    std::printf("overlap: 8 MiB exchange standalone %.3f ms (median of 7); wait after 200 ms compute %.3f ms "
                "(median of 3); transfer finished %.1f ms before compute ended (min)\n",
                t_alone, t_wait, min_margin);
  // Without a progressing comm thread the transfer would only start moving in wait(), and wait
  // would take about the standalone time. Allow a quarter of it (measured: ~1-3% typical).
  c.expect(t_wait < 0.25 * t_alone, "wait after compute took " + str(t_wait) + " ms, standalone " + str(t_alone) +
                                        " ms: the transfer did not progress during compute");
  c.expect(min_margin > 0, "a transfer completed only after the compute ended (margin " + str(min_margin) + " ms)");
  expect_equal(c, get(be, r), message(peer, 0, n), "overlap exchange data");
  log.clear();
}

}  // namespace

int main(int argc, char** argv) {
  World* wp = nullptr;
  try {
    wp = &World::init(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_comm_mpi: %s\n", e.what());
    return 1;
  }
  World& w = *wp;

  // Watchdog: a deadlock must end the test with a failure, on every rank.
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  bool finished = false;
  const char* wd_env = std::getenv("CPBENCH_COMM_TEST_WATCHDOG_S");
  const int wd_s = wd_env ? std::atoi(wd_env) : 240;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lk(wd_mu);
    if (!wd_cv.wait_for(lk, std::chrono::seconds(wd_s), [&] { return finished; })) {
      std::fprintf(stderr, "[rank %d] test_comm_mpi: watchdog: no finish after %d s (deadlock?); aborting\n",
                   w.rank(), wd_s);
      w.abort(3);
    }
  });

  CommTestBackend host(false), device(true, static_cast<unsigned char>(1 + w.rank() % 255));
  CommLog log;
  Ctx c;
  c.w = &w;
  int passed = 0, failed = 0;
  auto run = [&](const std::string& name, const std::function<void()>& fn) {
    c.check = name;
    c.local_failures = 0;
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] %s: unexpected exception: %s; aborting all ranks\n", w.rank(), name.c_str(),
                   e.what());
      w.abort(2);
    }
    std::vector<double> f = {static_cast<double>(c.local_failures)};
    w.allreduce_sum(f);
    if (f[0] == 0) ++passed;
    else ++failed;
    if (w.rank() == 0) std::printf("[%s] %s\n", f[0] == 0 ? "ok" : "FAILED", name.c_str());
    std::fflush(stdout);
  };

  const int P = w.size();
  if (w.rank() == 0) std::printf("test_comm_mpi: %d ranks, %s\n", P, w.mpi_version().c_str());
  try {  // anything thrown outside a check (group creation) ends every rank at once
  run("world", [&] {
    c.expect(w.local_rank() >= 0 && w.local_rank() < w.local_size() && w.local_size() <= P, "local rank/size");
    c.expect(!w.host().empty(), "host name");
    {  // rank 0 gets the distinct hosts (its own among them), the others nothing
      const auto hosts = w.all_hosts();
      if (w.rank() == 0)
        c.expect(!hosts.empty() && static_cast<int>(hosts.size()) <= P && hosts[0] == w.host(),
                 "all_hosts on rank 0: " + str(int(hosts.size())) + " host(s)");
      else
        c.expect(hosts.empty(), "all_hosts is empty off rank 0");
    }
    c.expect(w.mpi_version().find("MPI") != std::string::npos, "mpi_version names MPI: " + w.mpi_version());
    std::string s = w.rank() == 0 ? "from-root" : "";
    w.bcast_string(s);
    c.expect(s == "from-root", "bcast_string");
    auto gs = w.gather_strings("r" + str(w.rank()));
    if (w.rank() == 0) {
      c.expect(static_cast<int>(gs.size()) == P, "gather_strings count");
      for (int r = 0; r < std::min<int>(P, static_cast<int>(gs.size())); ++r)
        c.expect(gs[static_cast<size_t>(r)] == "r" + str(r), "gather_strings order");
    }
    std::vector<double> mine(static_cast<size_t>(w.rank() + 1), w.rank()), all;
    w.gather_to_root(mine, all);
    if (w.rank() == 0) c.expect(static_cast<int>(all.size()) == P * (P + 1) / 2, "gather_to_root (ragged) size");
  });

  for (CommTestBackend* be : {&host, &device}) {
    const std::string on = std::string(" (") + (be->device_memory() ? "staged device" : "host") + ")";
    auto cp = w.make_group(all_ranks(P), "cp", log, *be, "mpi");
    run("collectives" + on, [&] {
      for (int64_t chunk : {int64_t(1), int64_t(3), int64_t(1000), int64_t(70000)})
        check_collectives(c, *cp, *be, all_ranks(P), chunk);
    });
    run("reduce_scatter bf16/fp16" + on, [&] {
      check_reduce_scatter_16bit(c, *cp, *be, DType::bf16);
      check_reduce_scatter_16bit(c, *cp, *be, DType::f16);
    });
    run("ring shifts" + on, [&] { check_ring_shifts(c, *cp, *be, all_ranks(P)); });
    run("records" + on, [&] { check_records(c, *cp, *be, log); });
    run("errors" + on, [&] { check_errors(c, w, *cp, *be, log); });
    run("mesh groups" + on, [&] { check_mesh(c, w, *be, log); });
    run("many requests" + on, [&] { check_many_requests(c, *cp, *be, all_ranks(P)); });
    if (be->device_memory())
      run("collectives and p2p stage through the raw copies" + on, [&] {
        Tensor s = make(*be, P * 4), r = make(*be, P * 4);
        put(*be, s, std::vector<float>(static_cast<size_t>(P * 4), 1.f));
        const long to0 = be->to_host_calls, from0 = be->from_host_calls;
        cp->all_to_all(s, r);
        c.expect(be->to_host_calls == to0 + 1 && be->from_host_calls == from0 + 1, "all_to_all: one copy each way");
        Request rq = cp->irecv(r, (cp->rank() + P - 1) % P, 1), sq = cp->isend(s, (cp->rank() + 1) % P, 1);
        cp->wait(rq);
        cp->wait(sq);
        c.expect(be->to_host_calls == to0 + 2 && be->from_host_calls == from0 + 2, "isend/irecv: one copy each");
      });
  }
  if (P == 2) {
    auto cp = w.make_group(all_ranks(P), "cp", log, host, "mpi");
    run("overlap of isend/irecv with compute", [&] { check_overlap(c, w, *cp, host, log); });
  } else if (w.rank() == 0) {
    std::printf("[skip] overlap of isend/irecv with compute (needs exactly 2 ranks)\n");
  }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] test_comm_mpi: unexpected exception: %s; aborting all ranks\n", w.rank(), e.what());
    w.abort(2);
  }

  {
    std::lock_guard<std::mutex> lk(wd_mu);
    finished = true;
  }
  wd_cv.notify_all();
  watchdog.join();
  if (w.rank() == 0) std::printf("%d passed, %d failed\n", passed, failed);
  std::fflush(stdout);
  w.finalize();
  return failed ? 1 : 0;
}
