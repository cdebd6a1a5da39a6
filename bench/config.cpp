#include "bench/config.h"

#include <sstream>
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

LayerShape RunConfig::shape(int64_t N) const {
  LayerShape s;
  s.B = batch; s.N = N; s.H = heads; s.G = kv_heads; s.d = head_dim; s.D = dim;
  s.causal = causal; s.rope = rope; s.dtype = parse_dtype(dtype);
  return s;
}

namespace {

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

[[noreturn]] void bad(const std::string& origin, const std::string& key, const std::string& what) {
  throw std::invalid_argument(origin + ": '" + key + "' " + what);
}

int64_t get_int(const nlohmann::json& v, const std::string& origin, const std::string& key) {
  if (!v.is_number_integer()) bad(origin, key, "must be an integer, got " + v.dump());
  return v.get<int64_t>();
}
bool get_bool(const nlohmann::json& v, const std::string& origin, const std::string& key) {
  if (!v.is_boolean()) bad(origin, key, "must be true or false, got " + v.dump());
  return v.get<bool>();
}
std::string get_str(const nlohmann::json& v, const std::string& origin, const std::string& key) {
  if (!v.is_string()) bad(origin, key, "must be a string, got " + v.dump());
  return v.get<std::string>();
}

}  // namespace

void apply_settings(RunConfig& c, const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw std::invalid_argument(origin + ": expected a JSON object");
  // A layer that names the mesh replaces the mesh of the layers below it: --ulysses/--ring on
  // the command line override a preset's "mesh": "all" and the reverse. Both in one layer stay a
  // conflict (finalize_config reports it).
  const bool sets_degrees = j.contains("ulysses") || j.contains("ring");
  const bool sets_all = j.contains("mesh");
  if (sets_degrees && !sets_all) c.mesh_all = false;
  if (sets_all && !sets_degrees) c.ulysses = c.ring = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "model") c.model = get_str(v, origin, k);
    else if (k == "batch") c.batch = get_int(v, origin, k);
    else if (k == "seq") {
      c.seqs.clear();
      if (v.is_number_integer()) c.seqs.push_back(v.get<int64_t>());
      else if (v.is_array() && !v.empty()) {
        for (const auto& e : v) c.seqs.push_back(get_int(e, origin, k));
      } else bad(origin, k, "must be an integer or a non-empty list of integers, got " + v.dump());
    }
    else if (k == "heads") c.heads = int(get_int(v, origin, k));
    else if (k == "kv_heads") c.kv_heads = int(get_int(v, origin, k));
    else if (k == "head_dim") c.head_dim = int(get_int(v, origin, k));
    else if (k == "dim") c.dim = int(get_int(v, origin, k));
    else if (k == "causal") c.causal = get_bool(v, origin, k);
    else if (k == "rope") c.rope = get_bool(v, origin, k);
    else if (k == "strategies") {
      if (v.is_string()) c.strategies = split_csv(v.get<std::string>());
      else if (v.is_array()) {
        c.strategies.clear();
        for (const auto& e : v) c.strategies.push_back(get_str(e, origin, k));
      } else bad(origin, k, "must be a list of names or a comma-separated string, got " + v.dump());
      c.strategies_explicit = !c.strategies.empty();
    }
    else if (k == "ulysses") c.ulysses = int(get_int(v, origin, k));
    else if (k == "ring") c.ring = int(get_int(v, origin, k));
    else if (k == "placement") {
      try { c.placement = parse_placement(get_str(v, origin, k)); }
      catch (const std::invalid_argument&) { bad(origin, k, "must be ulysses-inner or ring-inner, got " + v.dump()); }
    }
    else if (k == "mesh") {
      const std::string m = get_str(v, origin, k);
      if (m != "all") bad(origin, k, "must be \"all\" (set the mesh with ulysses and ring), got " + v.dump());
      c.mesh_all = true;
    }
    else if (k == "usp_layout") {
      const std::string m = get_str(v, origin, k);
      if (m == "zigzag") c.ring_layout = RingLayout::zigzag;
      else if (m == "contiguous") c.ring_layout = RingLayout::contiguous;
      else if (m == "auto") c.ring_layout = RingLayout::auto_;
      else bad(origin, k, "must be auto, zigzag or contiguous, got " + v.dump());
    }
    else if (k == "warmup") c.warmup = int(get_int(v, origin, k));
    else if (k == "iters") c.iters = int(get_int(v, origin, k));
    else if (k == "seed") c.seed = uint64_t(get_int(v, origin, k));
    else if (k == "threads") c.threads = int(get_int(v, origin, k));
    else if (k == "backend") c.backend = get_str(v, origin, k);
    else if (k == "comm") c.comm = get_str(v, origin, k);
    else if (k == "dtype") c.dtype = get_str(v, origin, k);
    else if (k == "out") c.out = get_str(v, origin, k);
    else if (k == "trace") c.trace = get_str(v, origin, k);
    else if (k == "dump") c.dump = get_str(v, origin, k);
    else if (k == "peak_tflops") {
      if (!v.is_number()) bad(origin, k, "must be a number, got " + v.dump());
      c.peak_tflops = v.get<double>();
    }
    else if (k == "progress") c.progress = get_bool(v, origin, k);
    else
      throw std::invalid_argument(origin + ": unknown key '" + k +
                                  "' (known: model, batch, seq, heads, kv_heads, head_dim, dim, causal, rope, "
                                  "strategies, ulysses, ring, placement, mesh, usp_layout, warmup, iters, seed, "
                                  "threads, backend, comm, dtype, out, trace, dump, peak_tflops, progress)");
  }
}

void finalize_config(RunConfig& c, int P) {
  const ModelPreset* m = find_model(c.model);
  if (!m) {
    std::string names;
    for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
    throw std::invalid_argument("unknown model preset '" + c.model + "' (presets: " + names + ")");
  }
  if (c.heads == 0) c.heads = m->heads;
  if (c.kv_heads == 0) c.kv_heads = m->kv_heads;
  if (c.head_dim == 0) c.head_dim = m->head_dim;
  if (c.dim == 0) c.dim = m->dim;
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
  if (c.seqs.empty()) throw std::invalid_argument("no sequence length given (--seq)");
  for (int64_t n : c.seqs) positive("seq", n);
  if (c.heads % c.kv_heads != 0)
    throw std::invalid_argument("kv_heads=" + std::to_string(c.kv_heads) + " must divide heads=" +
                                std::to_string(c.heads));
  if (c.head_dim > 256)
    throw std::invalid_argument("head_dim=" + std::to_string(c.head_dim) + " exceeds the supported maximum 256");
  if (c.peak_tflops < 0) throw std::invalid_argument("peak_tflops must be positive");
  parse_dtype(c.dtype);  // throws on an unknown name
  if (c.backend == "cpu" && c.dtype != "fp32")
    throw std::invalid_argument("backend cpu computes in fp32 only, got dtype=" + c.dtype);
  if (c.comm != "mpi" && c.comm != "nccl")
    throw std::invalid_argument("comm must be mpi or nccl, got '" + c.comm + "'");
  if (c.backend == "cpu" && c.comm == "nccl")
    throw std::invalid_argument("comm nccl needs backend cuda (got backend=cpu)");
  for (const auto& s : c.strategies)
    if (!find_strategy(s)) {
      std::string names;
      for (const auto& i : strategy_registry()) names += (names.empty() ? "" : ", ") + i.name;
      throw std::invalid_argument("unknown strategy '" + s + "' (strategies: " + names + ")");
    }
  if (c.strategies.empty())
    for (const auto& i : strategy_registry()) c.strategies.push_back(i.name);
  if (c.mesh_all && (c.ulysses || c.ring))
    throw std::invalid_argument("--mesh all enumerates every U x R; do not also give --ulysses/--ring");
  (void)P;
}

nlohmann::json RunConfig::to_json(int world_size) const {
  nlohmann::json j;
  j["command"] = command;
  j["model"] = model;
  j["batch"] = batch;
  j["heads"] = heads;
  j["kv_heads"] = kv_heads;
  j["head_dim"] = head_dim;
  j["dim"] = dim;
  j["causal"] = causal;
  j["rope"] = rope;
  j["dtype"] = dtype;
  j["backend"] = backend;
  j["comm"] = comm;
  j["threads"] = threads;
  j["world_size"] = world_size;
  j["seqs"] = seqs;
  j["warmup"] = warmup;
  j["iters"] = iters;
  j["seed"] = seed;
  j["strategies"] = strategies;
  j["mesh"] = {{"ulysses", ulysses ? nlohmann::json(ulysses) : nlohmann::json(nullptr)},
               {"ring", ring ? nlohmann::json(ring) : nlohmann::json(nullptr)},
               {"placement", placement_name(placement)},
               {"all", mesh_all}};
  return j;
}

}  // namespace cpbench
