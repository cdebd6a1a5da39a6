// The resolved run configuration: defaults < run preset (--config FILE) < command-line flags.
// Model presets (configs/models/*.json) are embedded in the binary at build time; sizes set
// explicitly (in the run preset or by flags) override the model preset's.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/strategy.h"

namespace cpbench {

struct ModelPreset {
  std::string name, description;
  int dim = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t ffn_dim = 0, layers = 0, vocab = 0;  // the MLP's F, the model's layers and vocabulary
  // An MLA model (DeepSeek-V2/V3): "attention": "mla" and its ranks and head dims (kv_heads and
  // head_dim then stand for the expanded heads: H and d_nope + d_rope).
  bool mla = false;
  MlaDims mla_dims;
  // Its feed-forward layers are mixtures of experts, which the block does not model: --block full
  // is refused rather than measured as a dense MLP of some width.
  bool moe = false;
};
const std::vector<ModelPreset>& model_presets();  // embedded from configs/models/
const ModelPreset* find_model(const std::string& name);
// The embedded default run preset (configs/runs/default.json).
nlohmann::json default_run_preset();

struct RunConfig {
  std::string command = "run";  // run | verify
  std::string model = "small";
  int64_t batch = 1;
  std::vector<int64_t> seqs;
  bool seqs_given = false;  // set by --seq (or a config file), not by the default preset
  int heads = 0, kv_heads = 0, head_dim = 0, dim = 0;
  std::string block = "attn";  // attn | full (the attention sub-layer, or with the SwiGLU MLP)
  int64_t ffn_dim = 0;          // F; 0: the model preset's (needed by --block full)
  // The whole-model memory estimate (--block full): L layers (0: the model preset's), the
  // preset's vocabulary V.
  int64_t layers = 0, vocab = 0;
  // --recompute (DESIGN "Recompute"): what the backward runs again before it needs it, in
  // Megatron's meaning: none | selective (the attention core, its ring/all-to-all traffic
  // repeated) | full (the whole block's forward). Executed, its bytes Phase::recompute, and the
  // estimate's activations keep what it does not recompute.
  std::string recompute = "none";
  // What the estimate shards over the ranks that hold the same weights (ZeRO-1/2/3): none |
  // optimizer (the states; Megatron's distributed optimizer, the common default) | grads | params.
  std::string shard = "optimizer";
  bool causal = true, rope = true;
  bool sinks = false;  // --sinks: a learned logit per query head in the softmax (GPT-OSS; bench/parts/attn_sinks.h)
  bool uneven_heads = false;  // --uneven-heads: a Ulysses level splits heads it does not divide
  // --attention gqa|mla ("" until resolved: the model preset's). MLA's dims come from the preset
  // (deepseek-v3, deepseek-v2-lite, tiny-mla); --mla-travel: what its ring or Ulysses level moves
  // (expanded: per-head K, V; latent: the compressed c_kv and k_R, each receiver up-projecting).
  std::string attention;
  std::string mla_travel;  // "" = expanded under MLA; refused without MLA
  MlaDims mla_dims;
  std::vector<std::string> strategies;  // empty: every registered strategy
  bool strategies_explicit = false;     // named by the user (errors instead of skips)
  int ulysses = 0, ring = 0;            // 0: unset
  int tp = 0;                           // usp's tensor-parallel degree t; 0: unset (t = 1, never inferred)
  int mlp_tp = 0;                       // --mlp-tp N: the MLP sub-layer's own TP degree; 0: the attention's
  Placement placement = Placement::ulysses_inner;
  RingLayout ring_layout = RingLayout::auto_;
  bool mesh_all = false;
  int warmup = 1, iters = 5;
  uint64_t seed = 1234;
  int threads = 0;  // 0: cores of the node / ranks on the node
  std::string backend = "cpu", comm = "mpi", dtype = "fp32";
  // --partial-dtype / --acc-dtype (issue 42, DESIGN "What travels, and in what precision"): the
  // K,V ring's running output and its dK,dV accumulators, f32 (default) or bf16, in a 16-bit run.
  std::string partial_dtype = "f32", acc_dtype = "f32";
  // --dtype fp8 (issue 42): attention's forward in fp8 e4m3 on bf16 storage; --fp8-scaling its scales.
  std::string fp8_scaling;  // "" (not given): block
  std::string fp8_scaling_name() const { return fp8_scaling.empty() ? "block" : fp8_scaling; }
  // --comm-dtype run | bf16 | fp8: what the K,V ring blocks travel as (LayerShape::kv_transit).
  std::string comm_dtype = "run";
  bool fp8() const { return dtype == "fp8"; }
  DType storage_dtype() const;  // the tensors' dtype: bf16 under fp8, else --dtype
  std::string out, trace, dump;
  double peak_tflops = 0;  // 0: device table or calibrated
  bool progress = true;
  // Second wave (DESIGN "Additions for the second wave").
  int64_t mem_limit_bytes = 0;  // per-rank cap on the tracked allocator; 0 = none
  int64_t timeout_s = 600;      // watchdog bound on one blocked call or job; 0 = none
  int64_t window = 0;           // sliding window W; 0 = none
  std::string docs_spec;        // --docs SPEC (bench/workloads.h); empty = one document
  bool docs_resample = false;   // --docs-resample: timed iteration i draws its pack with seed + i
  std::string pass = "train";   // train | prefill | decode
  int64_t decode_steps = 0;     // --decode-steps S: decode steps per iteration (--pass decode; 0: 8)
  std::string balance = "none";  // --balance none | doc-zigzag | greedy (the ring's token layout)
  int64_t cp_cap = -1;  // --cp-cap (--balance dynamic): tokens per rank; -1 = not given (N/P)
  int64_t cached = 0;            // --cached C: tokens already in the sharded KV cache (prefill)
  std::string ring_pass = "kv";  // --ring-pass kv | q | q-a2a (query blocks circulate; needs prefill)
  int ranks_per_node = 0;       // 0: ranks sharing a host form a node
  int inner_ring = 0;           // double ring's inner ring size w; 0 = ranks per node
  std::string usp_ring = "single";  // usp's ring level: single | double
  int min_verified = 0;         // verify: fail when fewer strategies were verified
  int numerics = 0;             // verify --numerics S: error against float64 over S seeds (0 = off)
  bool dry_run = false;         // plan and model only, allocate nothing
  int world_size = 0;           // dry run: plan for this many ranks; 0 = the world's size

  // The layer's shape at N; under --docs, `pack` selects the pack drawn with seed + pack
  // (--docs-resample; 0 otherwise).
  LayerShape shape(int64_t N, int pack = 0) const;
  int64_t full_block_ffn_dim() const;  // F under --block full, else 0
  nlohmann::json to_json(int world_size) const;
};

// Settings as JSON (the keys of bench/options.h's table: flag names without dashes, '-' as '_').
// Throws std::invalid_argument naming the key and the value for unknown keys or wrong types.
void apply_settings(RunConfig& cfg, const nlohmann::json& settings, const std::string& origin);
// Reads a run preset file (a JSON object, at most 16 MiB, no key given twice in one object).
// Throws std::invalid_argument naming the file and what is wrong.
nlohmann::json read_run_preset(const std::string& path);
// Fills dims from the model preset where not set, then validates everything that does not
// depend on a strategy (positive sizes, kv_heads divides heads, head_dim limits, dtype/backend).
// Throws std::invalid_argument with the constraint and the values.
void finalize_config(RunConfig& cfg, int world_size);
// The strategy an entry of --strategies names: "usp" of "usp[t2xu2xr2]" (a named mesh), or the
// entry itself.
std::string strategy_entry_name(const std::string& entry);
// The number of ranks the jobs are planned for: --world-size in a dry run, else the world's.
int planned_world_size(const RunConfig& cfg, int world_size);

}  // namespace cpbench
