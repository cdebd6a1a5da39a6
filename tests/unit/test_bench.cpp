// Unit tests of the harness pieces: configuration, job planning, seeded inputs, the .npy
// writer, and each strategy's analytic communication model against DESIGN's
// formulas written out independently here.
#include <algorithm>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <fstream>
#include <iterator>
#include <set>

#include "bench/block/block.h"
#include "bench/block/kv_cache.h"
#include "bench/config.h"
#include "bench/dump.h"
#include "bench/plan.h"
#include "bench/parts/double_ring_core.h"
#include "bench/parts/ring_core.h"
#include "bench/parts/ring_schedule.h"
#include "bench/parts/tp_level.h"
#include "bench/parts/ulysses_level.h"
#include "bench/inputs.h"
#include "bench/report.h"
#include "bench/tiers.h"
#include "kernels/cpu/cpu_backend.h"

using namespace cpbench;

namespace {
RunConfig tiny(int64_t seq) {
  RunConfig c;
  apply_settings(c, nlohmann::json{{"model", "tiny"}, {"seq", {seq}}}, "test");
  return c;
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("config: unknown keys and wrong types are errors naming the key") {
  RunConfig c;
  CHECK(error_of([&] { apply_settings(c, {{"sequence", 5}}, "f.json"); }).find("unknown key 'sequence'") != std::string::npos);
  CHECK(error_of([&] { apply_settings(c, {{"iters", "five"}}, "f.json"); }).find("'iters' must be an integer") != std::string::npos);
  CHECK(error_of([&] { apply_settings(c, {{"causal", 1}}, "f.json"); }).find("'causal' must be true or false") != std::string::npos);
  CHECK(error_of([&] { apply_settings(c, {{"placement", "diagonal"}}, "f.json"); }).find("ulysses-inner or ring-inner") != std::string::npos);
}

TEST_CASE("config: model preset fills sizes that were not given, explicit ones win") {
  RunConfig c = tiny(64);
  apply_settings(c, {{"heads", 8}}, "flags");
  finalize_config(c, 2);
  CHECK(c.heads == 8);
  CHECK(c.kv_heads == find_model("tiny")->kv_heads);
  CHECK(c.dim == find_model("tiny")->dim);
  CHECK(c.seqs == std::vector<int64_t>{64});
  CHECK(c.strategies.size() == strategy_registry().size());  // default: all
  REQUIRE(find_model("llama3-70b"));
  CHECK(find_model("llama3-70b")->heads == 64);
  CHECK(find_model("llama3-8b")->kv_heads == 8);
}

TEST_CASE("config: invalid sizes name the constraint and the values") {
  RunConfig c = tiny(64);
  apply_settings(c, {{"kv_heads", 3}}, "flags");
  CHECK(error_of([&] { finalize_config(c, 2); }) == "kv_heads=3 must divide heads=4");
  // A zero size is refused when read (bench/options.cpp), naming where it came from.
  CHECK(error_of([&] { RunConfig d = tiny(0); }) == "test: 'seq' must be positive, got 0");
  RunConfig e = tiny(64);
  apply_settings(e, {{"model", "nope"}}, "flags");
  CHECK(error_of([&] { finalize_config(e, 2); }).find("unknown model preset 'nope'") == 0);
  RunConfig f = tiny(64);
  apply_settings(f, {{"strategies", "ring,bogus"}}, "flags");
  CHECK(error_of([&] { finalize_config(f, 2); }).find("unknown strategy 'bogus'") == 0);
}

// (No ';' in test names: catch_discover_tests cuts the name there and the case then runs nothing.)
TEST_CASE("plan: default strategies that cannot run are skipped, named ones are errors") {
  RunConfig c = tiny(64);
  apply_settings(c, {{"heads", 12}, {"kv_heads", 6}}, "flags");  // P=4: KV heads neither split nor replicated
  finalize_config(c, 4);
  const auto jobs = plan_jobs(c, 4);
  bool saw_ulysses = false;
  for (const auto& j : jobs)
    if (j.info->name == "ulysses") {
      saw_ulysses = true;
      CHECK(j.skip ==
            "ulysses: P=4 and kv_heads=6: one must divide the other (kv heads are split, or replicated "
            "P/kv_heads times); use usp with ulysses<=2 (or --uneven-heads)");
    } else if (j.info->name == "single") {
      CHECK(j.skip.empty());
    }
  CHECK(saw_ulysses);
  RunConfig named = tiny(64);
  apply_settings(named, {{"strategies", "ulysses"}, {"heads", 12}, {"kv_heads", 6}}, "flags");
  finalize_config(named, 4);
  CHECK_THROWS_AS(plan_jobs(named, 4), ConstraintError);
}

TEST_CASE("inputs: a shard generated anywhere equals the slice of the whole") {
  const int64_t B = 2, N = 24, C = 5;
  const InputLaw law = input_law(InputId::x, C, 8);
  const auto whole = input_token_rows(7, InputId::x, B, N, C, Positions::contiguous(0, N), 0, C, law);
  const Positions zig = Positions::two(4, 4, 16, 4);  // a zigzag shard
  const auto shard = input_token_rows(7, InputId::x, B, N, C, zig, 1, 3, law);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < zig.count(); ++t)
      for (int64_t c = 0; c < 3; ++c)
        CHECK(shard[size_t((b * zig.count() + t) * 3 + c)] == whole[size_t((b * N + zig.at(t)) * C + 1 + c)]);
  // values in range, different seeds differ
  for (float v : whole) CHECK(std::abs(v) <= 1.0f);
  CHECK(input_uniform(1, InputId::x, 5) != input_uniform(2, InputId::x, 5));
  // add_token_rows puts them back
  std::vector<float> g(size_t(B * N * C), 0.0f);
  add_token_rows(g, input_token_rows(7, InputId::x, B, N, C, zig, 0, C, law), B, N, C, zig, 0, C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < zig.count(); ++t)
      CHECK(g[size_t((b * N + zig.at(t)) * C)] == whole[size_t((b * N + zig.at(t)) * C)]);
}

TEST_CASE("npy: header is 64-byte aligned and data follows in C order") {
  const std::string path = "test_bench_tmp.npy";
  write_npy(path, {1, 2, 3, 4, 5, 6}, {2, 3});
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 10);
  CHECK(bytes.substr(1, 5) == "NUMPY");
  const size_t hl = size_t(uint8_t(bytes[8])) | size_t(uint8_t(bytes[9])) << 8;
  CHECK((10 + hl) % 64 == 0);
  CHECK(bytes.find("'shape': (2, 3)") != std::string::npos);
  CHECK(bytes.size() == 10 + hl + 6 * sizeof(float));
  float last;
  std::memcpy(&last, bytes.data() + bytes.size() - 4, 4);
  CHECK(last == 6.0f);
  std::remove(path.c_str());
}

TEST_CASE("comm model: each strategy states DESIGN's bytes per rank") {
  // DESIGN's formulas, written out independently of the strategies' code.
  LayerShape s;
  s.B = 2; s.N = 96; s.H = 8; s.G = 4; s.d = 16; s.D = 128;
  const int64_t e = 4, acc = 4;  // fp32
  const int64_t hq = int64_t(s.H) * s.d, hk = int64_t(s.G) * s.d;
  for (int P : {1, 2, 4}) {
    const int64_t T = s.B * s.N / P;
    auto pred = [&](const std::string& name, MeshSpec m = {}) {
      const auto st = find_strategy(name)->make();
      return st->predicted_bytes(s, P, st->resolve_mesh(m, s, P), e, acc);
    };
    CAPTURE(P);
    CHECK(pred("single").fwd == 0);
    CHECK(pred("single").bwd == 0);
    CHECK(pred("ulysses").fwd == e * T * (2 * hq + 2 * hk) * (P - 1) / P);
    CHECK(pred("ulysses").bwd == e * T * (2 * hq + 2 * hk) * (P - 1) / P);
    for (const char* ring : {"ring", "ring-zigzag", "ring-striped"}) {
      CHECK(pred(ring).fwd == e * T * 2 * hk * (P - 1));
      CHECK(pred(ring).bwd == (P == 1 ? 0 : e * T * 2 * hk * (P - 1) + acc * T * 2 * hk * P));
    }
    CHECK(pred("megatron-sp").fwd == 2 * e * T * s.D * (P - 1));
    CHECK(pred("megatron-sp").bwd == 3 * e * T * s.D * (P - 1));
    CHECK(pred("allgather-kv").fwd == e * T * 2 * hk * (P - 1));
    CHECK(pred("allgather-kv").bwd == e * T * 2 * hk * (P - 1) + acc * T * 2 * hk * (P - 1));
    for (int U = 1; U <= P; ++U) {
      if (P % U) continue;
      const int R = P / U;
      MeshSpec m;
      m.U = U;
      m.R = R;
      CAPTURE(U, R);
      const int64_t uly = e * T * (2 * hq + 2 * hk) * (U - 1) / U;
      CHECK(pred("usp", m).fwd == uly + e * T * 2 * hk * (R - 1));
      CHECK(pred("usp", m).bwd == uly + (R == 1 ? 0 : e * T * 2 * hk * (R - 1) + acc * T * 2 * hk * R));
    }
  }
}

TEST_CASE("comm model: --block full doubles megatron-sp's bytes, the others' MLP sends nothing", "[model][block]") {
  LayerShape s;
  s.B = 2; s.N = 96; s.H = 8; s.G = 4; s.d = 16; s.D = 128;
  LayerShape f = s;
  f.full_block = true;
  f.F = 320;
  const int64_t e = 4, acc = 4;
  for (int P : {2, 4}) {
    const int64_t T = s.B * s.N / P;
    CAPTURE(P);
    for (const auto& info : strategy_registry()) {
      const auto st = info.make();
      const MeshSpec m = st->resolve_mesh({}, s, P);
      const CommPrediction attn = st->predicted_bytes(s, P, m, e, acc), full = st->predicted_bytes(f, P, m, e, acc);
      CAPTURE(info.name);
      if (info.name == "megatron-sp") {  // DESIGN: MLP fwd 2*s*T*D*(P-1), bwd 3*s*T*D*(P-1) added
        CHECK(full.fwd == attn.fwd + 2 * e * T * s.D * (P - 1));
        CHECK(full.bwd == attn.bwd + 3 * e * T * s.D * (P - 1));
        CHECK(full.fwd == 4 * e * T * s.D * (P - 1));
      } else {
        CHECK(full.fwd == attn.fwd);
        CHECK(full.bwd == attn.bwd);
      }
      // the MLP's activations are counted in the estimate
      CHECK(st->activation_bytes_estimate(f, P, m) > st->activation_bytes_estimate(s, P, m));
    }
  }
  CHECK(dump_tensor_names(true).size() == dump_tensor_names(false).size() + 8);
  CHECK(global_tensor_shape("w_gate", f) == std::vector<int64_t>{s.D, 320});
  CHECK(global_tensor_shape("w_down", f) == std::vector<int64_t>{320, s.D});
}

TEST_CASE("comm model: KV replication and the double ring", "[model]") {
  // DESIGN: with U > G (G divides U) the Ulysses term uses max(G, U) kv heads. The ring part of
  // usp carries the replicated heads too (each ring rank holds max(G,U)/U of them).
  LayerShape s;
  s.B = 1; s.N = 64; s.H = 8; s.G = 2; s.d = 16; s.D = 128;
  const int64_t e = 4, acc = 4, hq = int64_t(s.H) * s.d;
  for (int P : {4, 8}) {
    const int64_t T = s.B * s.N / P, hkP = int64_t(std::max(s.G, P)) * s.d;
    CAPTURE(P);
    const auto uly = find_strategy("ulysses")->make();
    const MeshSpec um = uly->resolve_mesh({}, s, P);
    CHECK(um.U == P);
    CHECK(um.R == 1);
    CHECK_NOTHROW(uly->check(s, P, um));
    CHECK(uly->predicted_bytes(s, P, um, e, acc).fwd == e * T * (2 * hq + 2 * hkP) * (P - 1) / P);
    const auto usp = find_strategy("usp")->make();
    MeshSpec m;
    m.U = 4;
    m.R = P / 4;
    m = usp->resolve_mesh(m, s, P);
    const int64_t hk4 = 4 * int64_t(s.d);  // max(G=2, U=4) kv heads
    const int64_t a2a = e * T * (2 * hq + 2 * hk4) * 3 / 4;
    CHECK(usp->predicted_bytes(s, P, m, e, acc).fwd == a2a + e * T * 2 * hk4 * (m.R - 1));
    CHECK(find_strategy("megatron-sp")->make()->predicted_bytes(s, P, {}, e, acc).fwd == 2 * e * T * s.D * (P - 1));
  }
  // Double ring, P = 8 in windows of w: forward the ring's bytes; backward accumulators R + W
  // hops when both levels have more than one rank, R otherwise.
  const auto dr = find_strategy("double-ring")->make();
  const int P = 8;
  const int64_t T = s.B * s.N / P, hk = int64_t(s.G) * s.d;
  for (int w : {1, 2, 4, 8}) {
    MeshSpec req;
    req.inner_ring = w;
    const MeshSpec m = dr->resolve_mesh(req, s, P);
    CAPTURE(w);
    CHECK(m.inner_ring == w);
    const int W = P / w;
    const int64_t acc_hops = (w > 1 ? P : 0) + (W > 1 ? W : 0);
    CHECK(dr->predicted_bytes(s, P, m, e, acc).fwd == e * T * 2 * hk * (P - 1));
    CHECK(dr->predicted_bytes(s, P, m, e, acc).bwd == e * T * 2 * hk * (P - 1) + acc * T * 2 * hk * acc_hops);
    CHECK(dr->label(m) == "double-ring[w" + std::to_string(w) + "]");
    const MeshDesc d = dr->mesh_desc(m);
    CHECK(d.size_of("ring_outer") == W);
    CHECK(d.size_of("ring_inner") == w);
  }
  MeshSpec bad;
  bad.inner_ring = 3;
  CHECK_THROWS_WITH(dr->resolve_mesh(bad, s, P), "double-ring: inner_ring=3 does not divide ring=8");
  // The default inner ring: the ring's members on one node.
  MeshSpec node;
  node.ranks_per_node = 4;
  CHECK(dr->resolve_mesh(node, s, P).inner_ring == 4);
  node.ranks_per_node = 0;  // unknown: one window
  CHECK(dr->resolve_mesh(node, s, P).inner_ring == P);
  // --mesh all: usp declares every t x U x R (t | 8, U | 8/t: 4 + 3 + 2 + 1), double-ring every w.
  CHECK(find_strategy("usp")->make()->mesh_candidates({}, 8).size() == 10);
  CHECK(dr->mesh_candidates({}, 8).size() == 4);
  CHECK(find_strategy("ring")->make()->mesh_candidates({}, 8).size() == 1);
}

TEST_CASE("comm model: the tp level (usp --tp, megatron-sp = {tp = P})", "[model][tp]") {
  // DESIGN "Tensor parallelism inside the CP mesh", written out here: T = B*N/P, hk' =
  // d*max(G, t*U); tp fwd 2*s*T*D*(t-1), bwd 3*s*T*D*(t-1) per sub-layer; Ulysses
  // s*T*(2hq + 2hk')*(U-1)/U; ring s*T*2hk'*(R-1) (+ s_acc*T*2hk'*R backward).
  LayerShape s;
  s.B = 2; s.N = 128; s.H = 8; s.G = 2; s.d = 8; s.D = 64; s.F = 96;
  const int64_t e = 4, acc = 4, hq = int64_t(s.H) * s.d;
  const auto usp = find_strategy("usp")->make();
  const int P = 8;
  const int64_t T = s.B * s.N / P;
  struct Case { int t, U, R; };
  for (const bool full : {false, true}) {
    s.full_block = full;
    const int64_t sub = full ? 2 : 1;
    for (const Case c : {Case{2, 2, 2}, Case{2, 1, 4}, Case{4, 2, 1}, Case{8, 1, 1}, Case{2, 4, 1}}) {
      CAPTURE(full, c.t, c.U, c.R);
      MeshSpec req;
      req.tp = c.t;
      req.U = c.U;
      const MeshSpec m = usp->resolve_mesh(req, s, P);
      CHECK(m.R == c.R);
      CHECK_NOTHROW(usp->check(s, P, m));
      CHECK(usp->label(m) == "usp[t" + std::to_string(c.t) + "xu" + std::to_string(c.U) + "xr" + std::to_string(c.R) + "]");
      const int64_t hk = int64_t(std::max(s.G, c.t * c.U)) * s.d;
      const int64_t uly = e * T * (2 * hq + 2 * hk) * (c.U - 1) / c.U;
      const int64_t ring_f = e * T * 2 * hk * (c.R - 1), ring_b = c.R > 1 ? ring_f + acc * T * 2 * hk * c.R : 0;
      const CommPrediction p = usp->predicted_bytes(s, P, m, e, acc);
      CHECK(p.fwd == sub * 2 * e * T * s.D * (c.t - 1) + uly + ring_f);
      CHECK(p.bwd == sub * 3 * e * T * s.D * (c.t - 1) + uly + ring_b);
      int64_t tp_fwd = 0;
      for (const CommShare& sh : p.shares)
        if (sh.level == "tp" && sh.phase == Phase::fwd) tp_fwd += sh.bytes;
      CHECK(tp_fwd == sub * 2 * e * T * s.D * (c.t - 1));
      // The mesh: tp innermost (contiguous ranks), levels innermost first with size-1 levels.
      const MeshDesc d = usp->mesh_desc(m);
      CHECK(d.levels.back().name == "tp");
      std::vector<int> tp_group(static_cast<size_t>(c.t));
      for (int j = 0; j < c.t; ++j) tp_group[static_cast<size_t>(j)] = 5 - 5 % c.t + j;
      CHECK(Mesh::group_of(5, d, "tp") == tp_group);
      const nlohmann::json mj = mesh_json(m);
      CHECK(mj["tp"] == c.t);
      CHECK(mj["levels"] == nlohmann::json::parse("[{\"name\": \"tp\", \"size\": " + std::to_string(c.t) +
                                                   "}, {\"name\": \"ulysses\", \"size\": " + std::to_string(c.U) +
                                                   "}, {\"name\": \"ring\", \"size\": " + std::to_string(c.R) + "}]"));
    }
  }
  s.full_block = false;
  // t = 1 keeps today's label and model; megatron-sp is the mesh {tp = P}.
  MeshSpec plain;
  plain.U = 2;
  CHECK(usp->label(usp->resolve_mesh(plain, s, P)) == "usp[u2xr4]");
  const auto mg = find_strategy("megatron-sp")->make();
  const MeshSpec mm = mg->resolve_mesh({}, s, P);
  CHECK((mm.tp == P && mm.U == 1 && mm.R == 1));
  CHECK(mg->mesh_desc(mm).key() == "tp=8");
  for (const CommShare& sh : mg->predicted_bytes(s, P, mm, e, acc).shares) CHECK(sh.level == "tp");
  CHECK(mesh_json(mm)["levels"][0] == nlohmann::json{{"name", "tp"}, {"size", P}});
  // Constraints name the values.
  MeshSpec bad;
  bad.tp = 3;
  CHECK(error_of([&] { usp->resolve_mesh(bad, s, P); }) == "usp: tp=3 does not divide P=8");
  bad.tp = 2;
  bad.U = 2;
  bad.R = 4;
  CHECK(error_of([&] { usp->resolve_mesh(bad, s, P); }) == "usp: ulysses=2 x ring=4 = 8 ranks, but P/tp=4 (P=8, tp=2)");
  LayerShape s6 = s;
  s6.H = 6; s6.G = 6; s6.D = 48;
  MeshSpec t4;
  t4.tp = 4;
  t4.U = 1;
  const MeshSpec m4 = usp->resolve_mesh(t4, s6, P);
  CHECK(error_of([&] { usp->check(s6, P, m4); }).find("usp: tp=4 does not divide heads=6") == 0);
  s.full_block = true;
  s.F = 97;
  MeshSpec t2;
  t2.tp = 2;
  t2.U = 2;
  CHECK(error_of([&] { usp->check(s, P, usp->resolve_mesh(t2, s, P)); }) ==
        "usp: tp=2 does not divide ffn_dim=97 (w_gate, w_up split by columns)");
  // A TP group spanning nodes is warned about; inside a node it is not.
  MeshSpec w22;
  w22.tp = 2;
  w22.U = 2;
  w22.R = 2;
  CHECK(placement_warning("usp", usp->mesh_desc(w22), P, {0, 0, 1, 1, 2, 2, 3, 3}).empty());
  CHECK(placement_warning("usp", usp->mesh_desc(w22), P, {0, 1, 0, 1, 0, 1, 0, 1}).find("tp groups of 2 ranks span nodes") == 0);
  // --mesh all: every t x U x R including t = P.
  bool has_tP = false;
  for (const MeshSpec& c : usp->mesh_candidates({}, P)) has_tP = has_tP || (c.tp == P && c.U == 1 && c.R == 1);
  CHECK(has_tP);
}

TEST_CASE("mesh levels: the Ulysses and tp levels' own byte terms and buffers, worked by hand", "[model][parts]") {
  // Each level's term alone (bench/parts/ulysses_level.h, tp_level.h); the strategies' sums of
  // them are the tests above. B = 2, N = 64, P = 8, H = 8, G = 2, d = 16, D = 128, s = 2.
  LayerShape s;
  s.B = 2; s.N = 64; s.H = 8; s.G = 2; s.d = 16; s.D = 128;
  const auto level_only = [](const CommPrediction& p, const std::string& level) {
    for (const CommShare& c : p.shares) CHECK(c.level == level);
  };
  // Ulysses, U = 4 > G: KV heads replicated to 4. Tn = 2*64/8 = 16, hq = 128, hk' = 64:
  // 2*16*(256 + 128)*3/4 = 9216 per direction.
  CommPrediction u = ulysses_level_bytes(s, 8, 1, 4, 2);
  CHECK(u.fwd == 9216);
  CHECK(u.bwd == 9216);
  level_only(u, "ulysses");
  // t = 2, U = 2: hk' = max(2, 4)*16 = 64 again, (U-1)/U = 1/2: 6144.
  CHECK(ulysses_level_bytes(s, 8, 2, 2, 2).fwd == 6144);
  CHECK(ulysses_level_bytes(s, 8, 1, 1, 2).fwd == 0);  // U = 1: nothing
  // --cached 32: the new tokens only, Tn = 2*32/8 = 8: half of 9216.
  LayerShape c = s;
  c.pass.kind = PassKind::prefill;
  c.pass.cached = 32;
  CHECK(ulysses_level_bytes(c, 8, 1, 4, 2).fwd == 4608);
  // Decode, 3 steps, t = 2, U = 2: the merged o of H/(tU) = 2 heads, 3*2*2*2*16*(2-1) = 384.
  LayerShape dec = s;
  dec.pass.kind = PassKind::decode;
  dec.pass.cached = 64;
  dec.pass.steps = 3;
  u = ulysses_decode_bytes(dec, 2, 2, 2);
  CHECK(u.fwd == 384);
  CHECK(u.bwd == 0);
  // Buffers: T = 8 tokens, H = 4, G = 1, d = 16, U = 4: f = 4 copies. The exchange buffers
  // 2*B*T*(H + 2*Ge)*d*es = 2*2*8*12*16*es; the copies B*T*d*(2*Ge*es + G*es (+ 4*G when not f32)).
  UlyssesShape us;
  us.B = 2; us.T = 8; us.H = 4; us.G = 1; us.d = 16; us.U = 4;
  CHECK(us.kv_copies() == 4);
  CHECK(us.Ge() == 4);
  CHECK(ulysses_level_activation_bytes(us) == 24576 + 256 * 36);
  us.dtype = DType::bf16;
  CHECK(ulysses_level_activation_bytes(us) == 12288 + 256 * 22);
  us.G = 4;  // no replication: the exchange buffers only
  CHECK(us.kv_copies() == 1);
  CHECK(ulysses_level_activation_bytes(us) == 2 * 2 * 8 * (4 + 8) * 16 * 2);
  // tp, t = 4, one sub-layer: Tn = 16 rows of D = 128, s = 2: fwd 2*2*16*128*3 = 24576, bwd 3/2 of it.
  CommPrediction t = tp_sublayer_bytes(s, 8, 4, "tp", 2);
  CHECK(t.fwd == 24576);
  CHECK(t.bwd == 36864);
  level_only(t, "tp");
  CHECK(tp_sublayer_bytes(s, 8, 1, "tp", 2).fwd == 0);
  // Decode: one all-reduce per step of B*D/t = 64 elements: 3*2*2*64*3 = 2304, on the level named.
  t = tp_sublayer_bytes(dec, 8, 4, "mlp_tp", 2);
  CHECK(t.fwd == 2304);
  CHECK(t.bwd == 0);
  level_only(t, "mlp_tp");
}

TEST_CASE("strategy interface: capabilities, balance positions and the pass's checks", "[strategy]") {
  const int P = 8;
  LayerShape s;
  s.B = 1; s.N = 64; s.H = 8; s.G = 8; s.d = 8; s.D = 64;
  auto positions = [&](const std::string& name, MeshSpec req) {
    const auto st = find_strategy(name)->make();
    return st->balance_positions(st->resolve_mesh(req, s, P), P);
  };
  // The ring family: the balanced layout spans the P ranks, each on its own position (a double
  // ring's outer * w + inner is the rank too).
  for (const char* name : {"ring", "double-ring"}) {
    MeshSpec req;
    req.inner_ring = 2;
    const BalancePositions b = positions(name, req);
    CHECK(b.count == P);
    for (int r = 0; r < P; ++r) CHECK(b.of_rank[size_t(r)] == r);
  }
  // usp: its ring index, shared by the members of a Ulysses group (ulysses-inner: contiguous).
  MeshSpec u2;
  u2.U = 2;
  u2.R = 4;
  const BalancePositions b = positions("usp", u2);
  CHECK(b.count == 4);
  for (int r = 0; r < P; ++r) CHECK(b.of_rank[size_t(r)] == r / 2);
  // Capabilities are data, the same in the registry and on the object.
  for (const StrategyInfo& info : strategy_registry()) {
    const Capabilities c = info.make()->capabilities();
    CHECK(c.mesh == info.can.mesh);
    CHECK(c.decode == info.can.decode);
    CHECK(info.make()->name() == info.name);
  }
  CHECK(find_strategy("usp")->can.mesh);
  CHECK(find_strategy("ring")->can.supports(BalanceScheme::dynamic));
  CHECK_FALSE(find_strategy("usp")->can.supports(BalanceScheme::dynamic));
  CHECK_FALSE(find_strategy("allgather-kv")->can.cached);
  // One check for every pass: --cached prefill checks the layout on the new tokens, decode the cache.
  const auto zz = find_strategy("ring-zigzag")->make();
  const MeshSpec zm = zz->resolve_mesh({}, s, P);
  LayerShape cached = s;
  cached.pass.kind = PassKind::prefill;
  cached.pass.cached = 56;  // 8 new tokens: not divisible by 2P = 16
  CHECK(error_of([&] { zz->check(cached, P, zm); }) ==
        "ring-zigzag: seq=8 is not divisible by 2*P=16: the layout holds the seq - cached = 8 new tokens "
        "(--cached 56 of seq=64)");
  LayerShape decode = s;
  decode.pass.cached = 60;
  decode.pass.kind = PassKind::decode;
  decode.pass.steps = 2;
  CHECK(error_of([&] { zz->check(decode, P, zm); }) ==
        "ring-zigzag: cached=60 is not divisible by P=8: each rank holds an equal cache shard (--pass decode)");
  CHECK_NOTHROW(find_strategy("single")->make()->check(decode, P, zm));
}

TEST_CASE("comm model: a sequence of 2^40 tokens keeps every ring hop", "[model]") {
  // A ring of 256 over 2^40 tokens has blocks of 2^32 tokens and 2^63 visible pairs per block
  // pair: the hop schedule must still see them (64-bit pair counts once wrapped to "none visible"
  // and dropped the ring's bytes from the model).
  LayerShape s;
  s.B = 1; s.N = int64_t(1) << 40; s.H = 4; s.G = 2; s.d = 16; s.D = 64;
  const int64_t e = 4, acc = 4;
  const int P = 1024;
  const int64_t T = s.N / P;
  const auto usp = find_strategy("usp")->make();
  MeshSpec m;
  m.U = 4;
  m.R = 256;
  m = usp->resolve_mesh(m, s, P);
  const int64_t hq = int64_t(s.H) * s.d, hk = 4 * int64_t(s.d);  // max(G=2, U=4) kv heads
  const int64_t a2a = e * T * (2 * hq + 2 * hk) * 3 / 4;
  CHECK(usp->predicted_bytes(s, P, m, e, acc).fwd == a2a + e * T * 2 * hk * 255);
  for (const char* ring : {"ring", "ring-zigzag", "ring-striped"}) {
    CAPTURE(ring);
    const auto st = find_strategy(ring)->make();
    CHECK(st->predicted_bytes(s, P, st->resolve_mesh({}, s, P), e, acc).fwd == e * T * 2 * int64_t(s.G) * s.d * (P - 1));
  }
}

TEST_CASE("double ring hop truncation: hand-computed schedules", "[model]") {
  // P = 8 ranks of N/P = 16 tokens; ring position rho = o*w + i. At round t, inner step j, rank
  // (o, i) holds the block of ((o-t) mod W)*w + (i-j) mod w.
  LayerShape s;
  s.B = 1; s.N = 128; s.H = 4; s.G = 4; s.d = 8; s.D = 32;
  const int P = 8;
  const int64_t L = s.N / P, c = s.N / (2 * P);
  const BlockPositions contiguous = [&](int j) { return Positions::contiguous(j * L, L); };
  const BlockPositions zigzag = [&](int j) { return Positions::two(j * c, c, (2 * P - 1 - j) * c, c); };
  auto hops = [](int rounds, std::vector<int> inner) {
    DoubleRingHops h;
    h.rounds = rounds;
    h.inner = std::move(inner);
    return h;
  };
  SECTION("no window, no documents: the full double ring, causal or not") {
    for (bool causal : {true, false})
      for (int w : {1, 2, 4, 8}) {
        s.mask.causal = causal;
        CAPTURE(causal, w);
        CHECK(DoubleRingCore::effective_hops(w, P / w, contiguous, s) == DoubleRingHops::full(w, P / w));
        CHECK(DoubleRingCore::effective_hops(w, P / w, zigzag, s) == DoubleRingHops::full(w, P / w));
      }
  }
  SECTION("contiguous, causal window <= N/P: only the block of rank r-1") {
    // r-1 is (0, 1) inside a window and (1, 1) across (i = 0 holds (o-1, w-1) at t = 1, j = 1).
    s.mask.causal = true;
    s.mask.window = L;
    CHECK(DoubleRingCore::effective_hops(2, 4, contiguous, s) == hops(1, {1, 1}));
    CHECK(DoubleRingCore::effective_hops(4, 2, contiguous, s) == hops(1, {1, 1}));
    CHECK(DoubleRingCore::effective_hops(1, 8, contiguous, s) == hops(1, {0, 0}));  // a ring over the outer level
    CHECK(DoubleRingCore::effective_hops(8, 1, contiguous, s) == hops(0, {1}));     // over the inner level
  }
  SECTION("zigzag, causal window <= N/2P: ranks r-1 and r+1, a middle round without inner hops") {
    // r-1: (0,1) or (1,1); r+1: (0, w-1), or (W-1, w-1) from the last rank of a window; round 2
    // of W = 4 has no needed pair but the block that starts it must still travel on.
    s.mask.causal = true;
    s.mask.window = c;
    CHECK(DoubleRingCore::effective_hops(2, 4, zigzag, s) == hops(3, {1, 1, 0, 1}));
    CHECK(DoubleRingCore::effective_hops(4, 2, zigzag, s) == hops(1, {3, 3}));
    CHECK(DoubleRingCore::effective_hops(1, 8, zigzag, s) == DoubleRingHops::full(1, 8));
  }
  SECTION("zigzag, documents of 2 chunks: rank r sees only r xor 1, inside its window when w is even") {
    s.mask.window = 0;
    for (bool causal : {true, false}) {
      s.mask.causal = causal;
      s.mask.docs = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{0, 16, 32, 48, 64, 80, 96, 112});
      CAPTURE(causal);
      CHECK(DoubleRingCore::effective_hops(2, 4, zigzag, s) == hops(0, {1}));
      CHECK(DoubleRingCore::effective_hops(4, 2, zigzag, s) == hops(0, {3}));  // j = 1 (r-1) and j = 3 (r+1)
      CHECK(DoubleRingCore::effective_hops(1, 8, zigzag, s) == DoubleRingHops::full(1, 8));
      // Bytes: forward one K,V hop instead of P-1; backward adds the accumulator's hop and its
      // return to the owner (fp32: s = s_acc = 4).
      MeshSpec req;
      req.inner_ring = 2;
      const auto dr = find_strategy("double-ring")->make();
      const CommPrediction p = dr->predicted_bytes(s, P, dr->resolve_mesh(req, s, P), 4, 4);
      const int64_t block = s.B * L * 2 * int64_t(s.G) * s.d * 4;
      CHECK(p.fwd == block);
      CHECK(p.bwd == block + 2 * block);
    }
  }
  SECTION("predicted bytes by level and destination follow the schedule") {
    const DoubleRingHops h = hops(2, {1, 0, 2});  // w = 3, W = 4
    const CommPrediction p = DoubleRingCore::predicted_bytes(10, 4, 3, 4, 2, 4, h);
    const int64_t block = 10 * 4;  // 10 tokens of k|v rows of 4 elements
    CHECK(p.fwd == 2 * block * (3 + 2));                  // inner 1+0+2, outer 2
    CHECK(p.bwd == p.fwd + 4 * block * (2 + 3 + 2 + 1));  // inner (1+1) + (2+1), outer 2 + 1
    int64_t back_inner = 0, back_outer = 0;
    for (const CommShare& sh : p.shares) {
      if (sh.phase == Phase::bwd && sh.level == "ring_inner" && sh.to < 0) back_inner += sh.bytes;
      if (sh.phase == Phase::bwd && sh.level == "ring_outer" && sh.to < 0) {
        CHECK(sh.to == -2);
        back_outer += sh.bytes;
      }
    }
    CHECK(back_inner == 2 * 4 * block);
    CHECK(back_outer == 4 * block);
    CHECK_THROWS_AS(DoubleRingCore::predicted_bytes(10, 4, 3, 4, 2, 4, hops(1, {3, 0})), std::logic_error);
    CHECK_THROWS_AS(DoubleRingCore::predicted_bytes(10, 4, 3, 4, 2, 4, hops(4, {0, 0, 0, 0, 0})), std::logic_error);
  }
}

TEST_CASE("ring travel q: byte model (DESIGN: fwd = s*Tq*hq*K + (s_acc*Tq*hq + 4*Tq*H)*(K+1))") {
  // Tq = 12 new tokens, H = 3 query heads of d = 4 (hq = 12), bf16 run (2) with float32 partials.
  const int64_t Tq = 12, H = 3, hq = H * 4, s = 2, s_acc = 4;
  const int64_t partial = s_acc * Tq * hq + 4 * Tq * H;
  RingBlockSizes b;
  b.tokens_q = Tq;
  b.hq = hq;
  b.ho = hq;  // the partials' o: d_v = d
  b.heads = H;
  b.tokens_kv = 999;  // K,V do not travel: their size must not enter
  const auto bytes = ring_travel(RingTravel::q).bytes;
  for (int K : {1, 2, 3}) {
    const CommPrediction p = bytes(b, 4, s, s_acc, K, "cp");
    CHECK(p.fwd == s * Tq * hq * K + partial * (K + 1));
    CHECK(p.bwd == 0);
    int64_t back = 0;
    for (const CommShare& sh : p.shares) {
      CHECK(sh.level == "cp");
      CHECK(sh.phase == Phase::fwd);
      if (sh.to > 0) {
        CHECK(sh.to == K);  // the partial returns to its owner, K places ahead
        back += sh.bytes;
      } else {
        CHECK(sh.to == -1);  // Q and its partial go to the previous rank
      }
    }
    CHECK(back == partial);
  }
  // The full ring by default (K = R - 1); nothing sent with K = 0 or one rank.
  CHECK(bytes(b, 4, s, s_acc, -1, "cp").fwd == s * Tq * hq * 3 + partial * 4);
  CHECK(bytes(b, 4, s, s_acc, 0, "cp").fwd == 0);
  CHECK(bytes(b, 1, s, s_acc, -1, "cp").shares.empty());
}

TEST_CASE("ring travel: the policies' table drives the flag, its parsing, the bytes and the refusals") {
  std::set<std::string> flags;
  for (const RingTravelPolicy& t : ring_travels()) {
    CHECK(flags.insert(t.flag).second);  // one row per flag
    CHECK(parse_ring_travel(t.flag) == t.id);
    CHECK(&ring_travel(t.id) == &t);
    CHECK(ring_travel_help().find(std::string(t.flag) + " (" + t.summary + ")") != std::string::npos);
    CHECK(t.forward != nullptr);
  }
  CHECK(ring_travel_flags() == std::vector<std::string>{"kv", "q", "q-a2a"});
  try {
    parse_ring_travel("q2");
    FAIL("no throw");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "--ring-pass: unknown value 'q2' (choose kv|q|q-a2a)");
  }
  // kv's term is RingCore's (K,V and the dK,dV accumulators); q-a2a sends each partial once.
  RingBlockSizes b;
  b.tokens_kv = 10; b.kv = 16; b.tokens_q = 6; b.hq = 16; b.ho = 16; b.heads = 4;
  const CommPrediction kv = ring_travel(RingTravel::kv).bytes(b, 4, 2, 4, -1, "cp");
  const CommPrediction ref = RingCore::predicted_bytes(10, 16, 4, 2, 4, -1, "cp");
  CHECK(kv.fwd == ref.fwd);
  CHECK(kv.bwd == ref.bwd);
  const int64_t partial = 4 * 6 * 16 + 4 * 6 * 4;
  CHECK(ring_travel(RingTravel::q_a2a).bytes(b, 4, 2, 4, 2, "ring").fwd == 2 * 6 * 16 * 2 + partial * 2);
  CHECK(ring_travel(RingTravel::q_a2a).bytes(b, 4, 2, 4, 2, "ring").bwd == 0);
  // Buffers: q keeps 2 Q blocks and 3 partials; q-a2a 2 Q blocks and 2R partials; kv none.
  RingCoreShape cs;
  cs.B = 1; cs.n = 6; cs.hq = 4; cs.hk = 2; cs.d = 4; cs.dtype = DType::bf16;
  const int64_t qn = 6 * 4 * 4, part = qn + 4 * 6;
  CHECK(ring_travel(RingTravel::kv).buffer_bytes(cs, 4) == 0);
  CHECK(ring_travel(RingTravel::q).buffer_bytes(cs, 4) == 2 * qn * 2 + 3 * part * 4);
  CHECK(ring_travel(RingTravel::q_a2a).buffer_bytes(cs, 4) == 2 * qn * 2 + 2 * 4 * part * 4);
  // The refusal names the policy, why, the schedule and the alternative; none on a single ring.
  CHECK(travel_refusal("usp", RingTravel::q_a2a, RingSchedule::double_ring(4, 2)) ==
        "usp: --ring-pass q-a2a returns the partials in one exchange over a single ring; it is not defined on a "
        "double ring (inner ring w=2) (use --ring-pass q)");
  CHECK(travel_refusal("usp", RingTravel::q_a2a, RingSchedule::single(4, "ring")).empty());
  CHECK(travel_refusal("usp", RingTravel::q, RingSchedule::double_ring(4, 2)).empty());
}

TEST_CASE("ring core: pass-Q hop truncation is pass-KV's with queries and keys swapped") {
  LayerShape s;
  s.N = 32;
  const int R = 4;
  // pass-Q's rule written out: the farthest hop k at which some rank r holds the query block of
  // rank r+k (queries move to the previous rank) with a visible pair against its own keys. The
  // core computes pass-KV's scan (rank r's queries against rank r-k's keys) for both.
  const auto pass_q_hops = [&](const BlockPositions& q, const BlockPositions& k) {
    for (int hop = R - 1; hop >= 1; --hop)
      for (int r = 0; r < R; ++r)
        if (any_visible_pair(q((r + hop) % R), k(r), s.mask.attn())) return hop;
    return 0;
  };
  SECTION("no cache: the same K_eff as pass-KV on the same layout") {
    const BlockPositions contiguous = [](int j) { return Positions::contiguous(8 * j, 8); };
    const BlockPositions zigzag = [](int j) { return Positions::two(4 * j, 4, 4 * (7 - j), 4); };
    for (const BlockPositions& pos : {contiguous, zigzag})
      for (bool causal : {true, false})
        for (int64_t w : {0, 3, 8, 12}) {
          s.mask.causal = causal;
          s.mask.window = w;
          CAPTURE(causal, w);
          CHECK(pass_q_hops(pos, pos) == RingCore::effective_hops(R, pos, s));
        }
  }
  SECTION("cached: keys are the cache shard plus the new tokens, queries only the new tokens") {
    // Cache 0..15 and new tokens 16..31, both contiguous over 4 ranks (4 tokens each).
    const BlockPositions q = [](int j) { return Positions::contiguous(16 + 4 * j, 4); };
    const BlockPositions k = [](int j) { return Positions::two(4 * j, 4, 16 + 4 * j, 4); };
    s.mask.causal = true;
    s.mask.window = 0;
    CHECK(pass_q_hops(q, k) == R - 1);  // every new query sees the whole cache
    CHECK(RingCore::effective_hops(R, q, k, s) == R - 1);
    // A window of 4: query 16 (rank 0) reaches cache key 15 (rank 3, hop 1); rank r+1's queries
    // reach rank r's new keys (hop 1); nothing farther.
    s.mask.window = 4;
    CHECK(pass_q_hops(q, k) == 1);
    CHECK(RingCore::effective_hops(R, q, k, s) == 1);
    s.mask.window = 1;  // each query sees itself only: its own rank, no hop
    CHECK(pass_q_hops(q, k) == 0);
    CHECK(RingCore::effective_hops(R, q, k, s) == 0);
  }
}

TEST_CASE("config: a layer naming the mesh replaces the lower layer's mesh") {
  RunConfig c = tiny(64);
  apply_settings(c, {{"mesh", "all"}}, "preset");
  apply_settings(c, {{"ulysses", 2}, {"ring", 2}}, "command line");
  CHECK_FALSE(c.mesh_all);
  CHECK(c.ulysses == 2);
  finalize_config(c, 4);
  RunConfig d = tiny(64);
  apply_settings(d, {{"ulysses", 2}}, "preset");
  apply_settings(d, {{"mesh", "all"}}, "command line");
  CHECK(d.mesh_all);
  CHECK(d.ulysses == 0);
  finalize_config(d, 4);
  RunConfig e = tiny(64);  // both in one layer: a conflict
  apply_settings(e, {{"mesh", "all"}, {"ulysses", 2}}, "command line");
  CHECK(error_of([&] { finalize_config(e, 4); }).find("--mesh all enumerates every t x U x R") == 0);
}

TEST_CASE("report: context.nccl says what went through NCCL and what was local (--comm nccl only)") {
  NcclCallCounts c;
  c.one_rank_mode = true;
  c.communicators = 2;
  c.all_to_all = 3;
  c.reduce_scatter = 1;
  c.send = 4;
  c.recv = 4;
  c.local.all_gather = 5;
  c.local.barrier = 2;
  const nlohmann::json j = nccl_context(c, "2.28.9");
  CHECK(j["used"] == true);
  CHECK(j["communicators"] == 2);
  CHECK(j["one_rank_mode"] == true);
  CHECK(j["version"] == "2.28.9");
  CHECK(j["calls_through_nccl"] == nlohmann::json{{"all_to_all", 3}, {"all_gather", 0}, {"reduce_scatter", 1},
                                                  {"send", 4}, {"recv", 4}, {"barrier", 0}});
  CHECK(j["calls_local"] == nlohmann::json{{"all_to_all", 0}, {"all_gather", 5}, {"reduce_scatter", 0},
                                           {"send", 0}, {"recv", 0}, {"barrier", 2}});
  const nlohmann::json none = nccl_context(NcclCallCounts{}, nullptr);
  CHECK(none["used"] == false);
  CHECK(none["version"].is_null());

  // make_report adds it for --comm nccl only (this process made no NCCL communicator: used false).
  RunConfig cfg = tiny(64);
  const nlohmann::json ctx = {{"world_size", 1}};
  CHECK_FALSE(make_report(ctx, cfg, 1, {}, true)["context"].contains("nccl"));
  cfg.backend = "cuda";
  cfg.comm = "nccl";
  const nlohmann::json rep = make_report(ctx, cfg, 1, {}, true);
  REQUIRE(rep["context"].contains("nccl"));
  CHECK(rep["context"]["nccl"]["used"] == false);
  CHECK(rep["context"]["nccl"]["calls_through_nccl"]["all_to_all"] == 0);
  CHECK(rep["context"]["world_size"] == 1);
}

// The one KV cache owner (bench/block/kv_cache.h): the cached rows hold the seeded cache of the
// heads asked for (a replicated head twice, out of order), the new rows are written where asked,
// from the heads asked (a decode step's one row of part of the heads), and the held bytes are the
// cached rows' k and v only.
TEST_CASE("kv cache: seeded heads, appended rows, held bytes") {
  CpuBackend be(1);
  TensorRegistry reg(&be);
  LayerShape s;
  s.B = 2; s.N = 12; s.pass.cached = 12; s.H = 4; s.G = 2; s.d = 3; s.D = 8;
  const Positions cached = Positions::contiguous(4, 4);  // cache positions [4, 8) of [0, 12)
  const std::vector<int64_t> heads = {1, 1, 0};          // head 1 replicated, then head 0
  KvCache c;
  c.setup(reg, be, 7, s, cached, 2, heads);
  REQUIRE(c.k().shape == std::vector<int64_t>{2, 6, 3, 3});
  CHECK(c.cached_rows() == 4);
  CHECK(c.held_bytes() == 2 * 2 * 4 * 3 * 3 * 4);
  const int64_t Gd = int64_t(s.G) * s.d, Hd = int64_t(s.H) * s.d;
  for (auto [id, t] : {std::pair{InputId::k_cache, &c.k()}, std::pair{InputId::v_cache, &c.v()}}) {
    const std::vector<float> got = be.download(*t);
    const std::vector<float> all = input_token_rows(7, id, s.B, s.pass.cached, Gd, cached, 0, Gd, input_law(id, s.D, Hd));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t r = 0; r < 6; ++r)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t e = 0; e < 3; ++e) {
            const float want = r < 4 ? all[size_t(((b * 4 + r) * 2 + heads[size_t(h)]) * 3 + e)] : 0.0f;
            CHECK(got[size_t(((b * 6 + r) * 3 + h) * 3 + e)] == want);
          }
  }
  // One decode row: heads [1, 4) of a 4-head source row into row 5.
  std::vector<float> src(2 * 1 * 4 * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 100.0f + float(i);
  Tensor k = be.alloc({2, 1, 4, 3}, DType::f32, MemKind::activations), v = be.alloc({2, 1, 4, 3}, DType::f32, MemKind::activations);
  be.upload(src, k);
  be.upload(src, v);
  c.write(be, k, v, 5, 1);
  const std::vector<float> got = be.download(c.k());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t e = 0; e < 3; ++e) CHECK(got[size_t(((b * 6 + 5) * 3 + h) * 3 + e)] == src[size_t((b * 4 + 1 + h) * 3 + e)]);
  // Several rows must bring every head.
  Tensor k2 = be.alloc({2, 2, 4, 3}, DType::f32, MemKind::activations);
  CHECK_THROWS_AS(c.write(be, k2, k2, 4, 1), std::logic_error);
}
