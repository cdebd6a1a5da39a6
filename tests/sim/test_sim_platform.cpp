// The platform model of the sim backend: efficiency interpolation, kernel costs, the report's
// context.simulated, loading every shipped platform and rejecting broken ones.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/sim/sim_platform.h"

using namespace cpbench;
using nlohmann::json;

namespace {

json toy() {
  return json::parse(R"({
    "name": "toy", "device": "Toy GPU",
    "peak_tflops": {"bf16": 100, "fp32": 50},
    "efficiency": {"gemm": [[16, 0.2], [256, 0.6]],
                   "attn_fwd": [[64, 0.5]],
                   "attn_bwd": [[64, 0.25], [4096, 0.4]]},
    "memory_bw_gbs": 1000, "hbm_gib": 16, "kernel_launch_us": 2,
    "band": {"lo": 0.8, "hi": 1.25, "source": "toy"}})");
}

}  // namespace

TEST_CASE("efficiency: constant beyond the ends, linear in log2(size) between points", "[sim]") {
  const SimPlatform p = SimPlatform::from_json(toy(), "toy");
  CHECK(p.efficiency_at(SimClass::gemm, 1) == Approx(0.2));
  CHECK(p.efficiency_at(SimClass::gemm, 16) == Approx(0.2));
  CHECK(p.efficiency_at(SimClass::gemm, 64) == Approx(0.4));  // log2: halfway from 16 to 256
  CHECK(p.efficiency_at(SimClass::gemm, 128) == Approx(0.5));
  CHECK(p.efficiency_at(SimClass::gemm, 1e6) == Approx(0.6));
  CHECK(p.efficiency_at(SimClass::attn_fwd, 3) == Approx(0.5));
  CHECK(p.efficiency_at(SimClass::attn_bwd, 512) == Approx(0.25 + 0.15 * 0.5));
}

TEST_CASE("kernel cost: launch + flops / (peak x efficiency), launch + bytes / bandwidth", "[sim]") {
  const SimPlatform p = SimPlatform::from_json(toy(), "toy");
  // 1e12 FLOPs of bf16 GEMM at size 256: 100 TFLOP/s x 0.6 -> 1/60 s, plus 2 us.
  CHECK(p.compute_seconds(SimClass::gemm, 1e12, 256, DType::bf16) == Approx(1.0 / 60 + 2e-6));
  CHECK(p.compute_seconds(SimClass::gemm, 1e12, 256, DType::f32) == Approx(1.0 / 30 + 2e-6));
  CHECK(p.compute_seconds(SimClass::attn_fwd, 0, 64, DType::bf16) == Approx(2e-6));
  CHECK(p.memory_seconds(1e9) == Approx(1e-3 + 2e-6));
  CHECK_THROWS_WITH(p.compute_seconds(SimClass::gemm, 1, 1, DType::f16),
                    Catch::Contains("no peak_tflops for fp16"));
}

TEST_CASE("decode cost: bytes at the bandwidth, or FLOPs at the attn_decode table (peak without one)", "[sim]") {
  const SimPlatform bare = SimPlatform::from_json(toy(), "toy");
  json j = toy();
  j["efficiency"]["attn_decode"] = {{"points", json::parse("[[128, 0.5]]")}, {"source", "toy"}};
  const SimPlatform with = SimPlatform::from_json(j, "toy");
  // Memory-bound (GQA): 1e9 bytes take 1 ms, 1e9 FLOPs 10 us at peak or 20 us at half of it.
  CHECK(bare.decode_seconds(1e9, 1e9, 8, DType::bf16, 128) == Approx(1e-3 + 2e-6));
  CHECK(with.decode_seconds(1e9, 1e9, 8, DType::bf16, 128) == Approx(1e-3 + 2e-6));
  // Compute-bound (MLA's 128 heads on one latent): 1e12 FLOPs at peak, or at the table's 0.5.
  CHECK(bare.decode_seconds(1e12, 1e6, 128, DType::bf16, 576) == Approx(1e-2 + 2e-6));
  CHECK(with.decode_seconds(1e12, 1e6, 128, DType::bf16, 576) == Approx(2e-2 + 2e-6));
  CHECK(bare.context().at("efficiencies_fallback").at("attn_decode") == "peak");
  CHECK(with.context().at("efficiencies").at("attn_decode") == json::parse("[[128.0, 0.5]]"));
  CHECK(with.context().at("efficiency_tables").at("attn_decode").at("source") == "toy");
}

TEST_CASE("context.simulated names the platform, its peaks, efficiencies and bandwidth", "[sim]") {
  const json c = SimPlatform::from_json(toy(), "toy.json").context();
  CHECK(c.at("platform") == "toy");
  CHECK(c.at("peak_tflops").at("bf16") == 100.0);
  CHECK(c.at("efficiencies").at("attn_bwd") == json::parse("[[64.0, 0.25], [4096.0, 0.4]]"));
  CHECK(c.at("memory_bw").get<double>() == Approx(1e12));
  CHECK(c.at("hbm_bytes").get<double>() == Approx(16.0 * 1073741824.0));
  CHECK(c.at("band") == json::parse(R"({"lo": 0.8, "hi": 1.25, "source": "toy"})"));
}

TEST_CASE("attention blocks: looked up at their visible extent, masked blocks at the masked table", "[sim]") {
  // Size: min(pairs / nq, pairs / nk). A full block is min(nq, nk); a causal diagonal of n
  // tokens (n (n + 1) / 2 pairs) is (n + 1) / 2; a window of W = 1024 inside a 32768-token
  // block is about W, not 32768.
  CHECK(attention_block_size(4096, 1024, 4096LL * 1024) == 1024);
  CHECK(attention_block_size(2048, 2048, 2048LL * 2049 / 2) == Approx(1024.5));
  const int64_t n = 32768, W = 1024;
  const int64_t window_pairs = W * (W + 1) / 2 + (n - W) * W;  // causal window, W keys per query once full
  CHECK(attention_block_size(n, n, window_pairs) == Approx(double(window_pairs) / n));
  CHECK(attention_block_size(n, n, window_pairs) < 1.0 * W);
  CHECK(attention_block_size(n, n, window_pairs) > 0.98 * W);
  CHECK(attention_block_size(16, 16, 0) == 1);

  json j = toy();  // attn_fwd: 0.5 everywhere; attn_bwd 0.25 at 64 .. 0.4 at 4096
  const SimPlatform plain = SimPlatform::from_json(j, "toy.json");
  CHECK(!plain.has_table(SimClass::attn_fwd_masked));
  // Without masked tables a masked block is charged at the unmasked table, at its own size:
  // bwd of a causal 4096 diagonal at size 2048.5 (log2 interpolation), not 4096's 0.4.
  const double flops = 1e12;
  const int64_t diag = 4096LL * 4097 / 2;
  const double e_diag = 0.25 + 0.15 * (std::log2(2048.5) - 6) / 6;
  CHECK(plain.attention_seconds(4096, 4096, diag, flops, true, DType::bf16, 64) == Approx(2e-6 + 1.0 / (100 * e_diag)));
  CHECK(plain.attention_seconds(4096, 4096, 4096LL * 4096, flops, true, DType::bf16, 64) == Approx(2e-6 + 1.0 / (100 * 0.4)));
  const json c = plain.context();
  CHECK(c.at("efficiencies_fallback") ==
        json::parse(R"({"attn_fwd_masked": "attn_fwd", "attn_bwd_masked": "attn_bwd", "attn_decode": "peak"})"));
  CHECK(!c.at("efficiencies").contains("attn_fwd_masked"));

  // With masked tables: a block with one pair masked takes the masked class, a full one never.
  j["efficiency"]["attn_fwd_masked"] = json::parse("[[64, 0.2]]");
  j["efficiency"]["attn_bwd_masked"] = json::parse("[[64, 0.1]]");
  const SimPlatform masked = SimPlatform::from_json(j, "toy.json");
  CHECK(masked.attention_seconds(64, 64, 64 * 64 - 1, flops, false, DType::bf16, 64) == Approx(2e-6 + 1.0 / (100 * 0.2)));
  CHECK(masked.attention_seconds(64, 64, 64 * 64, flops, false, DType::bf16, 64) == Approx(2e-6 + 1.0 / (100 * 0.5)));
  CHECK(masked.attention_seconds(64, 64, 64 * 64 - 1, flops, true, DType::bf16, 64) == Approx(2e-6 + 1.0 / (100 * 0.1)));
  CHECK(masked.context().at("efficiencies").at("attn_bwd_masked") == json::parse("[[64.0, 0.1]]"));
  CHECK(masked.context().at("efficiencies_fallback") == json::parse(R"({"attn_decode": "peak"})"));
  // A masked table is checked like the others.
  j["efficiency"]["attn_fwd_masked"] = json::parse("[[64, 1.2]]");
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("efficiency.attn_fwd_masked"));
  j["efficiency"]["attn_fwd_masked"] = json::array();
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("efficiency.attn_fwd_masked must be a non-empty array"));
}

TEST_CASE("efficiency tables by head dim: the run's own, else the nearest, each with its source", "[sim]") {
  json j = toy();
  j["efficiency"]["attn_fwd"] = json::parse(R"({"by_head_dim": {"64": [[64, 0.2]], "128": [[64, 0.4]], "256": [[64, 0.5]]},
                                               "source": "toy paper, Fig. 1"})");
  const SimPlatform p = SimPlatform::from_json(j, "toy.json");
  CHECK(p.table_head_dim(SimClass::attn_fwd, 128) == 128);
  CHECK(p.efficiency_at(SimClass::attn_fwd, 64, 64) == Approx(0.2));
  CHECK(p.efficiency_at(SimClass::attn_fwd, 64, 128) == Approx(0.4));
  // No table for 96: 128 is nearer in log2 than 64 (0.415 vs 0.585); 16 takes 64, 512 takes 256.
  CHECK(p.table_head_dim(SimClass::attn_fwd, 96) == 128);
  CHECK(p.table_head_dim(SimClass::attn_fwd, 16) == 64);
  CHECK(p.table_head_dim(SimClass::attn_fwd, 512) == 256);
  CHECK(p.table_head_dim(SimClass::attn_fwd, 0) == 64);
  // The masked class without a table of its own falls back by head dim too.
  CHECK(p.efficiency_at(SimClass::attn_fwd_masked, 64, 256) == Approx(0.5));
  CHECK(p.attention_seconds(64, 64, 64 * 64, 1e12, false, DType::bf16, 128) == Approx(2e-6 + 1.0 / (100 * 0.4)));
  // A plain array is one table for any head dim.
  CHECK(p.table_head_dim(SimClass::attn_bwd, 96) == 0);
  CHECK(p.efficiency_at(SimClass::attn_bwd, 64, 96) == Approx(0.25));

  // The report says which table each class is charged at for the run's head dim, and its source.
  const json c = p.context(96);
  CHECK(c.at("efficiencies").at("attn_fwd") == json::parse("[[64.0, 0.4]]"));
  CHECK(c.at("efficiency_tables").at("attn_fwd") ==
        json::parse(R"({"head_dim": 128, "matches_run": false, "source": "toy paper, Fig. 1"})"));
  CHECK(c.at("efficiency_tables").at("attn_bwd") == json::parse(R"({"head_dim": null, "matches_run": true})"));
  CHECK(p.context(128).at("efficiency_tables").at("attn_fwd").at("matches_run") == true);
  CHECK(!c.at("efficiency_tables").contains("attn_fwd_masked"));  // no table: efficiencies_fallback says so

  auto refuse = [&](const char* table, const std::string& msg) {
    json b = toy();
    b["efficiency"]["attn_fwd"] = json::parse(table);
    CHECK_THROWS_WITH(SimPlatform::from_json(b, "bad.json"), Catch::Contains(msg) && Catch::Contains("bad.json"));
  };
  refuse(R"({"by_head_dim": {"128": [[64, 0.4]]}})", "efficiency.attn_fwd.source must say where");
  refuse(R"({"by_head_dim": {"128": [[64, 0.4]]}, "source": 7})", "efficiency.attn_fwd.source must say where");
  refuse(R"({"by_head_dim": {}, "source": "s"})", "needs a non-empty \"by_head_dim\"");
  refuse(R"({"by_head_dim": {"d128": [[64, 0.4]]}, "source": "s"})", "key 'd128' is not a head dim");
  refuse(R"({"by_head_dim": {"0": [[64, 0.4]]}, "source": "s"})", "key '0' is not a head dim");
  refuse(R"({"by_head_dim": {"128": [[64, 1.4]]}, "source": "s"})", "efficiency.attn_fwd.by_head_dim.128: efficiency");
  refuse(R"({"by_head_dim": {"128": []}, "source": "s"})", "efficiency.attn_fwd.by_head_dim.128 must be a non-empty array");
}

TEST_CASE("a table for any head dim with its source: {points, source}", "[sim]") {
  json j = toy();
  j["efficiency"]["gemm"] = json::parse(R"({"points": [[1024, 0.4], [4096, 0.8]], "source": "a GEMM sweep"})");
  const SimPlatform p = SimPlatform::from_json(j, "toy");
  CHECK(p.efficiency_at(SimClass::gemm, 2048) == Approx(0.6));
  CHECK(p.efficiency_at(SimClass::gemm, 64) == Approx(0.4));
  CHECK(p.table_head_dim(SimClass::gemm, 128) == 0);
  CHECK(p.context(128)["efficiency_tables"]["gemm"]["source"] == "a GEMM sweep");
  CHECK(p.context(128)["efficiency_tables"]["gemm"]["matches_run"] == true);
  j["efficiency"]["gemm"] = json::parse(R"({"points": [[1024, 0.4]]})");
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("efficiency.gemm.source"));
  j["efficiency"]["gemm"] = json::parse(R"({"points": [], "source": "s"})");
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("efficiency.gemm.points"));
}

TEST_CASE("GEMM by the whole shape: a grid's times interpolated in m, n, k, squares at (mnk)^(1/3)", "[sim]") {
  // Without a grid the square table is read at the geometric mean of m, n, k (not min(m, n, k)):
  // 16 x 16 x 4096 is 256's rate, as a 256-cube of the same FLOPs.
  const SimPlatform sq = SimPlatform::from_json(toy(), "toy");
  CHECK(sq.gemm_efficiency(16, 16, 65536) == Approx(0.6));
  CHECK(sq.gemm_efficiency(64, 64, 64) == Approx(0.4));
  CHECK(sq.gemm_seconds(64, 64, 64, DType::bf16) == Approx(2e-6 + 2.0 * 64 * 64 * 64 / (100e12 * 0.4)));
  // A 2 x 2 x 2 grid whose time is a + b m n k (a GEMM's fixed cost and its work): the multilinear
  // interpolation of the nodes' times reproduces every shape in between exactly.
  json j = toy();
  auto eff_of = [](double m, double n, double k) { return m * n * k / (1e6 + 4.0 * m * n * k); };  // time ~ 1e6 + 4 mnk
  json rows = json::array();
  for (double m : {256.0, 1024.0})
    for (double n : {512.0, 2048.0})
      for (double k : {128.0, 4096.0}) rows.push_back({m, n, k, eff_of(m, n, k)});
  j["efficiency"]["gemm"] = {{"shapes", rows}, {"source", "a toy grid"}};
  const SimPlatform g = SimPlatform::from_json(j, "grid");
  CHECK(g.gemm_efficiency(512, 1024, 1000) == Approx(eff_of(512, 1024, 1000)));
  CHECK(g.gemm_efficiency(256, 2048, 4096) == Approx(eff_of(256, 2048, 4096)));
  CHECK(g.gemm_efficiency(100, 100, 100) == Approx(eff_of(256, 512, 128)));     // held at the low ends
  CHECK(g.gemm_efficiency(1e5, 2048, 1e5) == Approx(eff_of(1024, 2048, 4096)));  // and at the high ends
  // the published time includes the kernel's fixed cost: no launch added, but never less than it
  CHECK(g.gemm_seconds(512, 1024, 1000, DType::bf16) == Approx(2.0 * 512 * 1024 * 1000 / (100e12 * eff_of(512, 1024, 1000))));
  CHECK(g.gemm_seconds(1, 1, 1, DType::bf16) == Approx(2e-6));
  CHECK(g.context()["efficiencies"]["gemm"].size() == 8);
  CHECK(g.context()["efficiency_tables"]["gemm"]["source"] == "a toy grid");
  rows.erase(rows.size() - 1);
  j["efficiency"]["gemm"] = {{"shapes", rows}, {"source", "s"}};
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("complete grid"));
  j["efficiency"]["gemm"] = {{"shapes", rows}};
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("efficiency.gemm.source"));
}

TEST_CASE("GEMM grid of dgx-h100: published non-square shapes held out are reproduced", "[sim]") {
  // OpenXLA's sm_90 table (m, n, k each in 256 ... 4096, 125 shapes). Each interior level of
  // each axis in turn is held out (the model fitted on the other 100 shapes, over gaps twice as
  // wide as the shipped grid's) and its 25 shapes predicted; a non-square shape with a coordinate
  // at an interior level is held out in one to three of the 9 fits (one with every coordinate 256
  // or 4096 never is), and counts once per fit. docs/SIMULATION.md, "GEMMs by their whole shape", gives the
  // numbers: with min(m, n, k) >= 1024, 43 of 48 predictions within 5%, all within 7% (the same
  // table measured again by OpenXLA moves those shapes by up to 5.1%); below 1024 (fixed cost
  // and split-K), not asserted: 127 of 168 within 5%, up to 45% apart, where its remeasurements
  // move by up to 42%. tests/python/test_tools.py checks scripts/sim_platform.py's form the same way.
  std::ifstream in(std::string(CPBENCH_PLATFORM_DIR) + "/dgx-h100.json");
  const json plat = json::parse(in);
  const json rows = plat["efficiency"]["gemm"]["shapes"];
  REQUIRE(rows.size() == 125);
  const double levels[] = {512, 1024, 2048};
  int n_big = 0, within5 = 0;
  double worst_big = 0;
  for (int axis = 0; axis < 3; ++axis)
    for (double level : levels) {
      json j = plat, fit = json::array();
      for (const json& r : rows)
        if (r[axis].get<double>() != level) fit.push_back(r);
      j["efficiency"]["gemm"]["shapes"] = fit;
      const SimPlatform p = SimPlatform::from_json(j, "dgx-h100 without one level");
      for (const json& r : rows) {
        const double m = r[0], n = r[1], k = r[2], e = r[3];
        if (r[axis].get<double>() != level || (m == n && n == k)) continue;
        const double err = p.gemm_efficiency(m, n, k) / e - 1;
        if (std::min({m, n, k}) < 1024) continue;
        INFO(m << " x " << n << " x " << k << " held out on axis " << axis << ": " << err);
        CHECK(std::fabs(err) < 0.07);
        ++n_big;
        within5 += std::fabs(err) <= 0.05;
        worst_big = std::max(worst_big, std::fabs(err));
      }
    }
  CHECK(n_big == 48);
  CHECK(within5 == 43);
  CHECK(worst_big == Approx(0.0690).margin(5e-4));
  // The shipped grid reproduces its own nodes, and the shapes the issue named are no longer charged
  // at the 1024-cube's rate: 4096 x 4096 x 1024 at 681 TFLOP/s, 1024 x 2048 x 4096 at 659.
  const SimPlatform h = SimPlatform::load(std::string(CPBENCH_PLATFORM_DIR) + "/dgx-h100.json");
  CHECK(h.gemm_efficiency(4096, 4096, 1024) * 989.4 == Approx(681.09).epsilon(1e-3));
  CHECK(h.gemm_efficiency(1024, 2048, 4096) * 989.4 == Approx(658.74).epsilon(1e-3));
  CHECK(h.gemm_efficiency(1024, 1024, 1024) * 989.4 == Approx(246.72).epsilon(1e-3));
}

TEST_CASE("point-to-point curve: a ring hop pays the published sendrecv time by size", "[sim]") {
  json j = toy();
  j["network"] = json::parse(R"({"intra": {"bw_gbs": 100, "lat_us": 1,
      "p2p": {"size_time_us": [[1000000, 100], [4000000, 200]], "floor_us": 5, "source": "a toy curve"}}})");
  const SimPlatform p = SimPlatform::from_json(j, "toy");
  CHECK(p.p2p_seconds(1e6, true) == Approx(100e-6));
  CHECK(p.p2p_seconds(2e6, true) == Approx(100e-6 * std::sqrt(2.0)));  // log-log between rows
  CHECK(p.p2p_seconds(8e6, true) == Approx(400e-6));                   // the last row's bandwidth beyond
  CHECK(p.p2p_seconds(5e5, true) == Approx(50e-6));                    // the first row's bandwidth below
  CHECK(p.p2p_seconds(1000, true) == Approx(5e-6));                    // never under the floor
  CHECK(p.p2p_seconds(1e6, false) == 0);                               // no curve across nodes
  CHECK(p.transfer_seconds(1e6, true) == Approx(100e-6));              // a transfer's modelled duration: the curve,
  CHECK(p.transfer_seconds(1e6, false) == 0);                          // none for a tier not described,
  json j2 = toy();
  j2["network"] = json::parse(R"({"intra": {"bw_gbs": 100, "lat_us": 1}, "inter": {"bw_gbs": 10, "lat_us": 2, "fabric_lat_us": 1}})");
  const SimPlatform links = SimPlatform::from_json(j2, "links");
  CHECK(links.transfer_seconds(1e6, true) == Approx(1e-6 + 1e6 / 100e9));  // else the links' latency + bytes / rate
  CHECK(links.transfer_seconds(1e6, false) == Approx(3e-6 + 1e6 / 10e9));
  j["network"]["intra"]["p2p"]["floor_us"] = 500;
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("network.intra.p2p.floor_us"));
  j["network"]["intra"]["p2p"] = json::parse(R"({"size_time_us": [[1000, 100], [4000, 50]], "source": "s"})");
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("cannot take less time"));
  j["network"]["intra"]["p2p"] = json::parse(R"({"size_time_us": [[1000, 100]]})");
  CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains("network.intra.p2p.source"));

  // dgx-h100: a 32 MiB ring hop inside a node costs what the cited nccl-tests sendrecv log says
  // (421.30 us, 79.6 GB/s), not the link's 360 GB/s (93.7 us); 64, 128, 256 MiB likewise.
  const SimPlatform h = SimPlatform::load(std::string(CPBENCH_PLATFORM_DIR) + "/dgx-h100.json");
  const double MiB = 1048576.0;
  CHECK(h.p2p_seconds(32 * MiB, true) == Approx(32 * MiB / 79.64e9).epsilon(0.05));
  CHECK(h.p2p_seconds(64 * MiB, true) == Approx(64 * MiB / 82.03e9).epsilon(0.05));
  CHECK(h.p2p_seconds(128 * MiB, true) == Approx(128 * MiB / 162.87e9).epsilon(0.05));
  CHECK(h.p2p_seconds(256 * MiB, true) == Approx(256 * MiB / 299.30e9).epsilon(0.05));
  CHECK(h.p2p_seconds(1024, true) == Approx(3.7e-6));
}

TEST_CASE("NCCL curve: a ring step's published time by block size, and what it adds to the links", "[sim]") {
  json j = toy();
  // A ring of 4 GPUs: S = 4 KiB took 30 us (10 us per step of 1 KiB), 4 MiB 90 us (30 per 1 MiB
  // step), 64 MiB 960 us (320 per 16 MiB step). Links: 2 us, 100 GB/s.
  j["network"] = json::parse(R"({"intra": {"bw_gbs": 100, "lat_us": 2, "nccl": {"collective": "all_gather",
      "ranks": 4, "size_time_us": [[4096, 30], [4194304, 90], [67108864, 960]], "source": "toy curve"}}})");
  const SimPlatform p = SimPlatform::from_json(j, "toy");
  CHECK(p.nccl_step_seconds(1024) == Approx(10e-6));
  CHECK(p.nccl_step_seconds(16) == Approx(10e-6));                        // below the curve: its floor
  CHECK(p.nccl_step_seconds(1 << 20) == Approx(30e-6));
  CHECK(p.nccl_step_seconds(32768) == Approx(10e-6 * std::pow(3.0, 0.5)));  // halfway in log(bytes): geometric mean
  CHECK(p.nccl_step_seconds(double(1 << 25)) == Approx(640e-6));           // beyond: the last point's bandwidth
  // One ring step of 1 MiB: 30 us published, links 2 + 1048576 / 1e5 = 12.49 us.
  CHECK(p.nccl_extra_seconds(1 << 20, 1) == Approx(30e-6 - (2e-6 + 1048576 / 100e9)));
  // An all-to-all of 1 MiB to each of 3 peers: 3 x 30 us published, links 2 + 3 x 10.49 us.
  CHECK(p.nccl_extra_seconds(1 << 20, 3) == Approx(90e-6 - (2e-6 + 3 * 1048576 / 100e9)));
  // Never negative: a step the links alone make slower than published adds nothing.
  json slow = j;
  slow["network"]["intra"]["bw_gbs"] = 10;  // 1 MiB: 2 + 104.9 us on the links, 30 published
  CHECK(SimPlatform::from_json(slow, "slow").nccl_extra_seconds(1 << 20, 1) == 0.0);
  CHECK(p.context()["nccl_intra"]["source"] == "toy curve");
  CHECK(p.context()["nccl_intra"]["ranks"] == 4);
  // No curve: nothing added, context says null.
  const SimPlatform none = SimPlatform::from_json(toy(), "toy");
  CHECK(none.nccl_extra_seconds(1 << 20, 1) == 0.0);
  CHECK(none.context()["nccl_intra"].is_null());
  // Refusals name the field.
  auto refused = [&](const char* nccl, const char* what) {
    json b = j;
    b["network"]["intra"]["nccl"] = json::parse(nccl);
    CHECK_THROWS_WITH(SimPlatform::from_json(b, "bad.json"), Catch::Contains(what));
  };
  refused(R"({"collective": "all_gather", "ranks": 1, "size_time_us": [[1, 1]], "source": "s"})", "network.intra.nccl.ranks must be >= 2");
  refused(R"({"collective": "all_reduce", "ranks": 4, "size_time_us": [[1, 1]], "source": "s"})", "must be all_gather or reduce_scatter");
  refused(R"({"collective": "all_gather", "ranks": 4, "size_time_us": [[1, 1]]})", "network.intra.nccl.source");
  refused(R"({"collective": "all_gather", "ranks": 4, "size_time_us": [[8, 1], [4, 2]], "source": "s"})", "sizes must increase");
  refused(R"({"collective": "all_gather", "ranks": 4, "source": "s"})", "network.intra.nccl needs");
}

TEST_CASE("an NCCL operation's fixed cost: once per collective, by tier, none under a curve", "[sim]") {
  json j = toy();
  j["network"] = json::parse(R"({"intra": {"bw_gbs": 100, "lat_us": 2, "op_us": 8.8},
                                 "inter": {"bw_gbs": 10, "lat_us": 1, "op_us": 14.8}})");
  const SimPlatform p = SimPlatform::from_json(j, "toy");
  CHECK(p.op_fixed_seconds(true) == Approx(8.8e-6));
  CHECK(p.op_fixed_seconds(false) == Approx(14.8e-6));
  CHECK(p.context()["op_fixed_us"] == json::parse(R"({"intra": 8.8, "inter": 14.8})"));
  // Within a node under a published NCCL curve the curve is the whole operation's time.
  json c = j;
  c["network"]["intra"]["nccl"] = json::parse(R"({"collective": "all_gather", "ranks": 4,
      "size_time_us": [[4096, 30]], "source": "toy curve"})");
  const SimPlatform curved = SimPlatform::from_json(c, "toy");
  CHECK(curved.op_fixed_seconds(true) == 0.0);
  CHECK(curved.op_fixed_seconds(false) == Approx(14.8e-6));
  CHECK(curved.context()["op_fixed_us"]["intra"] == 0.0);
  // Absent: no fixed cost.
  const SimPlatform none = SimPlatform::from_json(toy(), "toy");
  CHECK(none.op_fixed_seconds(true) == 0.0);
  CHECK(none.op_fixed_seconds(false) == 0.0);
  // A negative or non-numeric cost is refused, naming the field and the value.
  json b = j;
  b["network"]["inter"]["op_us"] = -1;
  CHECK_THROWS_WITH(SimPlatform::from_json(b, "bad.json"), Catch::Contains("network.inter.op_us") && Catch::Contains("-1"));
  b = j;
  b["network"]["intra"]["op_us"] = "8";
  CHECK_THROWS_WITH(SimPlatform::from_json(b, "bad.json"), Catch::Contains("network.intra.op_us"));
}

TEST_CASE("broken platforms are refused with the field named", "[sim]") {
  auto refuse = [](json j, const std::string& msg) {
    CHECK_THROWS_WITH(SimPlatform::from_json(j, "bad.json"), Catch::Contains(msg) && Catch::Contains("bad.json"));
  };
  json j = toy();
  j.erase("memory_bw_gbs");
  refuse(j, "memory_bw_gbs");
  j = toy();
  j["efficiency"]["gemm"] = json::parse("[[256, 0.6], [16, 0.2]]");
  refuse(j, "increasing");
  j = toy();
  j["efficiency"]["attn_fwd"] = json::parse("[[64, 1.5]]");
  refuse(j, "not in (0, 1]");
  j = toy();
  j["efficiency"].erase("attn_bwd");
  refuse(j, "efficiency.attn_bwd");
  j = toy();
  j["peak_tflops"] = json::object();
  refuse(j, "peak_tflops");
  // The band: required, 0 < lo <= 1 <= hi, with a source.
  j = toy();
  j.erase("band");
  refuse(j, "needs 'band'");
  for (const char* b : {R"({"lo": 1.1, "hi": 1.2, "source": "s"})", R"({"lo": 0.9, "hi": 0.95, "source": "s"})",
                        R"({"lo": 0, "hi": 1.2, "source": "s"})", R"({"lo": -0.5, "hi": 1.2, "source": "s"})"}) {
    j = toy();
    j["band"] = json::parse(b);
    refuse(j, "0 < band.lo <= 1 <= band.hi");
  }
  j = toy();
  j["band"] = json::parse(R"({"lo": 0.9, "hi": "1.2", "source": "s"})");
  refuse(j, "band.lo and band.hi must be numbers");
  j = toy();
  j["band"] = json::parse(R"({"lo": 0.9, "hi": 1.2})");
  refuse(j, "band.source");
  // Overlap interference: optional; a number in [0, 10] with its source.
  j = toy();
  j["overlap_interference"] = json::parse(R"({"compute_slowdown": -0.1, "source": "s"})");
  refuse(j, "compute_slowdown must lie in [0, 10]");
  j["overlap_interference"] = json::parse(R"({"compute_slowdown": 0.2})");
  refuse(j, "overlap_interference.source");
  j["overlap_interference"] = json::parse(R"({"slowdown": 0.2, "source": "s"})");
  refuse(j, "overlap_interference needs");
  j["overlap_interference"] = json::parse(R"({"compute_slowdown": 0.2, "source": "s"})");
  const SimPlatform oi = SimPlatform::from_json(j, "ok.json");
  CHECK(oi.compute_slowdown == 0.2);
  CHECK(oi.context()["overlap_interference"]["source"] == "s");
  CHECK(SimPlatform::from_json(toy(), "toy.json").compute_slowdown == 0.0);
  CHECK_THROWS_WITH(SimPlatform::load("/nonexistent/platform.json"), Catch::Contains("cannot be read"));
}

TEST_CASE("every shipped platform loads and is internally consistent", "[sim]") {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(CPBENCH_PLATFORM_DIR)) {
    if (e.path().extension() != ".json") continue;
    INFO(e.path().string());
    const SimPlatform p = SimPlatform::load(e.path().string());
    CHECK(p.name == e.path().stem().string());
    {  // every number names its source: none of the file's numbers is left as an assumption
      std::ifstream in(e.path());
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK(text.find("ASSUMED") == std::string::npos);
    }
    CHECK(p.peak(DType::f32) > 0);
    CHECK(p.band_lo <= 1);
    CHECK(p.band_hi >= 1);
    CHECK(!p.band_source.empty());
    // Every table names its source (DESIGN: measured here, measured on a GPU, or published),
    // none of them an assumption. Published tables do not fall as blocks grow; measured ones
    // (local.json, from calibrate_platform.py) are what the machine gave.
    for (int c = 0; c < kNumSimClasses; ++c) {
      if (p.efficiency[c].empty()) continue;
      INFO(sim_class_name(SimClass(c)));
      CHECK(!p.efficiency_source[c].empty());
      CHECK(p.efficiency_source[c].find("ASSUMED") == std::string::npos);
      for (const auto& [d, pts] : p.efficiency[c])
        if (p.name != "local")
          for (size_t i = 1; i < pts.size(); ++i) CHECK(pts[i].second >= pts[i - 1].second);
    }
    ++n;
  }
  CHECK(n >= 4);  // dgx-h100, dgx-a100, a800, l20-pcie (+ local)
}

TEST_CASE("shipped bands: the factors docs/SIMULATION.md Validation gives", "[sim]") {
  // Recomputed from the residuals printed there (see each file's band.source), rounded outward.
  auto band = [](const char* n) {
    const SimPlatform p = SimPlatform::load(std::string(CPBENCH_PLATFORM_DIR) + "/" + n + ".json");
    return std::make_pair(p.band_lo, p.band_hi);
  };
  CHECK(band("local") == std::make_pair(0.929, 1.160));     // 155.6/167.4, 192.1/165.7
  CHECK(band("dgx-h100") == std::make_pair(0.955, 1.064));  // 51.52/53.9, 88.20/82.9
  CHECK(band("a800") == std::make_pair(0.940, 1.022));      // relative to usp[u4xr4]
  CHECK(band("dgx-a100") == band("local"));                 // not validated: the widest
  CHECK(band("l20-pcie") == band("local"));
}
