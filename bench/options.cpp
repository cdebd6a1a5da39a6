#include "bench/options.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace cpbench {

using nlohmann::json;

namespace {

// JSON as a message shows it, cut to a readable length.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

[[noreturn]] void bad_value(const std::string& where, const std::string& what, const std::string& got) {
  throw std::invalid_argument(where + " " + what + ", got " + got);
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (extra < 0 || c == 0xC0 || c == 0xC1 || c > 0xF4 || i + size_t(extra) >= s.size()) return false;
    for (int k = 1; k <= extra; ++k)
      if ((static_cast<unsigned char>(s[i + size_t(k)]) & 0xC0) != 0x80) return false;
    i += size_t(extra) + 1;
  }
  return true;
}

// Strict decimal integer: optional '-', digits, nothing else; 64-bit range.
bool parse_int64(const std::string& t, int64_t& out) {
  if (t.empty() || t.size() > 20) return false;
  size_t i = t[0] == '-' ? 1 : 0;
  if (i == t.size()) return false;
  for (size_t k = i; k < t.size(); ++k)
    if (t[k] < '0' || t[k] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return false;
  out = v;
  return true;
}

bool parse_uint64(const std::string& t, uint64_t& out) {
  if (t.empty() || t.size() > 20) return false;
  for (char ch : t)
    if (ch < '0' || ch > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return false;
  out = v;
  return true;
}

std::vector<std::string> split_items(const std::string& s, const std::string& where) {
  std::vector<std::string> out;
  if (s.empty()) bad_value(where, "must not be empty", "''");
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) bad_value(where, "has an empty item", "'" + printable(s) + "'");
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int64_t checked_integer(const json& v, const std::string& where, int64_t lo, int64_t hi, const char* what) {
  const std::string range = std::string("must be ") + what;
  if (!v.is_number_integer()) bad_value(where, range, shown(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) bad_value(where, range, shown(v));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad_value(where, range, shown(v));
  return x;
}

// --- the table ---------------------------------------------------------------------------------
int as_int(const json& v) { return v.get<int>(); }

std::vector<OptionSpec> make_table() {
  std::vector<OptionSpec> t = {
      {"model", "--model", OptKind::text, "model preset (cpbench list)", {}, false,
       [](RunConfig& c, const json& v) { c.model = v.get<std::string>(); }},
      {"strategies", "--strategies", OptKind::names, "comma-separated; default: every applicable one", {}, false,
       [](RunConfig& c, const json& v) {
         c.strategies = v.get<std::vector<std::string>>();
         c.strategies_explicit = true;
       }},
      {"seq", "--seq", OptKind::ints, "global sequence length(s), comma-separated", {}, false,
       [](RunConfig& c, const json& v) {
         c.seqs = v.get<std::vector<int64_t>>();
         c.seqs_given = true;
       }},
      {"batch", "--batch", OptKind::integer, "batch size B", {}, false,
       [](RunConfig& c, const json& v) { c.batch = v.get<int64_t>(); }},
      {"heads", "--heads", OptKind::count, "query heads H", {}, false,
       [](RunConfig& c, const json& v) { c.heads = as_int(v); }},
      {"kv_heads", "--kv-heads", OptKind::count, "key/value heads G", {}, false,
       [](RunConfig& c, const json& v) { c.kv_heads = as_int(v); }},
      {"head_dim", "--head-dim", OptKind::count, "head dimension d", {}, false,
       [](RunConfig& c, const json& v) { c.head_dim = as_int(v); }},
      {"dim", "--dim", OptKind::count, "model dimension D", {}, false,
       [](RunConfig& c, const json& v) { c.dim = as_int(v); }},
      {"block", "--block", OptKind::choice, "attn (the attention sub-layer, default) | full (with the SwiGLU MLP)",
       {"attn", "full"}, false, [](RunConfig& c, const json& v) { c.block = v.get<std::string>(); }},
      {"ffn_dim", "--ffn-dim", OptKind::count, "MLP width F for --block full (default: the model preset's)", {}, false,
       [](RunConfig& c, const json& v) { c.ffn_dim = v.get<int64_t>(); }},
      {"layers", "--layers", OptKind::count,
       "layers L of the whole-model memory estimate under --block full (default: the model preset's)", {}, false,
       [](RunConfig& c, const json& v) { c.layers = v.get<int64_t>(); }},
      {"recompute", "--recompute", OptKind::choice,
       "what the backward runs again, executed and its bytes counted: none (default) | selective (the attention "
       "core, its ring/all-to-all repeated) | full (the whole block's forward); the memory estimate keeps the rest",
       {"none", "selective", "full"}, false, [](RunConfig& c, const json& v) { c.recompute = v.get<std::string>(); }},
      {"shard", "--shard", OptKind::choice,
       "what the memory estimate shards over the ranks holding the same weights: none | optimizer (states, "
       "default) | grads (and gradients) | params (and parameters, FSDP); also the step's gradient sync",
       {"none", "optimizer", "grads", "params"}, false,
       [](RunConfig& c, const json& v) { c.shard = v.get<std::string>(); }},
      {"causal", "--causal", OptKind::boolean, "causal mask (default) or none (--no-causal)", {}, true,
       [](RunConfig& c, const json& v) { c.causal = v.get<bool>(); }},
      {"rope", "--rope", OptKind::boolean, "rotary embedding (default) or none (--no-rope)", {}, true,
       [](RunConfig& c, const json& v) { c.rope = v.get<bool>(); }},
      {"sinks", "--sinks", OptKind::boolean,
       "attention sinks (GPT-OSS): a learned logit per query head in the softmax's denominator, no value", {}, false,
       [](RunConfig& c, const json& v) { c.sinks = v.get<bool>(); }},
      {"uneven_heads", "--uneven-heads", OptKind::boolean,
       "a Ulysses level (ulysses, usp) splits heads its degree does not divide: member u takes query heads "
       "[u*H/U, (u+1)*H/U) (floors) and the KV heads they use; a tp level still needs divisibility", {}, false,
       [](RunConfig& c, const json& v) { c.uneven_heads = v.get<bool>(); }},
      {"attention", "--attention", OptKind::choice,
       "gqa | mla (multi-head latent attention, DeepSeek-V2/V3: ranks and head dims from an MLA model preset); "
       "default: the model preset's",
       {"gqa", "mla"}, false, [](RunConfig& c, const json& v) { c.attention = v.get<std::string>(); }},
      {"mla_travel", "--mla-travel", OptKind::choice,
       "--attention mla: what a ring or Ulysses level moves: expanded (per-head K, V; default) | latent (the "
       "compressed c_kv and rope key, up-projected by each receiver; the ring family, ulysses, usp)",
       {"expanded", "latent"}, false, [](RunConfig& c, const json& v) { c.mla_travel = v.get<std::string>(); }},
      {"window", "--window", OptKind::integer, "sliding window W (>= 0; 0 = none)", {}, false,
       [](RunConfig& c, const json& v) { c.window = v.get<int64_t>(); }},
      {"docs", "--docs", OptKind::docs,
       "packed documents: L1,L2,... summing to N | equal:K | random:MIN:MAX | a workload name (configs/workloads/)",
       {}, false, [](RunConfig& c, const json& v) { c.docs_spec = v.get<std::string>(); }},
      {"docs_resample", "--docs-resample", OptKind::boolean,
       "draw another pack per timed iteration (iteration i: --seed + i) from a sampled --docs (random:MIN:MAX or a "
       "distribution workload); setup again outside the timed region",
       {}, false, [](RunConfig& c, const json& v) { c.docs_resample = v.get<bool>(); }},
      {"pass", "--pass", OptKind::choice,
       "train (forward+backward, default) | prefill (forward only) | decode (one token per sequence per "
       "step against the --cached KV cache)",
       {"train", "prefill", "decode"}, false, [](RunConfig& c, const json& v) { c.pass = v.get<std::string>(); }},
      {"decode_steps", "--decode-steps", OptKind::integer,
       "decode steps S per timed iteration (--pass decode; default 8; tpot_ms = step / S)", {}, false,
       [](RunConfig& c, const json& v) { c.decode_steps = v.get<int64_t>(); }},
      {"balance", "--balance", OptKind::choice,
       "none (the strategy's static layout, default) | doc-zigzag (2R chunks per document over R ring "
       "positions) | greedy (chunks to the least-loaded position); ring, double-ring, usp's ring level, with --docs | "
       "dynamic (a CP group of c ranks per document, sized by --cp-cap; ring only)",
       {"none", "doc-zigzag", "greedy", "dynamic"}, false, [](RunConfig& c, const json& v) { c.balance = v.get<std::string>(); }},
      {"cp_cap", "--cp-cap", OptKind::integer,
       "--balance dynamic: tokens per rank a document fills before its CP group doubles (c = min(P, next power "
       "of two of ceil(L / cap)); default N/P; 1 .. seq)",
       {}, false, [](RunConfig& c, const json& v) { c.cp_cap = v.get<int64_t>(); }},
      {"ring_pass", "--ring-pass", OptKind::choice, ring_travel_help(), ring_travel_flags(), false, [](RunConfig& c, const json& v) { c.ring_pass = v.get<std::string>(); }},
      {"cached", "--cached", OptKind::integer,
       "C tokens already in a KV cache sharded over the CP ranks (persistent-KV prefill with --pass prefill, "
       "or the cache --pass decode reads; ring family; 0 = none)",
       {}, false, [](RunConfig& c, const json& v) { c.cached = v.get<int64_t>(); }},
      {"ulysses", "--ulysses", OptKind::count, "USP Ulysses degree U", {}, false,
       [](RunConfig& c, const json& v) { c.ulysses = as_int(v); }},
      {"ring", "--ring", OptKind::count, "USP ring degree R", {}, false,
       [](RunConfig& c, const json& v) { c.ring = as_int(v); }},
      {"tp", "--tp", OptKind::count, "usp's tensor-parallel degree t, innermost (default 1)", {}, false,
       [](RunConfig& c, const json& v) { c.tp = as_int(v); }},
      {"mlp_tp", "--mlp-tp", OptKind::count,
       "the MLP sub-layer's own tensor-parallel degree N over contiguous ranks (--block full; default: the "
       "attention's tp); N = P with --pass decode is Helix",
       {}, false, [](RunConfig& c, const json& v) { c.mlp_tp = as_int(v); }},
      {"mesh", "--mesh", OptKind::choice, "'all': every factorization t x U x R of P (usp)", {"all"}, false,
       [](RunConfig& c, const json&) { c.mesh_all = true; }},
      {"placement", "--placement", OptKind::choice, "ulysses-inner (default) | ring-inner",
       {"ulysses-inner", "ring-inner"}, false,
       [](RunConfig& c, const json& v) { c.placement = parse_placement(v.get<std::string>()); }},
      {"usp_layout", "--usp-layout", OptKind::choice,
       "usp ring layout: auto (zigzag iff causal) | zigzag | contiguous", {"auto", "zigzag", "contiguous"}, false,
       [](RunConfig& c, const json& v) {
         const std::string m = v.get<std::string>();
         c.ring_layout = m == "zigzag" ? RingLayout::zigzag : m == "contiguous" ? RingLayout::contiguous
                                                                                : RingLayout::auto_;
       }},
      {"usp_ring", "--usp-ring", OptKind::choice, "usp's ring level: single (default) | double",
       {"single", "double"}, false, [](RunConfig& c, const json& v) { c.usp_ring = v.get<std::string>(); }},
      {"inner_ring", "--inner-ring", OptKind::count, "double ring: inner ring size w (0 = ranks per node)", {},
       false, [](RunConfig& c, const json& v) { c.inner_ring = as_int(v); }},
      {"ranks_per_node", "--ranks-per-node", OptKind::count,
       "ranks aK..aK+K-1 form node a (0 = ranks sharing a host)", {}, false,
       [](RunConfig& c, const json& v) { c.ranks_per_node = as_int(v); }},
      {"warmup", "--warmup", OptKind::count, "warm-up iterations (discarded)", {}, false,
       [](RunConfig& c, const json& v) { c.warmup = as_int(v); }},
      {"iters", "--iters", OptKind::count, "timed iterations", {}, false,
       [](RunConfig& c, const json& v) { c.iters = as_int(v); }},
      {"seed", "--seed", OptKind::seed, "input seed", {}, false,
       [](RunConfig& c, const json& v) { c.seed = v.get<uint64_t>(); }},
      {"threads", "--threads", OptKind::count,
       "compute threads per rank (default: cores per node / ranks per node)", {}, false,
       [](RunConfig& c, const json& v) { c.threads = as_int(v); }},
      {"backend", "--backend", OptKind::choice, "cpu | cuda | sim (cpbench-sim only)", {"cpu", "cuda", "sim"}, false,
       [](RunConfig& c, const json& v) { c.backend = v.get<std::string>(); }},
      {"comm", "--comm", OptKind::choice, "mpi | nccl", {"mpi", "nccl"}, false,
       [](RunConfig& c, const json& v) { c.comm = v.get<std::string>(); }},
      {"dtype", "--dtype", OptKind::choice,
       "fp32 | bf16 | fp16 | fp8 (fp8: FlashAttention-3's fp8 forward, emulated by --backend cpu: q, k, v cast to e4m3 "
       "with power-of-two scales (--fp8-scaling), P rounded to e4m3 before P·V, every other tensor bf16; "
       "--pass prefill or decode only)", {"fp32", "bf16", "fp16", "fp8"}, false,
       [](RunConfig& c, const json& v) { c.dtype = v.get<std::string>(); }},
      {"fp8_scaling", "--fp8-scaling", OptKind::choice,
       "block (default) | tensor: --dtype fp8's and --comm-dtype fp8's scales, one per 32 elements of a head's row "
       "(MXFP8) or one per tensor a rank holds (current scaling, the amax of this rank's shard; in transit: of the block)",
       {"block", "tensor"}, false,
       [](RunConfig& c, const json& v) { c.fp8_scaling = v.get<std::string>(); }},
      {"comm_dtype", "--comm-dtype", OptKind::choice,
       "run (default) | bf16 | fp8: what the K,V ring blocks travel as (ring, ring-zigzag, ring-striped, usp's single ring level; allgather-kv's "
       "gathered chunks; K,V travel): "
       "the run dtype, bf16 (an fp32 run's), or fp8 e4m3 with power-of-two scales (--fp8-scaling), encoded once by "
       "their owner and decoded by each receiver; bytes = the codes plus one scale byte per 32 values (block) or per block (tensor)",
       {"run", "bf16", "fp8"}, false, [](RunConfig& c, const json& v) { c.comm_dtype = v.get<std::string>(); }},
      {"partial_dtype", "--partial-dtype", OptKind::choice,
       "f32 (default) | bf16: the K,V ring's running merged output and pass-Q's and decode's partials of a bf16/fp16 "
       "run, kept in float32 or rounded to bf16 at every merge (the partials then travel at 2 bytes)", {"f32", "bf16"}, false,
       [](RunConfig& c, const json& v) { c.partial_dtype = v.get<std::string>(); }},
      {"acc_dtype", "--acc-dtype", OptKind::choice,
       "f32 (default) | bf16: the ring's dK,dV accumulators that travel back to their owner in a bf16/fp16 run, "
       "rounded to bf16 at every hop (s_acc = 2)", {"f32", "bf16"}, false,
       [](RunConfig& c, const json& v) { c.acc_dtype = v.get<std::string>(); }},
      {"mem_limit", "--mem-limit", OptKind::size, "per-rank cap on tracked memory: bytes or 512MiB, 80GiB (0 = none)",
       {}, false, [](RunConfig& c, const json& v) { c.mem_limit_bytes = v.get<int64_t>(); }},
      {"timeout", "--timeout", OptKind::integer, "watchdog: seconds one blocked call or job may take (0 = none)",
       {}, false, [](RunConfig& c, const json& v) { c.timeout_s = v.get<int64_t>(); }},
      {"min_verified", "--min-verified", OptKind::count,
       "verify: fail unless at least N strategies were verified", {}, false,
       [](RunConfig& c, const json& v) { c.min_verified = as_int(v); }},
      {"numerics", "--numerics", OptKind::count,
       "verify: also measure every strategy's o and gradients against float64 attention of single's q, k, v, do "
       "over S seeds (--seed, --seed + 1, ...): relative Frobenius and largest absolute error, ratio to single's "
       "(the report's numerics block; docs/NUMERICS.md)", {}, false,
       [](RunConfig& c, const json& v) { c.numerics = as_int(v); }},
      {"dry_run", "--dry-run", OptKind::boolean,
       "plan the jobs and print predicted bytes and activation memory; allocate nothing", {}, false,
       [](RunConfig& c, const json& v) { c.dry_run = v.get<bool>(); }},
      {"world_size", "--world-size", OptKind::count, "dry run only: plan for P ranks (default: the world's size)",
       {}, false, [](RunConfig& c, const json& v) { c.world_size = as_int(v); }},
      {"out", "--out", OptKind::text, "write the JSON report here", {}, false,
       [](RunConfig& c, const json& v) { c.out = v.get<std::string>(); }},
      {"trace", "--trace", OptKind::text, "write a Chrome/Perfetto trace here", {}, false,
       [](RunConfig& c, const json& v) { c.trace = v.get<std::string>(); }},
      {"dump", "--dump", OptKind::text, "verify: write .npy tensors and meta.json under DIR/STRATEGY/", {}, false,
       [](RunConfig& c, const json& v) { c.dump = v.get<std::string>(); }},
      {"peak_tflops", "--peak-tflops", OptKind::number, "peak TFLOP/s per rank for MFU", {}, false,
       [](RunConfig& c, const json& v) { c.peak_tflops = v.get<double>(); }},
      {"progress", "--progress", OptKind::boolean, "progress lines on stderr (default) or none (--no-progress)", {},
       true, [](RunConfig& c, const json& v) { c.progress = v.get<bool>(); }},
  };
  // Sizes that must be given as positive numbers: 0 would read as "unset" (the model preset's
  // value, the strategy's default mesh) and silently stand for something else.
  const std::pair<const char*, int64_t> minimums[] = {
      {"seq", 1},        {"batch", 1},      {"heads", 1},      {"kv_heads", 1},   {"head_dim", 1},
      {"dim", 1},        {"ffn_dim", 1},    {"layers", 1},    {"ulysses", 1},    {"ring", 1},       {"tp", 1},       {"mlp_tp", 1},
      {"iters", 1},      {"warmup", 0},
      {"threads", 0},    {"window", 0},     {"inner_ring", 0}, {"ranks_per_node", 0},
      {"timeout", 0},    {"min_verified", 0}, {"numerics", 0}, {"world_size", 0}};
  for (auto& o : t)
    for (const auto& [key, lo] : minimums)
      if (o.key == key) o.min = lo;
  // What config (RunConfig::to_json) reports, and under which key.
  using Report = std::function<json(const RunConfig&)>;
  const std::vector<std::tuple<const char*, const char*, Report>> reported = {
      {"model", "model", [](const RunConfig& c) { return json(c.model); }},
      {"batch", "batch", [](const RunConfig& c) { return json(c.batch); }},
      {"seq", "seqs", [](const RunConfig& c) { return json(c.seqs); }},
      {"heads", "heads", [](const RunConfig& c) { return json(c.heads); }},
      {"kv_heads", "kv_heads", [](const RunConfig& c) { return json(c.kv_heads); }},
      {"head_dim", "head_dim", [](const RunConfig& c) { return json(c.head_dim); }},
      {"dim", "dim", [](const RunConfig& c) { return json(c.dim); }},
      {"block", "block", [](const RunConfig& c) { return json(c.block); }},
      {"ffn_dim", "ffn_dim",
       [](const RunConfig& c) { return c.block == "full" ? json(c.ffn_dim) : json(nullptr); }},
      {"layers", "layers", [](const RunConfig& c) { return c.block == "full" ? json(c.layers) : json(nullptr); }},
      {"recompute", "recompute",
       [](const RunConfig& c) {
         return c.block == "full" || c.recompute != "none" ? json(c.recompute) : json(nullptr);
       }},
      {"shard", "shard", [](const RunConfig& c) { return c.block == "full" ? json(c.shard) : json(nullptr); }},
      {"causal", "causal", [](const RunConfig& c) { return json(c.causal); }},
      {"rope", "rope", [](const RunConfig& c) { return json(c.rope); }},
      {"sinks", "sinks", [](const RunConfig& c) { return json(c.sinks); }},
      {"uneven_heads", "uneven_heads", [](const RunConfig& c) { return json(c.uneven_heads); }},
      {"attention", "attention", [](const RunConfig& c) { return json(c.attention.empty() ? "gqa" : c.attention); }},
      {"mla_travel", "mla", [](const RunConfig& c) {
         if (c.attention != "mla") return json(nullptr);
         const MlaDims& m = c.mla_dims;
         return json{{"q_rank", m.q_rank}, {"kv_rank", m.kv_rank}, {"d_nope", m.d_nope}, {"d_rope", m.d_rope},
                     {"d_v", m.d_v}, {"travel", c.mla_travel}};
       }},
      {"strategies", "strategies", [](const RunConfig& c) { return json(c.strategies); }},
      {"warmup", "warmup", [](const RunConfig& c) { return json(c.warmup); }},
      {"iters", "iters", [](const RunConfig& c) { return json(c.iters); }},
      {"seed", "seed", [](const RunConfig& c) { return json(c.seed); }},
      {"threads", "threads", [](const RunConfig& c) { return json(c.threads); }},
      {"backend", "backend", [](const RunConfig& c) { return json(c.backend); }},
      {"comm", "comm", [](const RunConfig& c) { return json(c.comm); }},
      {"dtype", "dtype", [](const RunConfig& c) { return json(c.dtype); }},
      {"fp8_scaling", "fp8_scaling",
       [](const RunConfig& c) { return c.fp8() || c.comm_dtype == "fp8" ? json(c.fp8_scaling_name()) : json(nullptr); }},
      {"comm_dtype", "comm_dtype", [](const RunConfig& c) { return json(c.comm_dtype); }},
      {"partial_dtype", "partial_dtype", [](const RunConfig& c) { return json(c.partial_dtype); }},
      {"acc_dtype", "acc_dtype", [](const RunConfig& c) { return json(c.acc_dtype); }},
      {"pass", "pass", [](const RunConfig& c) { return json(c.pass); }},
      {"balance", "balance", [](const RunConfig& c) { return json(c.balance); }},
      {"cp_cap", "cp_cap", [](const RunConfig& c) { return c.cp_cap >= 0 ? json(c.cp_cap) : json(nullptr); }},
      {"ring_pass", "ring_pass", [](const RunConfig& c) { return json(c.ring_pass); }},
      {"cached", "cached", [](const RunConfig& c) { return json(c.cached); }},
      {"decode_steps", "decode_steps",
       [](const RunConfig& c) { return c.pass == "decode" ? json(c.decode_steps) : json(nullptr); }},
      {"mem_limit", "mem_limit_bytes", [](const RunConfig& c) { return json(c.mem_limit_bytes); }},
      {"timeout", "timeout_s", [](const RunConfig& c) { return json(c.timeout_s); }},
      {"ranks_per_node", "ranks_per_node",
       [](const RunConfig& c) { return c.ranks_per_node ? json(c.ranks_per_node) : json(nullptr); }},
  };
  for (auto& o : t)
    for (const auto& [key, report_key, report] : reported)
      if (o.key == key) {
        o.report_key = report_key;
        o.report = report;
      }
  return t;
}

}  // namespace

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = make_table();
  return table;
}

const OptionSpec* find_option_by_key(const std::string& key) {
  for (const auto& o : option_table())
    if (o.key == key) return &o;
  return nullptr;
}

std::string known_option_keys() {
  std::string names;
  for (const auto& o : option_table()) names += (names.empty() ? "" : ", ") + o.key;
  return names;
}

std::string printable(const std::string& text) {
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

int64_t parse_size(const std::string& text, const std::string& what) {
  static const std::pair<const char*, int> units[] = {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
  const std::string msg = "must be a size in bytes (e.g. 1073741824, 512MiB, 80GiB; units KiB MiB GiB TiB)";
  std::string digits = text;
  int shift = 0;
  for (const auto& [suffix, bits] : units) {
    const size_t n = std::char_traits<char>::length(suffix);
    if (text.size() > n && text.compare(text.size() - n, n, suffix) == 0) {
      digits = text.substr(0, text.size() - n);
      shift = bits;
    }
  }
  uint64_t v = 0;
  if (!parse_uint64(digits, v) || v > uint64_t(std::numeric_limits<int64_t>::max() >> shift))
    bad_value(what, msg + " up to 2^63-1 bytes", "'" + printable(text) + "'");
  return int64_t(v << shift);
}

// The option's lower bound on an integer already in range of its kind.
int64_t at_least_min(const OptionSpec& o, int64_t x, const std::string& where) {
  if (x < o.min)
    bad_value(where, o.min == 1 ? "must be positive" : "must be >= " + std::to_string(o.min), std::to_string(x));
  return x;
}

json check_option_value(const OptionSpec& o, const json& v, const std::string& where) {
  switch (o.kind) {
    case OptKind::count:
      return at_least_min(o, checked_integer(v, where, std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int32_t>::max(), "an integer that fits 32 bits"),
                          where);
    case OptKind::integer:
      return at_least_min(o, checked_integer(v, where, std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max(), "an integer (64-bit)"),
                          where);
    case OptKind::seed:
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
        bad_value(where, "must be an integer in 0 .. 2^64-1", shown(v));
      return v.get<uint64_t>();
    case OptKind::number:
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        bad_value(where, "must be a number >= 0", shown(v));
      return v.get<double>();
    case OptKind::boolean:
      if (!v.is_boolean()) bad_value(where, "must be true or false", shown(v));
      return v;
    case OptKind::text:
      if (!v.is_string()) bad_value(where, "must be a string", shown(v));
      return v;
    case OptKind::choice: {
      std::string list;  // "a, b or c"
      for (size_t i = 0; i < o.choices.size(); ++i)
        list += (i == 0 ? "" : i + 1 == o.choices.size() ? " or " : ", ") + o.choices[i];
      if (!v.is_string()) bad_value(where, "must be " + list, shown(v));
      for (const auto& c : o.choices)
        if (v.get<std::string>() == c) return v;
      bad_value(where, "must be " + list, shown(v));
    }
    case OptKind::names: {
      json list = json::array();
      if (v.is_string()) {
        for (const auto& s : split_items(v.get<std::string>(), where)) list.push_back(s);
      } else if (v.is_array() && !v.empty()) {
        for (const auto& e : v) {
          if (!e.is_string() || e.get<std::string>().empty())
            bad_value(where, "must be a non-empty list of names", shown(v));
          list.push_back(e);
        }
      } else {
        bad_value(where, "must be a non-empty list of names or a comma-separated string", shown(v));
      }
      return list;
    }
    case OptKind::ints: {
      json list = json::array();
      const char* what = "must be an integer or a non-empty list of integers";
      const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
      if (v.is_number_integer()) list.push_back(at_least_min(o, checked_integer(v, where, lo, hi, what), where));
      else if (v.is_array() && !v.empty())
        for (const auto& e : v) list.push_back(at_least_min(o, checked_integer(e, where, lo, hi, what), where));
      else bad_value(where, what, shown(v));
      return list;
    }
    case OptKind::size:
      if (v.is_string()) return parse_size(v.get<std::string>(), where);
      return checked_integer(v, where, 0, std::numeric_limits<int64_t>::max(),
                             "a size in bytes (an integer >= 0, or a string such as \"80GiB\")");
    case OptKind::docs: {
      const char* what = "must be a spec string (L1,L2,... | equal:K | random:MIN:MAX | a workload name) or a "
                         "non-empty list of document lengths";
      if (v.is_string()) {
        if (v.get<std::string>().empty()) bad_value(where, what, shown(v));
        return v;
      }
      if (!v.is_array() || v.empty()) bad_value(where, what, shown(v));
      std::string spec;
      for (const auto& e : v)
        spec += (spec.empty() ? "" : ",") +
                std::to_string(checked_integer(e, where, 1, std::numeric_limits<int64_t>::max(),
                                               "a list of positive document lengths"));
      return spec;
    }
  }
  throw std::logic_error("check_option_value: unhandled kind");
}

json parse_option_text(const OptionSpec& o, const std::string& text) {
  const std::string& where = o.flag;
  if (!valid_utf8(text)) bad_value(where, "must be valid UTF-8", "'" + printable(text) + "'");
  switch (o.kind) {
    case OptKind::count:
    case OptKind::integer: {
      int64_t v = 0;
      if (!parse_int64(text, v)) bad_value(where, "must be an integer (64-bit)", "'" + printable(text) + "'");
      return check_option_value(o, v, where);
    }
    case OptKind::seed: {
      uint64_t v = 0;
      if (!parse_uint64(text, v)) bad_value(where, "must be an integer in 0 .. 2^64-1", "'" + printable(text) + "'");
      return v;
    }
    case OptKind::number: {
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < 0)
        bad_value(where, "must be a number >= 0", "'" + printable(text) + "'");
      return v;
    }
    case OptKind::boolean:
      throw std::logic_error("parse_option_text: boolean flags take no value");
    case OptKind::text:
    case OptKind::choice:
    case OptKind::docs:
      return check_option_value(o, text, where);
    case OptKind::names:
      return check_option_value(o, text, where);
    case OptKind::ints: {
      json list = json::array();
      for (const auto& item : split_items(text, where)) {
        int64_t v = 0;
        if (!parse_int64(item, v))
          bad_value(where, "must be integers (64-bit), comma-separated", "'" + printable(item) + "'");
        list.push_back(at_least_min(o, v, where));
      }
      return list;
    }
    case OptKind::size:
      return parse_size(text, where);
  }
  throw std::logic_error("parse_option_text: unhandled kind");
}

// --- the command line --------------------------------------------------------------------------
namespace {

// The value's form in --help.
std::string value_name(const OptionSpec& o) {
  switch (o.kind) {
    case OptKind::count: case OptKind::integer: case OptKind::seed: return "INT";
    case OptKind::number: return "X";
    case OptKind::text: return "TEXT";
    case OptKind::choice: {
      std::string s;
      for (const auto& c : o.choices) s += (s.empty() ? "" : "|") + c;
      return s;
    }
    case OptKind::names: return "A,B,...";
    case OptKind::ints: return "N[,N...]";
    case OptKind::size: return "SIZE";
    case OptKind::docs: return "SPEC";
    case OptKind::boolean: return "";
  }
  return "";
}

// The flags of one subcommand (run or verify) and where CLI11 stores what it read.
struct SubcommandFlags {
  CLI::App* app = nullptr;
  std::string config;
  CLI::Option* config_opt = nullptr;
  std::deque<std::string> texts;  // stable addresses for CLI11
  struct Entry {
    const OptionSpec* spec;
    CLI::Option* on;
    CLI::Option* off;  // --no-X, or null
    std::string* text;
  };
  std::vector<Entry> entries;

  void add(CLI::App* sub) {
    app = sub;
    config_opt = sub->add_option("--config", config, "run preset (JSON); flags given here override it");
    config_opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    for (const auto& o : option_table()) {
      if (o.flag.empty()) continue;
      Entry e{&o, nullptr, nullptr, nullptr};
      if (o.kind == OptKind::boolean) {
        e.on = sub->add_flag(o.flag, o.help);
        if (o.negatable) e.off = sub->add_flag("--no-" + o.flag.substr(2), "");
      } else {
        texts.emplace_back();
        e.text = &texts.back();
        e.on = sub->add_option(o.flag, *e.text, o.help);
        e.on->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        e.on->type_name(value_name(o));
      }
      entries.push_back(e);
    }
  }

  // The flags given, as preset keys; throws std::invalid_argument naming the flag and value.
  json settings() const {
    if (config_opt->count() > 1) throw std::invalid_argument("--config given more than once");
    json j = json::object();
    for (const auto& e : entries) {
      const size_t n = e.on->count() + (e.off ? e.off->count() : 0);
      if (n == 0) continue;
      const std::string names = e.spec->flag + (e.off ? "/--no-" + e.spec->flag.substr(2) : "");
      if (n > 1) throw std::invalid_argument(names + " given " + std::to_string(n) + " times (give it once)");
      if (e.spec->kind == OptKind::boolean) j[e.spec->key] = e.on->count() > 0;
      else j[e.spec->key] = parse_option_text(*e.spec, *e.text);
    }
    return j;
  }
};

// The whole command line: parse_command_line parses with it and command_line_json describes it,
// so the description is the parser's own list of flags.
struct Parser {
  CLI::App app{"cpbench: benchmark context-parallel attention strategies (run under mpirun)"};
  SubcommandFlags run_flags, verify_flags;
  bool list_json = false;
  Parser() {
    app.require_subcommand(1);
    run_flags.add(app.add_subcommand("run", "time the strategies, print a table, write a report"));
    verify_flags.add(app.add_subcommand("verify", "every strategy against single; non-zero exit on failure"));
    app.add_subcommand("list", "strategies, presets and their constraints")
        ->add_flag("--json", list_json, "print it as one JSON object, with every option (for tools and tests)");
  }
};

}  // namespace

const char* kind_name(OptKind kind) {
  switch (kind) {
    case OptKind::count: return "count";
    case OptKind::integer: return "integer";
    case OptKind::seed: return "seed";
    case OptKind::number: return "number";
    case OptKind::boolean: return "boolean";
    case OptKind::text: return "text";
    case OptKind::choice: return "choice";
    case OptKind::names: return "names";
    case OptKind::ints: return "ints";
    case OptKind::size: return "size";
    case OptKind::docs: return "docs";
  }
  return "?";
}

json command_line_json() {
  Parser p;
  // The defaults come from the same place a run's do: the built-in RunConfig under the embedded
  // default preset.
  RunConfig defaults;
  const json preset = default_run_preset();
  apply_settings(defaults, preset, "default preset");
  json commands = json::array(), options = json::array();
  std::vector<std::string> order;  // flags in the order first seen (run's order, then list's)
  std::map<std::string, json> by_flag;
  for (const CLI::App* sub : p.app.get_subcommands({})) {
    commands.push_back({{"name", sub->get_name()}, {"help", sub->get_description()}});
    for (const CLI::Option* opt : sub->get_options()) {
      for (const std::string& lname : opt->get_lnames()) {
        const std::string flag = "--" + lname;
        // --no-X is X's negation: one entry for both, as in the table.
        const OptionSpec* negates = nullptr;
        if (lname.rfind("no-", 0) == 0)
          for (const auto& o : option_table())
            if (o.negatable && o.flag == "--" + lname.substr(3)) negates = &o;
        if (negates) continue;
        auto [it, fresh] = by_flag.try_emplace(flag);
        json& e = it->second;
        if (fresh) {
          order.push_back(flag);
          const OptionSpec* spec = nullptr;
          for (const auto& o : option_table())
            if (o.flag == flag) spec = &o;
          e["flag"] = flag;
          e["help"] = opt->get_description();
          e["commands"] = json::array();
          if (!spec) {  // the parser's own: --help, --config, list's --json
            e["key"] = nullptr;
            e["kind"] = opt->get_expected_min() == 0 ? "boolean" : "text";
            e["value"] = opt->get_expected_min() == 0 ? json(nullptr) : json(opt->get_type_name());
            e["report_key"] = nullptr;
          } else {
            e["key"] = spec->key;
            e["kind"] = kind_name(spec->kind);
            e["value"] = spec->kind == OptKind::boolean ? json(nullptr) : json(value_name(*spec));
            if (spec->kind == OptKind::choice) e["choices"] = spec->choices;
            if (spec->negatable) e["negated"] = "--no-" + spec->flag.substr(2);
            if (spec->min != std::numeric_limits<int64_t>::min()) e["min"] = spec->min;
            e["report_key"] = spec->report_key.empty() ? json(nullptr) : json(spec->report_key);
            // A default is stated only where it is a value the flag accepts, so giving it changes
            // nothing; the built-in 0s and nulls that mean "derived" (heads: the model's) are
            // not, and their help says what they become.
            json value = preset.contains(spec->key) ? preset[spec->key]
                         : spec->report                ? spec->report(defaults)
                                                       : json(nullptr);
            try {
              e["default"] = check_option_value(*spec, value, spec->key);
            } catch (const std::invalid_argument&) {
            }
          }
        }
        e["commands"].push_back(sub->get_name());
      }
    }
  }
  for (const auto& flag : order) options.push_back(by_flag[flag]);
  return {{"commands", commands}, {"options", options}};
}

CommandLine parse_command_line(int argc, char** argv, bool print_help) {
  CommandLine cl;
  Parser p;
  CLI::App& app = p.app;
  const SubcommandFlags &run_flags = p.run_flags, &verify_flags = p.verify_flags;
  // CLI11 says only "A subcommand is required" for a mistyped command: name it.
  if (argc < 2) {
    cl.exit_code = 2;
    cl.error = "a command is required: run, verify or list (cpbench --help)";
    return cl;
  }
  const std::string first = argv[1];
  if (first != "run" && first != "verify" && first != "list" && first.rfind("-", 0) != 0) {
    cl.exit_code = 2;
    cl.error = "unknown command '" + printable(first) + "' (commands: run, verify, list)";
    return cl;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help
      if (print_help) app.exit(e);
      cl.exit_code = 0;
    } else {
      cl.exit_code = 2;
      cl.error = printable(e.what());
    }
    return cl;
  }
  if (app.got_subcommand("list")) {
    cl.command = "list";
    cl.list_json = p.list_json;
    return cl;
  }
  const bool verifying = app.got_subcommand("verify");
  const SubcommandFlags& flags = verifying ? verify_flags : run_flags;
  cl.command = verifying ? "verify" : "run";
  try {
    cl.settings = flags.settings();
    if (!valid_utf8(flags.config)) bad_value("--config", "must be valid UTF-8", "'" + printable(flags.config) + "'");
    cl.config_path = flags.config;
  } catch (const std::invalid_argument& e) {
    cl.exit_code = 2;
    cl.error = e.what();
  }
  return cl;
}

}  // namespace cpbench
