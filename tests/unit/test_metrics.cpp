// The harness's pure pieces without mpirun: statistics, communication aggregation, the two
// overlap figures, imbalance, the typed result and its JSON, the block cache, the memory
// tracker's limit and allocation counter, and dump directory names.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/dump.h"
#include "bench/metrics.h"
#include "bench/report.h"
#include "bench/result.h"
#include "bench/tiers.h"
#include "comm/world.h"
#include "kernels/block_cache.h"

using namespace cpbench;

namespace {
// usp's U x R mesh with a placement, as the harness describes it (MeshSpec::desc).
MeshDesc usp_desc(int U, int R, Placement pl) {
  MeshSpec m;
  m.U = U;
  m.R = R;
  m.placement = pl;
  return m.desc();
}
}  // namespace

namespace {
CommRecord rec(OpKind op, Phase ph, int64_t bytes, double t0, double t1, int g = 4) {
  return CommRecord{op, "ring", g, ph, bytes, bytes, -1, t0, t1};
}
ComputeRecord busy(double t0, double t1) { return ComputeRecord{"attn_fwd", 0, t0, t1}; }
}  // namespace

TEST_CASE("metrics: order statistics interpolate between closest ranks") {
  const Stats s = summarize({5, 1, 4, 2, 3});
  CHECK(s.median == 3);
  CHECK(s.min == 1);
  CHECK(s.max == 5);
  CHECK(s.p10 == Approx(1.4));
  CHECK(s.p90 == Approx(4.6));
  CHECK(s.samples == std::vector<double>{5, 1, 4, 2, 3});  // measurement order kept
  CHECK(median({1, 2, 3, 10}) == 2.5);
  CHECK_THROWS_AS(summarize({}), std::invalid_argument);
}

TEST_CASE("metrics: union and intersection of intervals") {
  CHECK(union_length({{0, 2}, {1, 3}, {5, 6}, {4, 4}}) == 4);  // [0,3) + [5,6); empty dropped
  CHECK(intersection_length({{0, 10}}, {{2, 3}, {5, 7}, {9, 12}}) == 4);
  CHECK(intersection_length({{0, 1}, {2, 3}}, {{1, 2}}) == 0);
  CHECK(intersection_length({{0, 4}, {1, 5}}, {{3, 8}}) == 2);  // overlapping inputs merged first
}

TEST_CASE("metrics: HTA overlap is the comm time covered by own compute") {
  // Comm [0,10) and [20,30): 20 ms; compute covers [5,25): 5 + 5 = 10 ms -> 0.5.
  const std::vector<CommRecord> comm = {rec(OpKind::send, Phase::fwd, 8, 0, 10), rec(OpKind::recv, Phase::fwd, 0, 20, 30)};
  CHECK(hta_overlap(comm, {busy(5, 25)}) == Approx(0.5));
  CHECK(hta_overlap(comm, {}) == 0);
  CHECK(hta_overlap(comm, {busy(-1, 40)}) == 1);
  CHECK(hta_overlap({}, {busy(0, 1)}) == 1);  // no communication: nothing to hide
  // Barriers are harness synchronisation, not communication of the layer.
  CHECK(hta_overlap({rec(OpKind::barrier, Phase::fwd, 0, 0, 10)}, {}) == 1);
}

TEST_CASE("metrics: exposed-time overlap ratio and imbalance") {
  CHECK(exposed_overlap_ratio(2, 8, false) == Approx(0.75));
  CHECK(exposed_overlap_ratio(10, 8, false) == 0);
  CHECK(exposed_overlap_ratio(10, 8, true) == 1);
  CHECK(exposed_overlap_ratio(1, 0, false) == 1);
  CHECK(imbalance({1, 1, 1, 3}) == Approx(2.0));
  CHECK(imbalance({0, 0}) == 1);
  // 1,000 equal times whose float mean rounds above them (0.30000000000000565 for 0.1 + 0.2):
  // balanced, exactly 1.
  const std::vector<double> equal(1000, 0.1 + 0.2);
  CHECK(max_of(equal) / mean_of(equal) < 1.0);
  CHECK(imbalance(equal) == 1.0);
}

TEST_CASE("metrics: ops are summed per (op, group) with nccl-tests bandwidths") {
  const std::vector<CommRecord> recs = {rec(OpKind::all_gather, Phase::fwd, 300, 0, 1),
                                        rec(OpKind::all_gather, Phase::fwd, 300, 1, 2),
                                        rec(OpKind::send, Phase::bwd, 50, 0, 1)};
  const auto ops = summarize_ops(recs, Phase::fwd);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].count == 2);
  CHECK(ops[0].bytes_sent == 600);
  CHECK(ops[0].time_ms == 2);
  // all_gather algorithm bytes = buffer * g = 300 * 4 per call; 2400 B / 2 ms = 1.2e-3 GB/s.
  CHECK(ops[0].algbw_gbps == Approx(2400.0 / 2 / 1e6));
  CHECK(ops[0].busbw_gbps == Approx(ops[0].algbw_gbps * 3 / 4));
  CHECK(phase_bytes(recs, Phase::bwd) == 50);
  CHECK(phase_time_ms(recs, Phase::fwd) == 2);
}

TEST_CASE("result: rank summaries round-trip and reduce into the timed result") {
  RankSummary a;
  a.step_ms = 10, a.busy_ms = 8, a.exposed_ms = 2, a.standalone_ms = 4, a.bytes_fwd = 100, a.bytes_bwd = 200;
  a.mem_peak = 1000, a.model_flops = 1e9, a.hardware_flops = 1.2e9, a.hta_overlap = 0.5, a.timed_allocations = 0;
  RankSummary b = a;
  b.busy_ms = 4, b.mem_peak = 3000, b.model_flops = 3e9, b.hta_overlap = 0.25, b.bytes_bwd = 100, b.timed_allocations = 2;
  const std::vector<double> packed = b.pack();
  REQUIRE(packed.size() == RankSummary::kFields);
  const RankSummary back = RankSummary::unpack(packed.data());
  CHECK(back.pack() == packed);

  const Stats st = summarize({10, 12});
  const TimedResult t = make_timed_result({a, b}, st, st, st, {}, {CommPrediction{100, 200, 0, {}}}, Peak{2.0, "flag", ""}, 42);
  CHECK(t.comm_fwd.matches_model);
  CHECK_FALSE(t.comm_bwd.matches_model);  // rank 1 sent 100, not 200
  CHECK(t.comm_bwd.bytes_sent == 200);
  CHECK(t.hta_overlap_ratio() == 0.25);
  CHECK(t.overlap_ratio() == Approx(0.5));  // 1 - 2/4
  CHECK(t.timed_allocations == 2);
  CHECK(t.flops_imbalance() == Approx(1.5));
  CHECK(t.model_flops == Approx(2e9));
  REQUIRE(t.mfu);
  CHECK(*t.mfu == Approx(2e9 / (11e-3 * 2e12)));

  const TimedResult u = make_timed_result({a}, st, st, st, {}, {CommPrediction{100, 200, 0, {}}}, Peak{0, "unavailable", "x"}, 0);
  CHECK_FALSE(u.mfu);
  JobResult r;
  r.strategy = r.label = "ring";
  r.seq = 8;
  r.timed = u;
  const nlohmann::json j = r.to_json();
  CHECK(j["mfu"].is_null());
  CHECK(j["peak"]["tflops"].is_null());
  CHECK(j["peak"]["source"] == "unavailable");
  CHECK(j["memory"]["timed_allocations"] == 0);
  CHECK_FALSE(j.contains("reason"));
  CHECK_FALSE(j["comm"].contains("recompute"));  // only under --recompute

  // --recompute: a third phase with its own bytes, model and tiers; rank 1's repeated forward
  // sent 60 where the model says 64
  RankSummary c = a, d = a;
  c.bytes_rec = 64, c.intra_rec = 64, d.bytes_rec = 60, d.intra_rec = 60;
  CommPrediction rec{100, 200, 64, {}};
  RankTiers rt;
  rt.rec = {64, 0};
  const TimedResult w = make_timed_result({c, d}, st, st, st, {}, {rec}, Peak{0, "unavailable", "x"}, 0, {rt, rt}, true);
  REQUIRE(w.comm_recompute);
  CHECK(w.comm_recompute->per_rank == std::vector<int64_t>{64, 60});
  CHECK(w.comm_recompute->predicted_per_rank == std::vector<int64_t>{64, 64});
  CHECK_FALSE(w.comm_recompute->matches_model);
  CHECK(w.comm_recompute->bytes_sent == 64);
  CHECK(w.comm_recompute->predicted_tiers.size() == 2);
  r.timed = w;
  const nlohmann::json k = r.to_json();
  CHECK(k["comm"]["recompute"]["per_rank"] == nlohmann::json({64, 60}));
  CHECK(k["comm"]["recompute"]["matches_model"] == false);
  RankSummary quiet;  // only the repeated forward sends: the job is not silent
  quiet.bytes_rec = 8;
  CHECK_FALSE(make_timed_result({quiet}, st, st, st, {}, {rec}, Peak{0, "unavailable", "x"}, 0, {}, true).sends_nothing());
  CHECK(make_timed_result({RankSummary{}}, st, st, st, {}, {rec}, Peak{0, "unavailable", "x"}, 0, {}, true).sends_nothing());
}

TEST_CASE("whole-model memory estimate: 16 bytes per held parameter, activations by --recompute (hand-computed)") {
  ModelEstimateInput in;
  in.layers = 3;
  in.block_parameters = 1000;
  in.vocab = 50;
  in.dim = 8;
  in.tp = 2;
  in.replicas = 2;  // megatron-sp on 2 ranks: every weight on one rank only (the block's 1000 are its projections)
  in.block_activation_bytes = 5000;
  in.block_input_bytes = 256;
  const ModelEstimate e = model_estimate(in);
  // parameters = 3 x 1000 + 2 x 50 x 8 / 2 = 3400
  CHECK(e.layers == 3);
  CHECK(e.parameters == 3400);
  CHECK(e.weights == 6800);      // bf16: 2 B/param
  CHECK(e.grads == 6800);        // bf16: 2 B/param
  CHECK(e.optimizer == 40800);   // fp32 master + two moments: 12 B/param
  CHECK(e.activations == 15000); // 3 x 5000 (recompute none)
  CHECK(e.total == 69400);
  CHECK(e.formula.rfind("estimate", 0) == 0);
  CHECK(e.formula.find("recompute none") != std::string::npos);
  CHECK(e.formula.find("/ tp 2 = 3400") != std::string::npos);

  in.recompute = "full";  // each block's input kept, one block's activations recomputed at a time
  const ModelEstimate f = model_estimate(in);
  CHECK(f.activations == 3 * 256 + 5000);
  CHECK(f.total == 6800 + 6800 + 40800 + 5768);
  CHECK(f.formula.find("recompute full") != std::string::npos);

  in.recompute = "selective";  // the core's 1200 B of the 5000 live for one block only
  in.core_activation_bytes = 1200;
  const ModelEstimate g = model_estimate(in);
  CHECK(g.activations == 3 * (5000 - 1200) + 1200);
  CHECK(g.core_activations == 1200);
  CHECK(g.total == 6800 + 6800 + 40800 + 12600);
  CHECK(g.formula.find("- its attention core's 1200 B) + the core's 1200 B (recompute selective)") != std::string::npos);
  in.core_activation_bytes = 5001;  // more than the block's: not a part of it
  CHECK_THROWS_WITH(model_estimate(in), Catch::Contains("5001 B are not part of the block's 5000 B"));
  in.core_activation_bytes = 0;
  in.recompute = "some";
  CHECK_THROWS_WITH(model_estimate(in), Catch::Contains("none, selective or full, got 'some'"));
  in.recompute = "full";

  in.vocab = 5, in.dim = 3, in.tp = 4, in.replicas = 4, in.layers = 1;  // 30 head parameters over 4 ranks: at most 8 each
  CHECK(model_estimate(in).parameters == 1000 + 8);
  in.tp = 1, in.vocab = 0;  // no vocabulary: the blocks alone
  CHECK(model_estimate(in).parameters == 1000);
  in.replicas = 3;  // tp 1 ... but 3 replicas of a tp 4: not a mesh
  in.tp = 4;
  CHECK_THROWS_WITH(model_estimate(in), Catch::Contains("tp=4 mlp_tp=1 replicas=3"));
  in.tp = 1;
  in.shard = "zero3";
  CHECK_THROWS_WITH(model_estimate(in), Catch::Contains("got 'zero3'"));
  in.shard = "none";
  in.layers = 0;
  CHECK_THROWS_WITH(model_estimate(in), Catch::Contains("layers=0"));
}

// Worked out by hand (DESIGN "Memory"): llama3-8b (D 4096, H 32, G 8, d 128, F 14336, L 32,
// V 128256) on usp with t = 2 over P = 16 ranks. One block held per rank: norms 2 x 4096 = 8192;
// attention w_qkv 4096 x (16 + 2 x 4) x 128 = 12582912 + w_o 2048 x 4096 = 8388608 = 20971520;
// MLP 3 x 4096 x 7168 = 88080384; block 109060096. Embedding and head 2 x 128256 x 4096 / 2 =
// 525336576. Replicas: norms 16 (every rank), attention, MLP, embedding 16 / 2 = 8. Shards:
// 512, 2621440, 11010048, 65667072. Held 32 x 109060096 + 525336576 = 4015259648; sharded
// 32 x (512 + 2621440 + 11010048) + 65667072 = 501891072; the largest unit is the embedding and
// head, 525336576. Activations 32 x 10^9 (recompute none).
TEST_CASE("whole-model estimate under each --shard: llama3-8b usp t2 on 16 ranks (hand-computed)") {
  ModelEstimateInput in;
  in.layers = 32;
  in.block_parameters = 109060096;
  in.norm_parameters = 8192;
  in.mlp_parameters = 88080384;
  in.vocab = 128256, in.dim = 4096;
  in.tp = 2, in.mlp_tp = 2, in.replicas = 16;
  in.block_activation_bytes = 1000000000;
  struct Want {
    const char* shard;
    int64_t weights, grads, optimizer, total, sync, reduce_scatter, all_gather;
  };
  // sync: one reduce-scatter (or all-gather) = 32 x 2 x 512 x 15 + 32 x 2 x 2621440 x 7 +
  // 32 x 2 x 11010048 x 7 + 2 x 65667072 x 7 = 7026737152 B; all-reduce 2x, FSDP 3x.
  const Want wants[] = {
      // none: 2/2/12 B x held
      {"none", 8030519296, 8030519296, 48183115776, 96244154368, 14053474304, 7026737152, 7026737152},
      // optimizer: 12 B x sharded
      {"optimizer", 8030519296, 8030519296, 6022692864, 54083731456, 14053474304, 7026737152, 7026737152},
      // grads: 2 B x (sharded + the largest unit) = 2 x 1027227648
      {"grads", 8030519296, 2054455296, 6022692864, 48107667456, 14053474304, 7026737152, 7026737152},
      // params: weights as grads (the gathered unit)
      {"params", 2054455296, 2054455296, 6022692864, 42131603456, 21080211456, 7026737152, 14053474304},
  };
  for (const Want& w : wants) {
    INFO(w.shard);
    in.shard = w.shard;
    const ModelEstimate e = model_estimate(in);
    CHECK(e.parameters == 4015259648);
    REQUIRE(e.groups.size() == 4);
    CHECK(e.groups[0].name == "norms");
    CHECK(e.groups[0].replicas == 16);
    CHECK(e.groups[0].shard == 512);
    CHECK(e.groups[1].name == "attention");
    CHECK(e.groups[1].parameters == 20971520);
    CHECK(e.groups[1].replicas == 8);
    CHECK(e.groups[2].shard == 11010048);
    CHECK(e.groups[3].name == "embedding");
    CHECK(e.groups[3].copies == 1);
    CHECK(e.groups[3].shard == 65667072);
    CHECK(e.weights == w.weights);
    CHECK(e.grads == w.grads);
    CHECK(e.optimizer == w.optimizer);
    CHECK(e.activations == 32000000000);
    CHECK(e.total == w.total);
    CHECK(e.shard == w.shard);
    CHECK(e.formula.find(std::string("shard ") + w.shard) != std::string::npos);
    CHECK(e.formula.find("held 4015259648, sharded 501891072") != std::string::npos);
    CHECK(e.formula.find("ceil(parameters / replicas)") != std::string::npos);
    const GradSync g = grad_sync(e);
    CHECK(g.bytes == w.sync);
    CHECK(g.reduce_scatter == w.reduce_scatter);
    CHECK(g.all_gather == w.all_gather);
    CHECK(g.formula.find("= " + std::to_string(w.sync) + " B") != std::string::npos);
  }
}

// tiny (D 64, H 4, G 2, d 16, F 96, L 2, V 256) on the ring over P = 4 (t = 1): block = norms 128
// + attention 64 x 128 + 64 x 64 = 12288 + MLP 3 x 64 x 96 = 18432 = 30848; embedding and head
// 2 x 256 x 64 = 32768; every group over 4 replicas: shards 32, 3072, 4608, 8192. Held 2 x 30848
// + 32768 = 94464; sharded 2 x 7712 + 8192 = 23616; largest unit 32768. Activations 2 x 5000.
TEST_CASE("whole-model estimate under each --shard: tiny ring on 4 ranks, padding, single (hand-computed)") {
  ModelEstimateInput in;
  in.layers = 2;
  in.block_parameters = 30848;
  in.norm_parameters = 128;
  in.mlp_parameters = 18432;
  in.vocab = 256, in.dim = 64;
  in.replicas = 4;
  in.block_activation_bytes = 5000;
  struct Want {
    const char* shard;
    int64_t weights, grads, optimizer, total, sync;
  };
  // sync: one reduce-scatter = 2 x 2 x 32 x 3 + 2 x 2 x 3072 x 3 + 2 x 2 x 4608 x 3 + 2 x 8192 x 3 = 141696 B
  const Want wants[] = {{"none", 188928, 188928, 1133568, 1521424, 283392},
                        {"optimizer", 188928, 188928, 283392, 671248, 283392},
                        {"grads", 188928, 112768, 283392, 595088, 283392},
                        {"params", 112768, 112768, 283392, 518928, 425088}};
  for (const Want& w : wants) {
    INFO(w.shard);
    in.shard = w.shard;
    const ModelEstimate e = model_estimate(in);
    CHECK(e.parameters == 94464);
    CHECK(e.weights == w.weights);
    CHECK(e.grads == w.grads);
    CHECK(e.optimizer == w.optimizer);
    CHECK(e.total == w.total);
    CHECK(grad_sync(e).bytes == w.sync);
  }
  in.replicas = 3;  // 128 norm parameters over 3: shards padded to 43 (Megatron and FSDP pad their buffers)
  in.shard = "optimizer";
  CHECK(model_estimate(in).groups[0].shard == 43);
  CHECK(model_estimate(in).groups[3].shard == 10923);  // ceil(32768 / 3)
  in.replicas = 1;  // single: one rank runs the model alone, nothing to shard or synchronise
  for (const char* s : {"none", "optimizer", "grads", "params"}) {
    in.shard = s;
    const ModelEstimate e = model_estimate(in);
    CHECK(e.optimizer == 12 * 94464);
    CHECK(grad_sync(e).bytes == 0);
  }
}

TEST_CASE("longest cache that fits: weights, one step, then L layers of cache over the shards (hand-computed)") {
  CacheFitInput in;
  in.capacity = 1000000;
  in.layers = 4;
  in.block_parameters = 10000;
  in.vocab = 100;
  in.dim = 50;
  in.step_bytes = 20000;
  in.cache_bytes_per_token = 64;
  in.shards = 8;
  // weights (4 x 10000 + 2 x 100 x 50) x 2 = 100000; room 1000000 - 100000 - 20000 = 880000;
  // per rank 880000 / (4 x 64) = 3437.5 -> 3437 tokens, x 8 ranks = 27496
  const CacheFit f = longest_cache(in);
  CHECK(f.max_cached_tokens == 27496);
  CHECK(f.formula.find("= 100000 B") != std::string::npos);
  CHECK(f.formula.find("x 8 ranks") != std::string::npos);
  in.shards = 1;
  CHECK(longest_cache(in).max_cached_tokens == 3437);
  in.capacity = 120000;  // weights and the step exactly: no room for a cached token
  CHECK(longest_cache(in).max_cached_tokens == 0);
  in.capacity = 50000;  // the weights alone do not fit
  CHECK(longest_cache(in).max_cached_tokens == 0);
  in.capacity = 0;
  CHECK_THROWS_WITH(longest_cache(in), Catch::Contains("capacity=0"));
}

TEST_CASE("result JSON: memory.model_estimate is the estimate's fields, null without one") {
  JobResult r;
  r.strategy = r.label = "single";
  r.seq = 8;
  r.timed = TimedResult{};
  CHECK(r.to_json()["memory"]["model_estimate"].is_null());
  ModelEstimateInput in;
  in.layers = 2, in.block_parameters = 10, in.block_activation_bytes = 7;
  r.timed->model_estimate = model_estimate(in);
  const nlohmann::json m = r.to_json()["memory"]["model_estimate"];
  CHECK(m["layers"] == 2);
  CHECK(m["parameters"] == 20);
  CHECK(m["weights"] == 40);
  CHECK(m["grads"] == 40);
  CHECK(m["optimizer"] == 240);
  CHECK(m["activations"] == 14);
  CHECK(m["total"] == 334);
  CHECK(m["shard"] == "none");
  CHECK(m["groups"].size() == 4);
  CHECK(m["groups"][1] == nlohmann::json::parse(R"({"name": "attention", "copies": 2, "parameters": 10, "replicas": 1, "shard": 10})"));
  CHECK(m["formula"].get<std::string>().rfind("estimate", 0) == 0);
  CHECK(r.to_json()["step"].is_null());  // forward only, or no estimate: no gradient sync
  r.timed->grad_sync = grad_sync(*r.timed->model_estimate);
  const nlohmann::json s = r.to_json()["step"];
  CHECK(s["shard"] == "none");
  CHECK(s["executed"] == false);  // modelled, not run
  CHECK(s["grad_sync_bytes"] == 0);  // one replica: nothing to synchronise
  CHECK(s["reduce_scatter_bytes"] == 0);
  CHECK(s["all_gather_bytes"] == 0);
  CHECK(s["formula"].get<std::string>().rfind("model", 0) == 0);
}

TEST_CASE("block cache: freed blocks are reused by size bucket") {
  int raw_allocs = 0, raw_frees = 0;
  {
    BlockCache c([&](size_t n) { ++raw_allocs; return std::malloc(n); }, [&](void* p) { ++raw_frees; std::free(p); });
    void* p = c.allocate(1000);
    c.release(p, 1000);
    void* q = c.allocate(900);  // same 1024-byte bucket
    CHECK(q == p);
    CHECK(raw_allocs == 1);
    void* r = c.allocate(5000);
    CHECK(raw_allocs == 2);
    c.release(q, 900);
    c.release(r, 5000);
    CHECK(c.cached_bytes() == BlockCache::round_size(1000) + BlockCache::round_size(5000));
    c.empty_cache();
    CHECK(raw_frees == 2);
    CHECK(c.reserved_bytes() == 0);
  }
  CHECK(BlockCache::round_size(0) == 512);
  CHECK(BlockCache::round_size((1 << 20) + 1) == (1 << 20) + (1 << 17));  // 1/8 steps above 1 MiB
}

TEST_CASE("memory tracker: --mem-limit refuses an allocation before it happens, naming the sizes") {
  MemTracker m;
  m.set_limit(1000);
  m.on_alloc(MemKind::activations, 600);
  try {
    m.on_alloc(MemKind::comm, 500);
    FAIL("no MemLimitError");
  } catch (const MemLimitError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("500") != std::string::npos);
    CHECK(msg.find("1100") != std::string::npos);
    CHECK(msg.find("limit 1000") != std::string::npos);
  }
  CHECK(m.stats().live_total == 600);  // nothing was added
  CHECK(m.alloc_calls() == 2);
  m.on_alloc(MemKind::comm, 400);  // exactly at the limit is allowed
  CHECK(m.stats().peak_total == 1000);
}

TEST_CASE("dump directory names are no shell globs") {
  CHECK(dump_dir_name("usp[u2xr2]") == "usp_u2xr2");
  CHECK(dump_dir_name("ring-zigzag") == "ring-zigzag");
  CHECK(dump_dir_name("a b*c") == "a_b_c");
}

TEST_CASE("tiers: the model's bytes split by destination node on the mesh's groups") {
  const std::vector<int> two_nodes = {0, 0, 0, 0, 1, 1, 1, 1};  // P = 8, K = 4
  SECTION("a ring over all ranks crosses nodes only at the node boundaries") {
    CommPrediction p;
    p.add("cp", Phase::fwd, 1, 700).add("cp", Phase::bwd, -3, 40);
    const auto t = predict_tiers(p, usp_desc(1, 8, Placement::ulysses_inner), 8, two_nodes);
    REQUIRE(t.size() == 8);
    for (int r = 0; r < 8; ++r) {
      const bool crosses = r == 3 || r == 7;  // 3 -> 4, 7 -> 0
      CHECK(t[r].fwd.inter == (crosses ? 700 : 0));
      CHECK(t[r].fwd.intra == (crosses ? 0 : 700));
      const bool back_crosses = (r + 5) % 8 / 4 != r / 4;  // r - 3 mod 8
      CHECK(t[r].bwd.inter == (back_crosses ? 40 : 0));
    }
  }
  SECTION("a spread share goes in equal chunks to every other member") {
    CommPrediction p;
    p.add("cp", Phase::fwd, 0, 7 * 10);  // 10 bytes to each of 7 peers: 3 on the node, 4 off it
    const auto t = predict_tiers(p, usp_desc(1, 8, Placement::ulysses_inner), 8, two_nodes);
    for (int r = 0; r < 8; ++r) {
      CHECK(t[r].fwd.intra == 30);
      CHECK(t[r].fwd.inter == 40);
    }
    CHECK_THROWS_AS(predict_tiers(CommPrediction{}.add("cp", Phase::fwd, 0, 71), usp_desc(1, 8, Placement::ulysses_inner), 8, two_nodes),
                    std::logic_error);
  }
  SECTION("usp u2 x r4: Ulysses groups inside nodes with ulysses-inner, across them with ring-inner") {
    CommPrediction p;
    p.add("ulysses", Phase::fwd, 0, 100).add("ring", Phase::fwd, 1, 1000);
    const auto in = predict_tiers(p, usp_desc(2, 4, Placement::ulysses_inner), 8, two_nodes);
    const auto out = predict_tiers(p, usp_desc(2, 4, Placement::ring_inner), 8, two_nodes);
    int64_t in_inter = 0, out_inter_ulysses_ranks = 0;
    for (int r = 0; r < 8; ++r) {
      in_inter += in[r].fwd.inter;
      CHECK(in[r].fwd.intra >= 100);  // the all-to-all partner is a neighbour: same node
      out_inter_ulysses_ranks += out[r].fwd.inter >= 100;
    }
    CHECK(in_inter == 4 * 1000);  // ring {0,2,4,6} and {1,3,5,7}: hops 2->4, 6->0, 3->5, 7->1
    CHECK(out_inter_ulysses_ranks == 8);  // ring-inner: every Ulysses partner is on the other node
  }
  SECTION("one node: everything is intra-node") {
    CommPrediction p;
    p.add("ring", Phase::bwd, 1, 5);
    for (const auto& r : predict_tiers(p, usp_desc(2, 4, Placement::ulysses_inner), 8, {}))
      CHECK((r.bwd.intra == 5 && r.bwd.inter == 0));
  }
}

TEST_CASE("tiers: split_by_tier follows DESIGN's per-destination convention") {
  const std::vector<int> members = {0, 1, 2, 3}, nodes = {0, 0, 1, 1};
  CHECK(split_by_tier(OpKind::all_to_all, 400, members, 0, -1, nodes).intra == 100);
  CHECK(split_by_tier(OpKind::all_to_all, 400, members, 0, -1, nodes).inter == 200);
  CHECK(split_by_tier(OpKind::all_gather, 50, members, 3, -1, nodes).inter == 100);
  CHECK(split_by_tier(OpKind::reduce_scatter, 400, members, 2, -1, nodes).intra == 100);
  CHECK(split_by_tier(OpKind::send, 9, members, 1, 2, nodes).inter == 9);
  CHECK(split_by_tier(OpKind::recv, 9, members, 1, 2, nodes).inter == 0);
}

TEST_CASE("tiers: the placement warning appears exactly when a Ulysses group spans nodes and the rings do not") {
  const std::vector<int> k4 = {0, 0, 0, 0, 1, 1, 1, 1};  // P = 8, K = 4
  // ulysses-inner: Ulysses groups are neighbours, inside a node -> no warning.
  CHECK(placement_warning("usp", usp_desc(2, 4, Placement::ulysses_inner), 8, k4).empty());
  CHECK(placement_warning("usp", usp_desc(4, 2, Placement::ulysses_inner), 8, k4).empty());
  // ring-inner: rings of 4 or 2 neighbours stay inside a node, Ulysses groups cross -> warning.
  CHECK(placement_warning("usp", usp_desc(2, 4, Placement::ring_inner), 8, k4).find("span nodes") != std::string::npos);
  CHECK(placement_warning("usp", usp_desc(4, 2, Placement::ring_inner), 8, k4).find("Ulysses groups of 4") != std::string::npos);
  // U = 8 > K: the Ulysses group must span nodes, but there is no ring to put inside instead.
  CHECK(placement_warning("usp", usp_desc(8, 1, Placement::ulysses_inner), 8, k4).empty());
  // ring-inner with ring groups that also cross (K = 2, rings of 4): no better placement -> none.
  CHECK(placement_warning("usp", usp_desc(2, 4, Placement::ring_inner), 8, {0, 0, 1, 1, 2, 2, 3, 3}).empty());
  CHECK(placement_warning("megatron-sp", usp_desc(1, 8, Placement::ulysses_inner), 8, k4).find("megatron-sp") != std::string::npos);
  CHECK(placement_warning("megatron-sp", usp_desc(1, 8, Placement::ulysses_inner), 8, {}).empty());
  CHECK(placement_warning("ring", usp_desc(1, 8, Placement::ulysses_inner), 8, k4).empty());
}

// The names the code writes into reports are the report schema's (results_schema), both ways: a
// renamed enum value, or a schema edit the code does not follow, fails here before a report
// fails validation in the field.
TEST_CASE("names written into reports are exactly the report schema's", "[report]") {
  std::ifstream f(CPBENCH_REPORT_SCHEMA);
  REQUIRE(f.good());
  const nlohmann::json schema = nlohmann::json::parse(f);
  auto as_set = [](const nlohmann::json& arr) {
    std::set<std::string> out;
    for (const auto& v : arr) out.insert(v.get<std::string>());
    return out;
  };
  std::set<std::string> ops;
  for (OpKind k : {OpKind::all_to_all, OpKind::all_gather, OpKind::reduce_scatter, OpKind::send, OpKind::recv,
                   OpKind::barrier})
    ops.insert(op_name(k));
  CHECK(ops.size() == 6);  // distinct
  CHECK(ops == as_set(schema["$defs"]["comm_op"]["properties"]["op"]["enum"]));

  std::set<std::string> placements;
  for (Placement p : {Placement::ulysses_inner, Placement::ring_inner}) {
    placements.insert(placement_name(p));
    CHECK(parse_placement(placement_name(p)) == p);
  }
  CHECK(placements == as_set(schema["$defs"]["placement"]["enum"]));

  std::set<std::string> dtypes;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) dtypes.insert(dtype_name(t));
  dtypes.insert("fp8");  // --dtype fp8: a run dtype on bf16 storage (RunConfig::storage_dtype), no DType
  CHECK(dtypes == as_set(schema["properties"]["config"]["properties"]["dtype"]["enum"]));

  // Phases and memory kinds are keys of a result's comm and memory blocks.
  const auto& result = schema["$defs"]["result"]["properties"];
  const std::vector<std::string> comm_required = result["comm"]["required"];
  CHECK(comm_required == std::vector<std::string>{phase_name(Phase::fwd), phase_name(Phase::bwd)});
  const auto& memory = result["memory"]["properties"];
  for (MemKind k : {MemKind::weights, MemKind::activations, MemKind::comm}) {
    INFO(mem_kind_name(k));
    CHECK(memory.contains(mem_kind_name(k)));
  }
}

// The writer's schema_version is the one the schema it is validated against declares: a schema
// bumped without the writer (or the reverse) fails here, not in every report test.
TEST_CASE("the writer's schema_version is the schema's", "[report]") {
  std::ifstream f(CPBENCH_REPORT_SCHEMA);
  REQUIRE(f.good());
  const nlohmann::json schema = nlohmann::json::parse(f);
  const nlohmann::json report = make_report(nlohmann::json::object(), RunConfig{}, 1, {}, true);
  CHECK(report.at("schema_version") == schema["properties"]["schema_version"]["const"]);
}

// Report integrity (issue 39 item 6): a rate above the peak it is divided by, and counted FLOPs
// that disagree with the layer's model, are flagged with both numbers; nothing else is.
TEST_CASE("integrity: over-peak and FLOPs-mismatch flags, with both numbers", "[report]") {
  // Megatron-Bridge #2665's figure against H200's dense bf16 peak.
  std::vector<std::string> f = integrity_flags(1937.0, 989.0, "device-table", 1e9, 1e9);
  REQUIRE(f.size() == 1);
  CHECK(f[0].rfind("tflops_over_peak: ", 0) == 0);
  CHECK(f[0].find("1937") != std::string::npos);
  CHECK(f[0].find("989") != std::string::npos);
  CHECK(f[0].find("device-table") != std::string::npos);
  // At or below the peak: nothing; an unknown peak (0) cannot be exceeded.
  CHECK(integrity_flags(989.0, 989.0, "device-table", 1e9, 1e9).empty());
  CHECK(integrity_flags(988.9, 989.0, "device-table", 1e9, 1e9).empty());
  CHECK(integrity_flags(1937.0, 0.0, "unavailable", 1e9, 1e9).empty());

  // Counted 4x the model (CP that did not split the sequence over 4 ranks): flagged, both numbers.
  f = integrity_flags(1.0, 989.0, "flag", 4e9, 1e9);
  REQUIRE(f.size() == 1);
  CHECK(f[0].rfind("flops_mismatch: ", 0) == 0);
  CHECK(f[0].find("4000000000") != std::string::npos);
  CHECK(f[0].find("1000000000") != std::string::npos);
  CHECK(integrity_flags(1.0, 989.0, "flag", 0.999e9, 1e9).size() == 1);    // less work than the model too
  CHECK(integrity_flags(1.0, 989.0, "flag", 1e9 * (1 + 1e-7), 1e9).empty());  // rounding, not a mismatch
  CHECK(integrity_flags(1.0, 989.0, "flag", 4e9, std::nullopt).empty());      // no model (decode)
  CHECK(integrity_flags(2000.0, 989.0, "flag", 4e9, 1e9).size() == 2);

  // The result carries them into the report: ok false exactly when there are flags.
  RankSummary a;
  a.step_ms = 1, a.model_flops = 3e9, a.hardware_flops = 3e9;
  const Stats st = summarize({1.0});
  TimedResult t = make_timed_result({a, a}, st, st, st, {}, {CommPrediction{0, 0, 0, {}}}, Peak{5.0, "flag", ""}, 0);
  t.expected_flops = 6e9;  // = the two ranks' 3e9; tflops = 3e9 / 1e-3 / 1e12 = 3 < 5
  JobResult r;
  r.strategy = r.label = "ring";
  r.seq = 8;
  r.timed = t;
  nlohmann::json j = r.to_json();
  CHECK(j["integrity"] == nlohmann::json{{"ok", true}, {"flags", nlohmann::json::array()}, {"expected_flops", 6e9}});
  r.timed->peak.tflops = 2.0;   // 3 TFLOP/s over a peak of 2
  r.timed->expected_flops = 3e9;  // the two ranks did twice the model's work
  j = r.to_json();
  CHECK(j["integrity"]["ok"] == false);
  REQUIRE(j["integrity"]["flags"].size() == 2);
  CHECK(j["integrity"]["flags"][0].get<std::string>().rfind("tflops_over_peak: 3 TFLOP/s > peak 2 TFLOP/s", 0) == 0);
  CHECK(j["integrity"]["flags"][1].get<std::string>().find("counted 6000000000 != model 3000000000") != std::string::npos);
  r.timed->expected_flops.reset();
  CHECK(r.to_json()["integrity"]["expected_flops"].is_null());
}

// The model the counted FLOPs are checked against, by hand: B = 1, N = 4, H = 2, G = 1, d = 2,
// D = 4, causal. GEMMs per token: QKV 2*4*8 + output 2*4*4 = 96, 384 for 4 tokens; the causal
// pairs of 4 tokens are 10, attention 4*d*H = 16 per pair, 160.
TEST_CASE("integrity: the layer's expected FLOPs (hand-computed)", "[report]") {
  LayerShape s;
  s.B = 1, s.N = 4, s.H = 2, s.G = 1, s.d = 2, s.D = 4;
  CHECK(*expected_job_flops(s) == 3 * 384 + 3 * 160);  // train: backward 2x both
  CHECK(*expected_job_flops(s, 4) == 4 * (3 * 384 + 3 * 160));  // four ranks each running it (single)
  s.pass.kind = PassKind::prefill;
  CHECK(*expected_job_flops(s) == 384 + 160);
  s.pass.cached = 2;  // the 2 new tokens' GEMMs; their queries (positions 2, 3) see 3 + 4 keys
  CHECK(*expected_job_flops(s) == 192 + 16 * 7);
  s.pass.cached = 0, s.pass.kind = PassKind::train, s.mask.causal = false;  // 16 pairs
  CHECK(*expected_job_flops(s) == 3 * 384 + 3 * 16 * 16);
  s.mask.causal = true, s.mask.window = 2;  // pairs 1 + 2 + 2 + 2
  CHECK(*expected_job_flops(s) == 3 * 384 + 3 * 16 * 7);
  s.mask.window = 0, s.full_block = true, s.F = 3;  // + gate, up 2*4*3*4 each, down 2*4*4*3
  CHECK(*expected_job_flops(s) == 3 * (384 + 288) + 3 * 160);
  s.full_block = false, s.pass.kind = PassKind::decode, s.pass.cached = 4, s.pass.steps = 2;  // decode: no model
  CHECK_FALSE(expected_job_flops(s));
}
