// Unit tests of the one table of options (bench/options.cpp), the --docs resolver
// (bench/workloads.cpp) and the second-wave settings in RunConfig: values, exact messages,
// 64-bit sizes, and that the command line and a preset reach the same RunConfig.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/options.h"
#include "bench/workloads.h"

using namespace cpbench;
using nlohmann::json;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

CommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "cpbench");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_command_line(int(argv.size()), argv.data(), false);
}
int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }
}  // namespace

TEST_CASE("options: placements parse from the command line's names") {
  // (The names themselves are checked against the report schema in test_metrics.)
  CHECK(parse_placement("ulysses-inner") == Placement::ulysses_inner);
  CHECK(parse_placement("ring-inner") == Placement::ring_inner);
  CHECK(std::string(placement_name(Placement::ring_inner)) == "ring-inner");
  CHECK_THROWS_WITH(parse_placement("inner"), Catch::Contains("inner"));
}

TEST_CASE("options: every preset key has one entry, and its flag is the key with dashes") {
  for (const auto& o : option_table()) {
    CHECK(find_option_by_key(o.key) == &o);
    std::string flag = "--" + o.key;
    for (auto& ch : flag)
      if (ch == '_') ch = '-';
    CHECK(o.flag == flag);
  }
  for (const char* key : {"mem_limit", "timeout", "window", "docs", "pass", "ranks_per_node", "inner_ring", "usp_ring",
                          "min_verified", "dry_run", "world_size"})
    CHECK(find_option_by_key(key) != nullptr);
}

TEST_CASE("options: sizes in bytes and binary units, 64-bit, with errors naming the value") {
  CHECK(parse_size("0", "x") == 0);
  CHECK(parse_size("1024", "x") == 1024);
  CHECK(parse_size("512MiB", "x") == int64_t(512) << 20);
  CHECK(parse_size("80GiB", "x") == int64_t(80) << 30);
  CHECK(parse_size("3TiB", "x") == int64_t(3) << 40);
  CHECK(parse_size("8388607TiB", "x") == int64_t(8388607) << 40);  // just under 2^63
  for (const char* bad : {"8388608TiB", "-1", "1.5GiB", "5XiB", "GiB", "", "1 GiB", "1gib", "1GB"})
    CHECK(contains(error_of([&] { parse_size(bad, "--mem-limit"); }), std::string("--mem-limit must be a size in bytes")));
  CHECK(contains(error_of([&] { parse_size("5XiB", "--mem-limit"); }), "got '5XiB'"));
}

TEST_CASE("options: the command line and a preset give the same RunConfig") {
  const CommandLine cl = parse({"run", "--model", "tiny", "--seq", "64,128", "--mem-limit", "80GiB", "--timeout", "0",
                                "--window", "16", "--docs", "equal:4", "--pass", "prefill", "--ranks-per-node", "2",
                                "--inner-ring", "2", "--usp-ring", "double", "--no-causal", "--dry-run", "--world-size", "8",
                                "--seed", "18446744073709551615"});
  REQUIRE(cl.exit_code == -1);
  CHECK(cl.command == "run");
  RunConfig a, b;
  apply_settings(a, cl.settings, "command line");
  apply_settings(b, json::parse(R"({"model": "tiny", "seq": [64, 128], "mem_limit": "80GiB", "timeout": 0, "window": 16,
      "docs": "equal:4", "pass": "prefill", "ranks_per_node": 2, "inner_ring": 2, "usp_ring": "double",
      "causal": false, "dry_run": true, "world_size": 8, "seed": 18446744073709551615})"), "preset");
  for (RunConfig* c : {&a, &b}) {
    CHECK(c->seqs == std::vector<int64_t>{64, 128});
    CHECK(c->mem_limit_bytes == int64_t(80) << 30);
    CHECK(c->timeout_s == 0);
    CHECK(c->window == 16);
    CHECK(c->docs_spec == "equal:4");
    CHECK(c->pass == "prefill");
    CHECK(c->ranks_per_node == 2);
    CHECK(c->inner_ring == 2);
    CHECK(c->usp_ring == "double");
    CHECK(!c->causal);
    CHECK(c->dry_run);
    CHECK(c->world_size == 8);
    CHECK(c->seed == 18446744073709551615ull);
  }
  CHECK(a.to_json(8) == b.to_json(8));
  finalize_config(a, 1);
  CHECK(planned_world_size(a, 1) == 8);
  const LayerShape s = a.shape(64);
  CHECK(s.mask.window == 16);
  CHECK(s.mask.doc_lens == std::vector<int64_t>{16, 16, 16, 16});
  CHECK(s.prefill());
  const json j = a.to_json(8);
  CHECK(j["mask"] == json::parse(R"({"causal": false, "window": 16, "docs": {"spec": "equal:4",
                                     "lens_by_seq": {"64": [16, 16, 16, 16], "128": [32, 32, 32, 32]}}})"));
  CHECK(j["pass"] == "prefill");
  CHECK(j["mem_limit_bytes"] == int64_t(80) << 30);
  CHECK(j["timeout_s"] == 0);
  CHECK(j["ranks_per_node"] == 2);
}

TEST_CASE("options: defaults of the second-wave settings") {
  RunConfig c;
  apply_settings(c, {{"model", "tiny"}, {"seq", 64}}, "t");
  finalize_config(c, 2);
  CHECK(c.timeout_s == 600);
  CHECK(c.mem_limit_bytes == 0);
  CHECK(c.pass == "train");
  const json j = c.to_json(2);
  CHECK(j["mask"] == json::parse(R"({"causal": true, "window": 0, "docs": null})"));
  CHECK(j["ranks_per_node"].is_null());
  CHECK(c.shape(64).mask.doc_lens.empty());
  CHECK(!c.shape(64).prefill());
}

TEST_CASE("options: bad values name the flag or key and the value") {
  CHECK(parse({"run", "--heads", "0"}).error == "--heads must be positive, got 0");
  CHECK(parse({"run", "--heads", "2147483648"}).error == "--heads must be an integer that fits 32 bits, got 2147483648");
  CHECK(parse({"run", "--batch", "9223372036854775808"}).error ==
        "--batch must be an integer (64-bit), got '9223372036854775808'");
  CHECK(parse({"run", "--pass", "decoding"}).error == "--pass must be train, prefill or decode, got \"decoding\"");
  CHECK(parse({"run", "--seq", "64,,128"}).error == "--seq has an empty item, got '64,,128'");
  CHECK(parse({"run", "--window", "4", "--window", "8"}).error == "--window given 2 times (give it once)");
  CHECK(parse({"run", "--causal", "--no-causal"}).error == "--causal/--no-causal given 2 times (give it once)");
  CHECK(parse({"run", "--model", "\xff"}).error == "--model must be valid UTF-8, got '\\xff'");
  CHECK(parse({"runn"}).error == "unknown command 'runn' (commands: run, verify, list)");
  CHECK(parse({"run", "--no-such-flag"}).exit_code == 2);
  CHECK(parse({"run", "--help"}).exit_code == 0);
  RunConfig c;
  CHECK(error_of([&] { apply_settings(c, {{"timeout", "10"}}, "p.json"); }) ==
        "p.json: 'timeout' must be an integer (64-bit), got \"10\"");
  CHECK(error_of([&] { apply_settings(c, {{"mem_limit", -1}}, "p.json"); }) ==
        "p.json: 'mem_limit' must be a size in bytes (an integer >= 0, or a string such as \"80GiB\"), got -1");
  CHECK(error_of([&] { apply_settings(c, {{"docs", json::array()}}, "p.json"); }).rfind("p.json: 'docs' must be", 0) == 0);
  CHECK(contains(error_of([&] { apply_settings(c, {{"windows", 4}}, "p.json"); }), "p.json: unknown key 'windows' (known: "));
}

TEST_CASE("config: second-wave constraints that do not depend on a strategy") {
  auto finalize_error = [](json settings, int P) {
    RunConfig c;
    c.command = settings.value("command", "run");
    settings.erase("command");
    apply_settings(c, {{"model", "tiny"}, {"seq", 64}}, "t");
    return error_of([&] {
      apply_settings(c, settings, "t");
      finalize_config(c, P);
    });
  };
  CHECK(finalize_error({{"window", -1}}, 2) == "t: 'window' must be >= 0, got -1");
  CHECK(finalize_error({{"window", 8}, {"causal", false}}, 2) == "");  // a window without causality is allowed
  CHECK(finalize_error({{"world_size", 8}}, 2) == "world_size=8 plans for ranks that do not exist: it needs --dry-run");
  CHECK(finalize_error({{"min_verified", 3}}, 2) == "min_verified=3 applies to cpbench verify only");
  CHECK(finalize_error({{"min_verified", 3}, {"command", "verify"}}, 2) == "");
  CHECK(finalize_error({{"ranks_per_node", 3}}, 4) == "ranks_per_node=3 must divide the world size 4");
  CHECK(finalize_error({{"ranks_per_node", 3}, {"dry_run", true}, {"world_size", 6}}, 1) == "");
  CHECK(finalize_error({{"docs", "1,2"}}, 2) == "docs '1,2': lengths sum to 3, not seq=64");
  CHECK(finalize_error({{"ulysses", 2}, {"strategies", "ring"}}, 2) ==
        "ulysses/ring/mesh set a mesh (ulysses=2 ring=0) but none of the strategies uses one (strategies: ring)");
  CHECK(finalize_error({{"batch", int64_t(1) << 40}, {"seq", int64_t(1) << 40}}, 2) ==
        "batch x seq overflows 64 bits: batch=1099511627776 seq=1099511627776");
}

TEST_CASE("docs: lists, equal, random and workloads resolve to lengths summing to N") {
  CHECK(resolve_doc_lens("10,20,34", 64, 1) == std::vector<int64_t>{10, 20, 34});
  CHECK(resolve_doc_lens("equal:8", 64, 1) == std::vector<int64_t>(8, 8));
  const auto r = resolve_doc_lens("random:5:9", 1000, 7);
  CHECK(sum(r) == 1000);
  for (size_t i = 0; i + 1 < r.size(); ++i) CHECK((r[i] >= 5 && r[i] <= 9));
  CHECK((r.back() >= 1 && r.back() <= 9));
  CHECK(resolve_doc_lens("random:5:9", 1000, 7) == r);   // seeded: the same on every rank
  CHECK(resolve_doc_lens("random:5:9", 1000, 8) != r);
  // Workloads: at least these four, each scaled to N exactly (64-bit N too).
  std::vector<std::string> names;
  for (const auto& w : workloads()) names.push_back(w.name);
  for (const char* want : {"bucket", "mixed", "outlier", "rl"})
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  for (const auto& w : workloads())
    for (int64_t N : {int64_t(4096), int64_t(100003), int64_t(1) << 40}) {
      if (w.sampled() && N > 100003) continue;  // a drawn pack has ~N/mean documents
      const auto lens = resolve_doc_lens(w.name, N, 1);
      CHECK(sum(lens) == N);
      if (!w.sampled()) CHECK(lens.size() == w.weights.size());
      for (auto l : lens) CHECK(l >= 1);
    }
  CHECK(resolve_doc_lens("bucket", 64, 1) == std::vector<int64_t>(8, 8));
  CHECK(resolve_doc_lens("outlier", 64, 1) == std::vector<int64_t>{48, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
}

TEST_CASE("docs: distribution workloads are seeded draws from their cited table, summing to N") {
  const Workload* sft = nullptr;
  for (const auto& w : workloads())
    if (w.name == "llama3-sft") sft = &w;
  REQUIRE(sft != nullptr);
  CHECK(sft->sampled());
  CHECK(sft->weights.empty());
  CHECK(contains(sft->source, "arXiv:2407.21783"));
  REQUIRE(sft->components.size() == 6);
  CHECK(sft->components[0].share == 52.66);
  CHECK(sft->components[5].mean_tokens == 38135.6);
  CHECK(doc_spec_is_sampled("llama3-sft"));
  CHECK(doc_spec_is_sampled("llama3-sft:5"));
  CHECK(doc_spec_is_sampled("random:1:9"));
  CHECK(!doc_spec_is_sampled("outlier"));
  CHECK(!doc_spec_is_sampled("equal:4"));
  CHECK(!doc_spec_is_sampled("10,20"));
  // Deterministic values: the splitmix64 stream is fixed, so a pack is the same on every rank,
  // every run and every platform (pinned here so a change to the sampler is seen).
  const auto a = resolve_doc_lens("llama3-sft", 4096, 1);
  CHECK(sum(a) == 4096);
  CHECK(a == resolve_doc_lens("llama3-sft", 4096, 1));
  CHECK(a == resolve_doc_lens("llama3-sft:1", 4096, 99));  // NAME:SEED overrides the run's seed
  CHECK(a != resolve_doc_lens("llama3-sft", 4096, 2));
  CHECK(a == std::vector<int64_t>{551, 439, 939, 64, 510, 497, 1096});
  // The mean length over many documents approaches the table's mixture mean
  // (sum share * mean / sum share = 847.1 tokens; the table's total row says 846.1): 1e6 tokens hold ~1180 documents.
  const auto big = resolve_doc_lens("llama3-sft:7", 1000000, 1);
  CHECK(sum(big) == 1000000);
  const double mean = 1e6 / double(big.size());
  CHECK(mean > 700);
  CHECK(mean < 1050);
  for (auto l : big) CHECK(l >= 1);
  // The pre-training pack (the Pile's Table 1): 22 components, mixture mean 1512 tokens with a
  // heavy tail (books: means of 95K-140K tokens), so 1e7 tokens (~6600 documents) land near it.
  const Workload* pile = nullptr;
  for (const auto& w : workloads())
    if (w.name == "pile-pretrain") pile = &w;
  REQUIRE(pile != nullptr);
  CHECK(pile->sampled());
  CHECK(contains(pile->source, "arXiv:2101.00027"));
  REQUIRE(pile->components.size() == 22);
  CHECK(pile->components[0].mean_tokens == 1108.5);  // Pile-CC: 4.33 KiB x 1024 / 4
  const auto pack = resolve_doc_lens("pile-pretrain:3", 10000000, 1);
  CHECK(sum(pack) == 10000000);
  const double pile_mean = 1e7 / double(pack.size());
  INFO("pile-pretrain mean " << pile_mean << " over " << pack.size() << " documents");
  CHECK(pile_mean > 1200);
  CHECK(pile_mean < 1900);
}

TEST_CASE("docs: bad specs are errors naming the spec and the values") {
  auto err = [](const std::string& spec, int64_t N) { return error_of([&] { resolve_doc_lens(spec, N, 1); }); };
  CHECK(err("1,2", 64) == "docs '1,2': lengths sum to 3, not seq=64");
  CHECK(err("0,64", 64) == "docs '0,64': document 0 has length 0 (lengths must be >= 1)");
  CHECK(err("60,60", 64) == "docs '60,60': lengths sum to more than seq=64");
  CHECK(err("equal:3", 64) == "docs 'equal:3': K=3 does not divide seq=64");
  CHECK(err("equal:0", 64) == "docs 'equal:0': K must be an integer >= 1");
  CHECK(err("random:9:5", 64) == "docs 'random:9:5': MIN=9 is greater than MAX=5");
  CHECK(err("random:0:5", 64) == "docs 'random:0:5': MIN must be >= 1, got 0");
  CHECK(err("random:100:200", 64) == "docs 'random:100:200': MIN=100 is greater than seq=64");
  CHECK(err("outlier:3", 64) ==
        "docs 'outlier:3': workload 'outlier' is a fixed pack (scaled to N), not a distribution: it takes no :SEED");
  CHECK(err("llama3-sft:x", 64) == "docs 'llama3-sft:x': expected NAME:SEED with an integer SEED >= 0");
  CHECK(err("llama3-sft", int64_t(1) << 40) ==
        "docs 'llama3-sft': more than 2^24 documents for seq=1099511627776; use a shorter seq");
  CHECK(err("outlier", 10) == "docs 'outlier': workload of 17 documents needs seq >= 17, got seq=10");
  CHECK(contains(err("nosuch", 64), "docs 'nosuch': not a list of lengths, equal:K, random:MIN:MAX or a workload "
                                    "(workloads: bucket, llama3-sft, mixed, outlier, pile-pretrain, rl"));
}

TEST_CASE("options: the report's config block has schema v1's keys plus the second and third waves', no others") {
  RunConfig c;
  apply_settings(c, {{"model", "tiny"}, {"seq", 64}, {"docs", "equal:2"}}, "t");
  finalize_config(c, 2);
  const json j = c.to_json(2);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"acc_dtype", "attention", "backend", "balance", "batch", "block", "cached", "causal", "comm", "comm_dtype", "command", "cp_cap", "decode_steps", "dim", "dtype",
                                         "ffn_dim", "fp8_scaling", "head_dim", "heads", "iters", "kv_heads", "layers", "mask", "mem_limit_bytes", "mesh",
                                         "mla", "model", "partial_dtype", "pass", "ranks_per_node", "recompute", "ring_pass", "rope", "seed", "seqs", "shard", "sinks", "strategies", "threads",
                                         "timeout_s", "uneven_heads", "warmup", "world_size"});
  CHECK(j["seqs"] == json::array({64}));
  CHECK(j["block"] == "attn");
  CHECK(j["ffn_dim"].is_null());  // no MLP under --block attn
  CHECK(j["layers"].is_null());     // no whole-model estimate under --block attn
  CHECK(j["recompute"].is_null());
  CHECK(j["shard"].is_null());  // what the whole-model estimate shards: none under --block attn
  CHECK(j["sinks"] == false);   // --sinks (schema 8)
  CHECK(j["uneven_heads"] == false);  // --uneven-heads (schema 9)
  CHECK(j["attention"] == "gqa");     // --attention, --mla-travel (schema 10)
  CHECK(j["mla"].is_null());
  CHECK(j["partial_dtype"] == "f32");  // --partial-dtype, --acc-dtype (schema 8): float32 by default
  CHECK(j["acc_dtype"] == "f32");
  CHECK(j["mask"]["docs"] == json::parse(R"({"spec": "equal:2", "lens": [32, 32], "lens_by_seq": {"64": [32, 32]}})"));
  CHECK(j["mesh"] == json::parse(R"({"tp": null, "mlp_tp": null, "ulysses": null, "ring": null, "placement": "ulysses-inner", "all": false,
                                      "usp_layout": "auto", "usp_ring": "single", "inner_ring": 0})"));
  RunConfig d;
  apply_settings(d, {{"model", "tiny"}, {"seq", 64}, {"usp_layout", "contiguous"}, {"usp_ring", "double"},
                     {"inner_ring", 2}}, "t");
  finalize_config(d, 4);
  const json dm = d.to_json(4)["mesh"];
  CHECK(dm["usp_layout"] == "contiguous");
  CHECK(dm["usp_ring"] == "double");
  CHECK(dm["inner_ring"] == 2);
}

TEST_CASE("options: --block full takes F from --ffn-dim or the model preset, and refuses a block without one") {
  RunConfig c;
  apply_settings(c, {{"model", "tiny"}, {"seq", 64}, {"block", "full"}}, "t");
  finalize_config(c, 2);
  CHECK(c.ffn_dim == 96);  // configs/models/tiny.json
  CHECK(c.to_json(2)["ffn_dim"] == 96);
  CHECK(c.shape(64).full_block);
  CHECK(c.shape(64).F == 96);
  RunConfig given;
  apply_settings(given, {{"model", "tiny"}, {"seq", 64}, {"block", "full"}, {"ffn_dim", 40}}, "t");
  finalize_config(given, 2);
  CHECK(given.shape(64).F == 40);
  RunConfig attn;  // --ffn-dim under --block attn builds no MLP
  apply_settings(attn, {{"model", "tiny"}, {"seq", 64}, {"ffn_dim", 40}}, "t");
  finalize_config(attn, 2);
  CHECK_FALSE(attn.shape(64).full_block);
  CHECK(attn.shape(64).F == 0);
  RunConfig other_dim;  // the preset's F belongs to the preset's D
  apply_settings(other_dim, {{"model", "tiny"}, {"seq", 64}, {"dim", 80}, {"block", "full"}}, "t");
  CHECK_THROWS_WITH(finalize_config(other_dim, 2), Catch::Contains("block=full needs the MLP width: --ffn-dim F"));
  RunConfig zero;
  CHECK_THROWS_WITH(apply_settings(zero, {{"ffn_dim", 0}}, "t"), Catch::Contains("must be positive"));
  RunConfig bad;
  CHECK_THROWS_WITH(apply_settings(bad, {{"block", "mlp"}}, "t"), Catch::Contains("mlp"));
  for (const char* m : {"llama2-7b", "llama3-8b", "llama3-70b", "llama3-405b"}) {
    const ModelPreset* p = find_model(m);
    REQUIRE(p);
    CHECK(p->ffn_dim > 0);
    CHECK(p->layers > 0);
    CHECK(p->vocab > 0);
  }
  CHECK(find_model("llama2-7b")->ffn_dim == 11008);
  CHECK(find_model("llama3-405b")->layers == 126);
}

TEST_CASE("options: --layers and --recompute of the whole-model estimate: preset defaults, errors naming flag and value") {
  RunConfig c;
  apply_settings(c, {{"model", "tiny"}, {"seq", 64}, {"block", "full"}}, "t");
  finalize_config(c, 2);
  CHECK(c.layers == 2);   // configs/models/tiny.json
  CHECK(c.vocab == 256);
  CHECK(c.recompute == "none");
  CHECK(c.to_json(2)["layers"] == 2);
  CHECK(c.to_json(2)["recompute"] == "none");
  RunConfig given;
  apply_settings(given, {{"model", "llama3-8b"}, {"seq", 64}, {"block", "full"}, {"layers", 7}, {"recompute", "full"}},
                 "t");
  finalize_config(given, 2);
  CHECK(given.layers == 7);
  CHECK(given.vocab == 128256);
  CHECK(given.to_json(2)["recompute"] == "full");
  RunConfig zero;
  CHECK_THROWS_WITH(apply_settings(zero, {{"layers", 0}}, "t"), Catch::Contains("'layers' must be positive, got 0"));
  RunConfig bad;
  CHECK_THROWS_WITH(apply_settings(bad, {{"recompute", "some"}}, "t"),
                    Catch::Contains("'recompute' must be none, selective or full, got \"some\""));
  // selective under --block attn: reported (it is executed there too); refused without a backward
  RunConfig attn;
  apply_settings(attn, {{"model", "tiny"}, {"seq", 64}, {"recompute", "selective"}}, "t");
  finalize_config(attn, 2);
  CHECK(attn.to_json(2)["recompute"] == "selective");
  CHECK(attn.shape(64).recompute == Recompute::selective);
  RunConfig prefill;
  apply_settings(prefill, {{"model", "tiny"}, {"seq", 64}, {"recompute", "full"}, {"pass", "prefill"}}, "t");
  CHECK_THROWS_WITH(finalize_config(prefill, 2),
                    Catch::Contains("--recompute full repeats a forward inside the backward: it needs --pass train (got pass=prefill)"));
}

TEST_CASE("options: --shard of the whole-model estimate: optimizer by default, every choice, errors naming the values") {
  RunConfig c;
  apply_settings(c, {{"model", "tiny"}, {"seq", 64}, {"block", "full"}}, "t");
  finalize_config(c, 2);
  CHECK(c.shard == "optimizer");  // Megatron's distributed optimizer, DeepSpeed ZeRO-1, torchtitan: the common default
  CHECK(c.to_json(2)["shard"] == "optimizer");
  for (const char* s : {"none", "optimizer", "grads", "params"}) {
    RunConfig given;
    apply_settings(given, {{"model", "tiny"}, {"seq", 64}, {"block", "full"}, {"shard", s}}, "t");
    finalize_config(given, 2);
    CHECK(given.to_json(2)["shard"] == s);
  }
  RunConfig bad;
  CHECK_THROWS_WITH(apply_settings(bad, {{"shard", "zero3"}}, "t"),
                    Catch::Contains("'shard' must be none, optimizer, grads or params, got \"zero3\""));
  RunConfig unchecked;  // a RunConfig set by code, not by the table: finalize_config refuses it too
  apply_settings(unchecked, {{"model", "tiny"}, {"seq", 64}, {"block", "full"}}, "t");
  unchecked.shard = "fsdp";
  CHECK_THROWS_WITH(finalize_config(unchecked, 2), Catch::Contains("shard must be none, optimizer, grads or params, got 'fsdp'"));
}

TEST_CASE("options: --attention mla takes its dims from the preset; the config and the report say so") {
  RunConfig c;
  apply_settings(c, {{"model", "tiny-mla"}, {"seq", 64}}, "t");
  finalize_config(c, 2);
  CHECK(c.attention == "mla");  // the preset's default
  CHECK(c.mla_travel == "expanded");
  CHECK(c.kv_heads == c.heads);  // expanded: a key head per query head
  CHECK(c.head_dim == 8 + 4);    // d_nope + d_rope
  const LayerShape s = c.shape(64);
  CHECK(s.mla);
  CHECK(s.G == s.H);
  CHECK(s.d == 12);
  CHECK(s.vdim() == 8);
  const nlohmann::json j = c.to_json(2);
  CHECK(j["attention"] == "mla");
  CHECK(j["mla"] == nlohmann::json::parse(R"({"q_rank": 24, "kv_rank": 16, "d_nope": 8, "d_rope": 4, "d_v": 8, "travel": "expanded"})"));
  RunConfig lite;  // no query rank
  apply_settings(lite, {{"model", "deepseek-v2-lite"}, {"seq", 64}, {"heads", 4}}, "t");
  finalize_config(lite, 2);
  CHECK(lite.mla_dims.q_rank == 0);
  CHECK(lite.kv_heads == 4);  // --heads, not the preset's 16
  // A 16-bit MLA run on CUDA: its tensor-core kernels take d_v = d only (the fp32 kernels run it).
  RunConfig cuda;
  apply_settings(cuda, {{"model", "tiny-mla"}, {"seq", 64}, {"backend", "cuda"}, {"dtype", "bf16"}}, "t");
  CHECK_THROWS_WITH(finalize_config(cuda, 2), Catch::Contains("--attention mla on --backend cuda needs --dtype fp32") &&
                                                  Catch::Contains("d=12, d_v=8"));
  // ... but its decode runs the decode kernel, which takes two head dims in any dtype.
  RunConfig cuda_decode;
  apply_settings(cuda_decode, {{"model", "tiny-mla"}, {"pass", "decode"}, {"cached", 64}, {"backend", "cuda"}, {"dtype", "bf16"}}, "t");
  try {  // (a build without CUDA may refuse the backend itself: not this check)
    finalize_config(cuda_decode, 2);
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), !Catch::Contains("--attention mla on --backend cuda"));
  }
  // MLA's decode caches latents: --mla-travel (what training levels move) is refused with it, and
  // a prefill after a cache is not built.
  RunConfig travel;
  apply_settings(travel, {{"model", "tiny-mla"}, {"pass", "decode"}, {"cached", 64}, {"mla_travel", "expanded"}}, "t");
  CHECK_THROWS_WITH(finalize_config(travel, 2), Catch::Contains("--pass decode moves no keys"));
  const LayerShape ds = cuda_decode.shape(64);
  CHECK(ds.latent_cache());
  CHECK(ds.latent_width() == 16 + 4);
  // --partial-dtype bf16 under pass-Q needs an even o: MLA's d_v, not head_dim, is what it checks.
  RunConfig part;
  apply_settings(part, {{"model", "tiny-mla"}, {"seq", 64}, {"dtype", "bf16"}, {"pass", "prefill"}, {"ring_pass", "q"},
                        {"partial_dtype", "bf16"}}, "t");
  CHECK_NOTHROW(finalize_config(part, 2));
}

TEST_CASE("options: command_line_json lists each flag of the parser once, with the table's kind and a default it accepts") {
  const json cl = command_line_json();
  std::map<std::string, json> by_flag;
  for (const auto& e : cl["options"]) {
    CHECK(by_flag.count(e["flag"]) == 0);  // --no-X is folded into X, not a second entry
    by_flag[e["flag"]] = e;
  }
  for (const auto& o : option_table()) {
    INFO(o.flag);
    REQUIRE(by_flag.count(o.flag) == 1);
    const json& e = by_flag[o.flag];
    CHECK(e["key"] == o.key);
    CHECK(e["kind"] == kind_name(o.kind));
    CHECK(e["commands"] == json::array({"run", "verify"}));
    CHECK(e.contains("negated") == o.negatable);
    if (o.kind == OptKind::choice) CHECK(e["choices"] == json(o.choices));
    // A stated default is one the flag itself would accept, in canonical form.
    if (e.contains("default")) CHECK(check_option_value(o, e["default"], o.key) == e["default"]);
  }
  // The parser's own flags, which the table does not hold.
  CHECK(by_flag["--config"]["commands"] == json::array({"run", "verify"}));
  CHECK(by_flag["--help"]["commands"] == json::array({"run", "verify", "list"}));
  CHECK(by_flag["--json"]["commands"] == json::array({"list"}));
  CHECK(by_flag.size() == option_table().size() + 3);
  // Defaults: the default preset's, the built-in RunConfig's, none where the built-in value means
  // "derived" (heads: the model preset's; strategies: every applicable one).
  CHECK(by_flag["--seq"]["default"] == json::array({2048}));
  CHECK(by_flag["--timeout"]["default"] == 600);
  CHECK(by_flag["--block"]["default"] == "attn");
  CHECK_FALSE(by_flag["--heads"].contains("default"));
  CHECK_FALSE(by_flag["--strategies"].contains("default"));
  CHECK(cl["commands"].size() == 3);
}

TEST_CASE("options: list --json is parsed as list's flag, and refused elsewhere") {
  CHECK(parse({"list", "--json"}).list_json);
  CHECK_FALSE(parse({"list"}).list_json);
  const CommandLine bad = parse({"run", "--json"});
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.error, "--json"));
}
