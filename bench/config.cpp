#include "bench/config.h"

#include "bench/options.h"
#include "bench/workloads.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <stdexcept>

namespace cpbench {

// Generated at build time from configs/ (bench/CMakeLists.txt).
extern const char* const kEmbeddedModelPresets[];
extern const int kNumEmbeddedModelPresets;
extern const char* const kEmbeddedDefaultRun;

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    std::vector<ModelPreset> v;
    for (int i = 0; i < kNumEmbeddedModelPresets; ++i) {
      auto j = nlohmann::json::parse(kEmbeddedModelPresets[i]);
      ModelPreset p;
      p.name = j.at("name").get<std::string>();
      p.description = j.value("description", "");
      p.dim = j.at("dim").get<int>();
      p.heads = j.at("heads").get<int>();
      p.kv_heads = j.at("kv_heads").get<int>();
      p.head_dim = j.at("head_dim").get<int>();
      p.ffn_dim = j.value("ffn_dim", int64_t(0));
      p.layers = j.value("layers", int64_t(0));
      p.vocab = j.value("vocab", int64_t(0));
      p.moe = j.value("moe", false);
      if (j.value("attention", std::string("gqa")) == "mla") {
        const auto& m = j.at("mla");
        p.mla = true;
        p.mla_dims.q_rank = m.at("q_rank").get<int>();
        p.mla_dims.kv_rank = m.at("kv_rank").get<int>();
        p.mla_dims.d_nope = m.at("d_nope").get<int>();
        p.mla_dims.d_rope = m.at("d_rope").get<int>();
        p.mla_dims.d_v = m.at("d_v").get<int>();
      }
      v.push_back(p);
    }
    return v;
  }();
  return presets;
}

const ModelPreset* find_model(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return &p;
  return nullptr;
}

nlohmann::json default_run_preset() { return nlohmann::json::parse(kEmbeddedDefaultRun); }

int64_t RunConfig::full_block_ffn_dim() const { return block == "full" ? ffn_dim : 0; }

DType RunConfig::storage_dtype() const { return fp8() ? DType::bf16 : parse_dtype(dtype); }

LayerShape RunConfig::shape(int64_t N, int pack) const {
  LayerShape s;
  s.B = batch; s.N = N; s.H = heads; s.G = kv_heads; s.d = head_dim; s.D = dim;
  s.mask.causal = causal; s.rope = rope; s.dtype = storage_dtype();
  s.fp8 = fp8();
  s.fp8_scaling = fp8_scaling_name() == "tensor" ? Fp8Scaling::tensor : Fp8Scaling::block;
  s.kv_transit = comm_dtype == "fp8" ? KvTransit::fp8 : comm_dtype == "bf16" ? KvTransit::bf16 : KvTransit::run;
  s.partial_dtype = parse_dtype(partial_dtype);
  s.acc_dtype = parse_dtype(acc_dtype);
  s.mask.window = window;
  s.sinks = sinks;
  s.uneven_heads = uneven_heads;
  if (attention == "mla") {  // the core's heads: H query and H key heads of d_nope + d_rope, values d_v
    s.mla = true;
    s.mla_dims = mla_dims;
    s.d_v = mla_dims.d_v;
    s.mla_latent = mla_travel == "latent";
  }
  if (!docs_spec.empty()) {
    s.mask.doc_lens = resolve_doc_lens(docs_spec, N, seed + uint64_t(pack));
    auto starts = std::make_shared<std::vector<int64_t>>();
    int64_t at = 0;
    for (int64_t len : s.mask.doc_lens) starts->push_back(at), at += len;
    s.mask.docs = starts;
  }
  s.pass.kind = pass == "decode" ? PassKind::decode : pass == "prefill" ? PassKind::prefill : PassKind::train;
  s.pass.steps = pass == "decode" ? decode_steps : 0;
  s.pass.travel = parse_ring_travel(ring_pass);
  s.pass.cached = cached;
  s.balance = parse_balance(balance);
  s.cp_cap = cp_cap > 0 ? cp_cap : 0;
  s.full_block = block == "full";
  s.F = full_block_ffn_dim();
  s.recompute = recompute == "full" ? Recompute::full : recompute == "selective" ? Recompute::selective : Recompute::none;
  return s;
}

nlohmann::json read_run_preset(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument("cannot read config file '" + printable(path) + "': not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size > (16u << 20))
    throw std::invalid_argument("config file '" + printable(path) + "' is larger than 16 MiB (or unreadable)");
  std::ifstream f(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!f.good() && !f.eof()) throw std::invalid_argument("cannot read config file '" + printable(path) + "'");
  // nlohmann keeps the last of two equal keys silently; a preset with one is a mistake to report.
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string duplicate;
  auto check_keys = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) keys_of_open_objects.emplace_back();
    else if (ev == E::object_end && !keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
    else if (ev == E::key && !keys_of_open_objects.empty() &&
             !keys_of_open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, check_keys);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for huge numbers
    std::string why = printable(e.what());
    if (why.size() > 200) why = why.substr(0, 197) + "...";
    throw std::invalid_argument("config file '" + printable(path) + "' is not valid JSON: " + why);
  }
  if (!duplicate.empty())
    throw std::invalid_argument("config file '" + printable(path) + "': key '" + printable(duplicate) +
                                "' is given more than once in one object");
  return j;
}

void apply_settings(RunConfig& c, const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object())
    throw std::invalid_argument(origin + ": expected a JSON object of settings (keys: " + known_option_keys() +
                                "), got " + j.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace).substr(0, 80));
  // A layer that names the mesh replaces the mesh of the layers below it: --ulysses/--ring on
  // the command line override a preset's "mesh": "all" and the reverse. Both in one layer stay a
  // conflict (finalize_config reports it).
  const bool sets_degrees = j.contains("ulysses") || j.contains("ring") || j.contains("tp");
  const bool sets_all = j.contains("mesh");
  if (sets_degrees && !sets_all) c.mesh_all = false;
  if (sets_all && !sets_degrees) c.ulysses = c.ring = c.tp = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const OptionSpec* o = find_option_by_key(it.key());
    if (!o)
      throw std::invalid_argument(origin + ": unknown key '" + printable(it.key()) + "' (known: " +
                                  known_option_keys() + ")");
    o->set(c, check_option_value(*o, it.value(), origin + ": '" + it.key() + "'"));
  }
}

std::string strategy_entry_name(const std::string& entry) { return entry.substr(0, entry.find('[')); }

int planned_world_size(const RunConfig& c, int P) { return c.dry_run && c.world_size > 0 ? c.world_size : P; }

// --attention and --mla-travel against the model preset (DESIGN "Multi-head latent attention"): MLA takes
// its heads' dims from an MLA preset, so --kv-heads and --head-dim (GQA's) are refused with it;
// the preset's expanded heads are H key heads of d_nope + d_rope.
void resolve_attention(RunConfig& c, const ModelPreset& m) {
  if (c.attention.empty()) c.attention = m.mla ? "mla" : "gqa";
  if (c.attention != "gqa" && c.attention != "mla")
    throw std::invalid_argument("attention must be gqa or mla, got '" + c.attention + "'");
  if (c.attention == "gqa") {
    if (m.mla)
      throw std::invalid_argument("model '" + m.name + "' is an MLA model: --attention gqa has no heads to take from it "
                                  "(use a GQA preset, or --attention mla)");
    if (!c.mla_travel.empty())
      throw std::invalid_argument("--mla-travel " + c.mla_travel + " chooses what MLA's levels move: it needs --attention mla (got attention=gqa)");
    return;
  }
  if (!m.mla)
    throw std::invalid_argument("--attention mla takes its ranks and head dims from an MLA model preset (deepseek-v3, "
                                "deepseek-v2-lite, tiny-mla); model '" + m.name + "' has none");
  if (c.kv_heads != 0 || c.head_dim != 0)
    throw std::invalid_argument("--attention mla: its key heads and head dims are the preset's (H key heads of d_nope + d_rope = " +
                                std::to_string(m.mla_dims.d_nope + m.mla_dims.d_rope) + ", values d_v = " +
                                std::to_string(m.mla_dims.d_v) + "); do not give --kv-heads or --head-dim (got kv_heads=" +
                                std::to_string(c.kv_heads) + ", head_dim=" + std::to_string(c.head_dim) + ")");
  // Decode runs the absorbed form over a cache of latents (DESIGN "Decode"); a prefill after a
  // cache (--cached) would have to expand or circulate that latent cache, which is not built.
  if (c.pass != "decode" && c.cached > 0)
    throw std::invalid_argument("--attention mla with --cached prefill is not built (MLA's cache holds latents: --pass decode "
                                "reads them; got pass=" + c.pass + ", cached=" + std::to_string(c.cached) + ")");
  if (c.pass == "decode" && !c.mla_travel.empty())
    throw std::invalid_argument("--mla-travel " + c.mla_travel + " chooses what a training or prefill level moves; --pass decode "
                                "moves no keys (its cache holds the latent, its ranks exchange partial outputs): omit it");
  if (c.mla_travel.empty()) c.mla_travel = "expanded";
  if (c.mla_travel != "expanded" && c.mla_travel != "latent")
    throw std::invalid_argument("mla_travel must be expanded or latent, got '" + c.mla_travel + "'");
  if (c.block == "full" && m.moe)
    throw std::invalid_argument("model '" + m.name + "': its feed-forward layers are mixtures of experts, which --block full "
                                "does not model (it has a dense SwiGLU MLP only); measure the attention sub-layer, --block attn");
  c.mla_dims = m.mla_dims;
  c.kv_heads = c.heads > 0 ? c.heads : m.heads;  // expanded: one key head per query head
  c.head_dim = m.mla_dims.d_nope + m.mla_dims.d_rope;
}

void finalize_config(RunConfig& c, int P) {
  const ModelPreset* m = find_model(c.model);
  if (!m) {
    std::string names;
    for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
    throw std::invalid_argument("unknown model preset '" + c.model + "' (presets: " + names + ")");
  }
  resolve_attention(c, *m);
  if (c.heads == 0) c.heads = m->heads;
  if (c.kv_heads == 0) c.kv_heads = m->kv_heads;
  if (c.head_dim == 0) c.head_dim = m->head_dim;
  if (c.dim == 0) c.dim = m->dim;
  // The MLP's width: --ffn-dim, else the preset's F when the preset's D is the one in use (a
  // preset's F means nothing for another model dimension).
  if (c.block == "full" && c.ffn_dim == 0 && c.dim == m->dim) c.ffn_dim = m->ffn_dim;
  if (c.block == "full" && c.ffn_dim == 0)
    throw std::invalid_argument("block=full needs the MLP width: --ffn-dim F (model '" + c.model +
                                "' with dim=" + std::to_string(c.dim) + " gives none)");
  // The whole-model estimate's L and V: --layers, else the preset's; every embedded preset has
  // both, a block without L is an error rather than a silent one-layer model.
  if (c.layers == 0) c.layers = m->layers;
  c.vocab = m->vocab;
  if (c.block == "full" && c.layers < 1)
    throw std::invalid_argument("block=full needs the model's layers for the memory estimate: --layers L (model '" +
                                c.model + "' gives layers=" + std::to_string(c.layers) + ")");
  if (c.recompute != "none" && c.recompute != "selective" && c.recompute != "full")
    throw std::invalid_argument("recompute must be none, selective or full, got '" + c.recompute + "'");
  if (c.recompute != "none" && c.pass != "train")
    throw std::invalid_argument("--recompute " + c.recompute +
                                " repeats a forward inside the backward: it needs --pass train (got pass=" + c.pass + ")");
  if (c.shard != "none" && c.shard != "optimizer" && c.shard != "grads" && c.shard != "params")
    throw std::invalid_argument("shard must be none, optimizer, grads or params, got '" + c.shard + "'");
  auto positive = [](const char* name, int64_t v) {
    if (v <= 0) throw std::invalid_argument(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive("batch", c.batch);
  positive("heads", c.heads);
  positive("kv_heads", c.kv_heads);
  positive("head_dim", c.head_dim);
  positive("dim", c.dim);
  positive("iters", c.iters);
  if (c.warmup < 0) throw std::invalid_argument("warmup must be >= 0, got " + std::to_string(c.warmup));
  if (c.threads < 0) throw std::invalid_argument("threads must be >= 0 (0: automatic), got " + std::to_string(c.threads));
  if (c.ulysses < 0 || c.ring < 0)
    throw std::invalid_argument("ulysses and ring must be positive, got ulysses=" + std::to_string(c.ulysses) +
                                " ring=" + std::to_string(c.ring));
  if (c.pass == "decode") {
    // Decode reads a C-token cache: its report's seq is C (DESIGN clarifications).
    if (c.cached <= 0)
      throw std::invalid_argument("--pass decode reads a KV cache: it needs --cached C > 0 (got cached=" +
                                  std::to_string(c.cached) + ")");
    if (c.seqs_given && (c.seqs.size() != 1 || c.seqs[0] != c.cached)) {
      std::string given;
      for (int64_t n : c.seqs) given += (given.empty() ? "" : ",") + std::to_string(n);
      throw std::invalid_argument("--pass decode: seq is the cached length, so --seq must equal --cached " +
                                  std::to_string(c.cached) + " (got seq=" + given + ": omit --seq)");
    }
    c.seqs = {c.cached};
    if (c.decode_steps < 0)
      throw std::invalid_argument("--decode-steps must be >= 1, got " + std::to_string(c.decode_steps));
    if (c.decode_steps == 0) c.decode_steps = 8;
  } else if (c.decode_steps != 0) {
    throw std::invalid_argument("--decode-steps " + std::to_string(c.decode_steps) +
                                " applies to --pass decode only (got pass=" + c.pass + ")");
  }
  if (c.seqs.empty()) throw std::invalid_argument("no sequence length given (--seq)");
  for (int64_t n : c.seqs) positive("seq", n);
  // Derived widths ((H + 2G)·d, H·d) are computed in 32-bit ints in places; these bounds keep
  // them far from overflow and are far above any real model (H <= 128, D <= 16384 today).
  if (c.heads > 65536 || c.kv_heads > 65536)
    throw std::invalid_argument("heads=" + std::to_string(c.heads) + " kv_heads=" + std::to_string(c.kv_heads) +
                                " exceed the supported maximum 65536");
  if (c.dim > (1 << 24))
    throw std::invalid_argument("dim=" + std::to_string(c.dim) + " exceeds the supported maximum 16777216");
  if (c.heads % c.kv_heads != 0)
    throw std::invalid_argument("kv_heads=" + std::to_string(c.kv_heads) + " must divide heads=" +
                                std::to_string(c.heads));
  if (c.head_dim > 256)
    throw std::invalid_argument("head_dim=" + std::to_string(c.head_dim) + " exceeds the supported maximum 256");
  if (c.peak_tflops < 0) throw std::invalid_argument("peak_tflops must be positive");
  // Every backend runs fp32, bf16 and fp16 (the cpu stores 16-bit tensors and rounds where the GPU
  // kernels round: DESIGN "Rounding points"); fp8 is the cpu's emulation of an fp8 forward.
  c.storage_dtype();  // throws on an unknown name
  if (c.fp8()) {
    if (c.pass == "train")
      throw std::invalid_argument("--dtype fp8 defines attention's forward only (FlashAttention-3's fp8 kernels): it needs "
                                  "--pass prefill or decode (got pass=train)");
    if (c.backend != "cpu")
      throw std::invalid_argument("--dtype fp8 is emulated by --backend cpu only (got backend=" + c.backend +
                                  "): the cuda backend has no fp8 kernels and no platform file gives fp8 attention's rate");
    if (c.attention == "mla")
      throw std::invalid_argument("--dtype fp8 with --attention mla is not built (MLA's absorbed decode and latent "
                                  "travel quantize nothing yet); use --attention gqa");
    if (c.fp8_scaling_name() == "block" && c.head_dim % kMxBlock != 0)
      throw std::invalid_argument("--fp8-scaling block scales each " + std::to_string(kMxBlock) +
                                  " elements of a head's row: it needs head_dim a multiple of " + std::to_string(kMxBlock) +
                                  " (got head_dim=" + std::to_string(c.head_dim) + "); use --fp8-scaling tensor");
  }
  // What travels in a lower precision than the run's float32 partials and accumulators: only in a
  // 16-bit run, and only where it is built (the K,V ring's running output and the train pass's
  // dK,dV accumulators; the strategies refuse the schedules that do not round them).
  for (const auto& [flag, value] : {std::pair{"--partial-dtype", c.partial_dtype}, std::pair{"--acc-dtype", c.acc_dtype}}) {
    if (value != "f32" && value != "bf16")
      throw std::invalid_argument(std::string(flag) + " must be f32 or bf16, got \"" + value + "\"");
    if (value == "bf16" && c.storage_dtype() == DType::f32)
      throw std::invalid_argument(std::string(flag) + " bf16 rounds what a 16-bit run keeps in float32: it needs --dtype bf16 or fp16 (got dtype=" +
                                  c.dtype + ")");
  }
  if (c.comm_dtype != "run") {
    const std::string v = "--comm-dtype " + c.comm_dtype;
    if (c.comm_dtype == "bf16" && c.storage_dtype() != DType::f32)
      throw std::invalid_argument(v + " is the " + c.dtype + " run's own: K,V travel as bf16 already (use fp8, or --dtype fp32)");
    if (c.pass == "decode")
      throw std::invalid_argument(v + " chooses what a ring block (K,V, or Q under pass-Q) travels as; --pass decode moves no keys");
    if (c.attention == "mla")
      throw std::invalid_argument(v + " with --attention mla is not built (its blocks hold d + d_v or a latent per head)");
    if (c.comm_dtype == "fp8") {
      if (c.backend == "cuda")
        throw std::invalid_argument(v + " is built on --backend cpu and sim (the cuda backend has no fp8 codec)");
      if (c.fp8_scaling_name() == "block" && c.head_dim % kMxBlock != 0)
        throw std::invalid_argument(v + " with --fp8-scaling block scales each " + std::to_string(kMxBlock) +
                                    " values of a head's row: it needs head_dim a multiple of " + std::to_string(kMxBlock) +
                                    " (got head_dim=" + std::to_string(c.head_dim) + "); use --fp8-scaling tensor");
    }
  }
  if (!c.fp8_scaling.empty() && !c.fp8() && c.comm_dtype != "fp8")
    throw std::invalid_argument("--fp8-scaling " + c.fp8_scaling + " chooses fp8's scales: it needs --dtype fp8 or --comm-dtype fp8 (got dtype=" +
                                c.dtype + ", comm_dtype=" + c.comm_dtype + ")");
  if (c.acc_dtype == "bf16" && c.pass != "train")
    throw std::invalid_argument("--acc-dtype bf16 rounds the backward's dK,dV accumulators: it needs --pass train (got pass=" +
                                c.pass + ")");
  // (o's head dim: d_v under MLA, else head_dim)
  const bool mla = c.attention == "mla";
  const int o_dim = mla ? c.mla_dims.d_v : c.head_dim;
  if (c.partial_dtype == "bf16" && (c.pass == "decode" || ring_travel(parse_ring_travel(c.ring_pass)).queries_travel) &&
      o_dim % 2 != 0)
    throw std::invalid_argument("--partial-dtype bf16 under " + (c.pass == "decode" ? std::string("--pass decode") : "--ring-pass " + c.ring_pass) +
                                " sends each bf16 o with its float32 lse in one message: it needs an even " +
                                (mla ? "d_v" : "head_dim") + " (got " + (mla ? "d_v=" : "head_dim=") + std::to_string(o_dim) + ")");
  if (mla && c.backend == "cuda" && c.storage_dtype() != DType::f32 && c.pass != "decode")  // (decode: the decode kernel)
    throw std::invalid_argument("--attention mla on --backend cuda needs --dtype fp32: the " + c.dtype +
                                " tensor-core attention kernels are built for head dims 64 and 128 with d_v = d (MLA: d=" +
                                std::to_string(c.head_dim) + ", d_v=" + std::to_string(c.mla_dims.d_v) +
                                "); the fp32 kernels take two head dims, as does the decode kernel (--pass decode) in any dtype");
  if (c.comm != "mpi" && c.comm != "nccl")
    throw std::invalid_argument("comm must be mpi or nccl, got '" + c.comm + "'");
  if (c.backend == "cpu" && c.comm == "nccl")
    throw std::invalid_argument("comm nccl needs backend cuda (got backend=cpu)");
  if (ring_travel(parse_ring_travel(c.ring_pass)).queries_travel && c.pass != "prefill")
    throw std::invalid_argument("--ring-pass " + c.ring_pass + " circulates query blocks in the forward only: it needs --pass prefill (got pass=" +
                                c.pass + ")");
  // An entry is a strategy's name, or a name with one of its meshes' labels ("usp[t2xu2xr2]",
  // "double-ring[w2]"), which plan_jobs matches against the meshes the strategy declares.
  for (const auto& s : c.strategies) {
    const std::string name = strategy_entry_name(s);
    if (!find_strategy(name)) {
      std::string names;
      for (const auto& i : strategy_registry()) names += (names.empty() ? "" : ", ") + i.name;
      throw std::invalid_argument("unknown strategy '" + s + "' (strategies: " + names + ")");
    }
    if (name == s) continue;
    if (s.back() != ']')
      throw std::invalid_argument("strategy '" + s + "': a named mesh is written name[mesh], e.g. usp[u2xr2]");
    const auto strat = find_strategy(name)->make();
    if (!strat->capabilities().mesh && strat->mesh_candidates(MeshSpec{}, planned_world_size(c, P)).size() <= 1)
      throw std::invalid_argument("strategy '" + s + "': " + name + " has one mesh only; name it without [...]");
    if (c.mesh_all)
      throw std::invalid_argument("--mesh all enumerates every mesh; do not also name one (strategy '" + s + "')");
  }
  if (c.strategies.empty())
    for (const auto& i : strategy_registry()) c.strategies.push_back(i.name);
  if (c.mesh_all && (c.ulysses || c.ring || c.tp))
    throw std::invalid_argument("--mesh all enumerates every t x U x R; do not also give --tp/--ulysses/--ring (tp=" +
                                std::to_string(c.tp) + " ulysses=" + std::to_string(c.ulysses) +
                                " ring=" + std::to_string(c.ring) + ")");
  // A level flag (--tp, --ulysses, --ring) applies to the requested strategies whose mesh has that
  // level to choose (usp; a named mesh fixes its own); the others run as without it (megatron-sp
  // is the mesh {tp = P} by itself, the ring family {ring = P}). When no requested strategy takes
  // it, it would be silently ignored: that is an error instead.
  auto takes_levels = [&](const std::string& s) {
    return strategy_entry_name(s) == s && find_strategy(s)->can.mesh;
  };
  if (c.tp > 1) {
    bool used = false;
    for (const auto& s : c.strategies) used = used || takes_levels(s);
    if (!used) {
      std::string names;
      bool named = false;  // a named usp mesh: its label fixes its tp
      for (const auto& n : c.strategies) {
        names += (names.empty() ? "" : ",") + n;
        named = named || (strategy_entry_name(n) != n && find_strategy(strategy_entry_name(n))->can.mesh);
      }
      throw std::invalid_argument("--tp " + std::to_string(c.tp) + " sets a tp level, but none of the strategies has one to choose (strategies: " +
                                  names + (named ? "; a named mesh fixes its own tp: drop --tp)"
                                                 : "; the tp level is usp's: --strategies usp or usp[t" + std::to_string(c.tp) + "x...])"));
    }
  }
  // A mesh that no requested strategy uses would be silently ignored: say so instead.
  if (c.mesh_all || c.ulysses || c.ring) {
    bool used = false;
    for (const auto& s : c.strategies) {
      const auto strat = find_strategy(strategy_entry_name(s))->make();
      // --mesh all also enumerates the meshes a strategy declares (double-ring: every inner ring).
      used = used || takes_levels(s) ||
             (c.mesh_all && !c.ulysses && !c.ring && strat->mesh_candidates(MeshSpec{}, planned_world_size(c, P)).size() > 1);
    }
    if (!used) {
      std::string names;
      for (const auto& s : c.strategies) names += (names.empty() ? "" : ",") + s;
      throw std::invalid_argument("ulysses/ring/mesh set a mesh (ulysses=" + std::to_string(c.ulysses) + " ring=" +
                                  std::to_string(c.ring) + (c.mesh_all ? " mesh=all" : "") +
                                  ") but none of the strategies uses one (strategies: " + names + ")");
    }
  }

  // Second-wave options (DESIGN "Additions for the second wave"); strategy-dependent checks
  // (inner ring dividing R, ...) belong to the strategies.
  auto at_least_zero = [](const char* name, int64_t v, const char* zero) {
    if (v < 0) throw std::invalid_argument(std::string(name) + " must be >= 0 (0: " + zero + "), got " + std::to_string(v));
  };
  at_least_zero("window", c.window, "no window");
  at_least_zero("timeout", c.timeout_s, "no timeout");
  at_least_zero("mem_limit", c.mem_limit_bytes, "no limit");
  at_least_zero("ranks_per_node", c.ranks_per_node, "ranks sharing a host");
  at_least_zero("inner_ring", c.inner_ring, "ranks per node");
  at_least_zero("min_verified", c.min_verified, "no minimum");
  at_least_zero("world_size", c.world_size, "the world's size");
  if (c.world_size > 0 && !c.dry_run)
    throw std::invalid_argument("world_size=" + std::to_string(c.world_size) +
                                " plans for ranks that do not exist: it needs --dry-run");
  if (c.min_verified > 0 && c.command != "verify")
    throw std::invalid_argument("min_verified=" + std::to_string(c.min_verified) + " applies to cpbench verify only");
  at_least_zero("numerics", c.numerics, "off");
  if (c.numerics > 0 && c.command != "verify")
    throw std::invalid_argument("numerics=" + std::to_string(c.numerics) + " applies to cpbench verify only");
  // The float64 reference is the layer's whole attention, every token at its position: a cache's
  // seeded rows are not exported, and decode exports no queries.
  if (c.numerics > 0 && (c.cached > 0 || c.pass == "decode"))
    throw std::invalid_argument("numerics=" + std::to_string(c.numerics) + " compares every token's attention with float64: " +
                                "not with " + (c.pass == "decode" ? std::string("pass=decode") : "cached=" + std::to_string(c.cached)));
  const int planned = planned_world_size(c, P);
  if (c.ranks_per_node > 0 && planned % c.ranks_per_node != 0)
    throw std::invalid_argument("ranks_per_node=" + std::to_string(c.ranks_per_node) + " must divide the world size " +
                                std::to_string(planned));
  if (c.inner_ring > planned)
    throw std::invalid_argument("inner_ring=" + std::to_string(c.inner_ring) + " exceeds the world size " +
                                std::to_string(planned));
  for (int64_t n : c.seqs) {
    if (c.batch > std::numeric_limits<int64_t>::max() / n)
      throw std::invalid_argument("batch x seq overflows 64 bits: batch=" + std::to_string(c.batch) +
                                  " seq=" + std::to_string(n));
    if (!c.docs_spec.empty()) resolve_doc_lens(c.docs_spec, n, c.seed);  // throws naming the spec
  }
  if (c.cp_cap != -1) {
    // DESIGN: --cp-cap of 0 or larger than N is exit 2; it sizes dynamic's groups only.
    if (c.balance != "dynamic")
      throw std::invalid_argument("--cp-cap " + std::to_string(c.cp_cap) + " sizes the CP groups of --balance dynamic only (got balance=" +
                                  c.balance + ")");
    for (int64_t n : c.seqs)
      if (c.cp_cap < 1 || c.cp_cap > n)
        throw std::invalid_argument("--cp-cap must be in 1 .. seq=" + std::to_string(n) + " (tokens per rank), got " +
                                    std::to_string(c.cp_cap));
  }
  if (c.mlp_tp > 0) {
    // Per-sub-layer meshes (DESIGN): the MLP's own TP level of N contiguous ranks; the strategy-
    // dependent ones are per job: Helix's heads (check_mlp_mesh), usp's double ring (its check).
    if (c.block != "full")
      throw std::invalid_argument("--mlp-tp " + std::to_string(c.mlp_tp) +
                                  " shards the MLP sub-layer: it needs --block full (got block=" + c.block + ")");
    if (planned % c.mlp_tp != 0)
      throw std::invalid_argument("--mlp-tp " + std::to_string(c.mlp_tp) + " does not divide the world size P=" +
                                  std::to_string(planned) + " (the MLP's groups are N contiguous ranks)");
    if (c.ffn_dim % c.mlp_tp != 0)
      throw std::invalid_argument("--mlp-tp " + std::to_string(c.mlp_tp) + " does not divide ffn_dim=" +
                                  std::to_string(c.ffn_dim) + " (w_gate, w_up split by columns)");
    if (c.pass == "decode" && c.dim % c.mlp_tp != 0)
      throw std::invalid_argument("--mlp-tp " + std::to_string(c.mlp_tp) + " does not divide dim=" +
                                  std::to_string(c.dim) + " (--pass decode all-reduces the MLP's output as D/N columns per rank)");
  }
  at_least_zero("cached", c.cached, "no cache");
  if (c.cached > 0) {
    // Persistent-KV prefill (DESIGN "Inference passes"): forward only, new tokens after the cache.
    if (c.pass != "prefill" && c.pass != "decode")
      throw std::invalid_argument("--cached " + std::to_string(c.cached) +
                                  " is an inference cache: it needs --pass prefill or decode (got pass=" + c.pass + ")");
    for (int64_t n : c.seqs)
      if (c.pass == "prefill" && c.cached >= n)
        throw std::invalid_argument("--cached " + std::to_string(c.cached) + " must be less than seq=" +
                                    std::to_string(n) + " (prefill needs at least one new token)");
    if (!c.docs_spec.empty() || c.balance != "none")
      throw std::invalid_argument("--cached " + std::to_string(c.cached) +
                                  " is built for one sequence whose prefix is cached: not with --docs or --balance (docs='" +
                                  c.docs_spec + "' balance=" + c.balance + ")");
  }
  if (c.docs_resample) {
    // Another pack per iteration needs a spec that draws at random with the run's seed.
    if (c.docs_spec.empty() || !doc_spec_is_sampled(c.docs_spec) ||
        (c.docs_spec.rfind("random:", 0) != 0 && c.docs_spec.find(':') != std::string::npos))
      throw std::invalid_argument("docs_resample needs --docs random:MIN:MAX or a distribution workload drawn with "
                                  "--seed (llama3-sft, not NAME:SEED), got docs='" + c.docs_spec + "'");
    if (c.iters < 2)
      throw std::invalid_argument("docs_resample draws one pack per timed iteration and needs iters >= 2, got iters=" +
                                  std::to_string(c.iters));
  }
}

nlohmann::json RunConfig::to_json(int world_size) const {
  nlohmann::json j;
  j["command"] = command;
  j["world_size"] = world_size;
  for (const auto& o : option_table())  // every reported option, under its report key
    if (!o.report_key.empty()) j[o.report_key] = o.report(*this);
  // Blocks made of several options.
  j["mesh"] = {{"tp", tp ? nlohmann::json(tp) : nlohmann::json(nullptr)},
               {"mlp_tp", mlp_tp ? nlohmann::json(mlp_tp) : nlohmann::json(nullptr)},
               {"ulysses", ulysses ? nlohmann::json(ulysses) : nlohmann::json(nullptr)},
               {"ring", ring ? nlohmann::json(ring) : nlohmann::json(nullptr)},
               {"placement", placement_name(placement)},
               {"all", mesh_all},
               // usp's ring: its layout and level, and the double ring's inner size (0 = ranks per
               // node), so that a report says which schedule its bytes and hops come from.
               {"usp_layout", ring_layout == RingLayout::zigzag       ? "zigzag"
                              : ring_layout == RingLayout::contiguous ? "contiguous"
                                                                      : "auto"},
               {"usp_ring", usp_ring},
               {"inner_ring", inner_ring}};
  nlohmann::json docs = nullptr;
  if (!docs_spec.empty()) {
    docs = {{"spec", docs_spec}};
    if (docs_resample) docs["resample"] = true;  // lens below are pack 0's; each result's balance.resample has all
    nlohmann::json by_seq = nlohmann::json::object();
    for (int64_t n : seqs) by_seq[std::to_string(n)] = resolve_doc_lens(docs_spec, n, seed);
    if (seqs.size() == 1) docs["lens"] = by_seq.begin().value();
    docs["lens_by_seq"] = by_seq;
  }
  j["mask"] = {{"causal", causal}, {"window", window}, {"docs", docs}};
  return j;
}

}  // namespace cpbench
