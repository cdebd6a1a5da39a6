#include "bench/dump.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "bench/inputs.h"
#include "bench/result.h"

namespace cpbench {

void write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t s : shape) dims += std::to_string(s) + ", ";
  if (shape.size() > 1) dims.erase(dims.size() - 2);  // "(a, b)" ; 1-D keeps "(a, )" -> "(a,)"
  else dims = std::to_string(shape[0]) + ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(reinterpret_cast<const char*>(magic), 8);
  const uint16_t hl = uint16_t(header.size());
  const unsigned char len[2] = {static_cast<unsigned char>(hl & 0xff), static_cast<unsigned char>(hl >> 8)};
  f.write(reinterpret_cast<const char*>(len), 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * sizeof(float)));
  if (!f) throw std::runtime_error("error writing " + path);
}

std::string dump_dir_name(const std::string& label) {
  std::string out;
  for (char c : label) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    out.push_back(keep ? c : '_');
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "_" : out;
}

void write_dump(const RunConfig& cfg, int world_size, const std::string& label, const MeshSpec& mesh,
                const LayerShape& shape, const std::map<std::string, std::vector<float>>& tensors) {
  std::string dir = cfg.dump + "/" + dump_dir_name(label);
  if (cfg.seqs.size() > 1) dir += "/seq" + std::to_string(shape.N);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir + ": " + ec.message());
  // Under --cached prefill the token tensors hold N rows of which only the N - C new ones are
  // computed: the dump keeps those (rows, or lse's columns, [C, N)). Decode's already are the S
  // new tokens. Either way the cache k, v [B, C, G, d] follow: the seeded values every strategy
  // reads (inputs.h), so a reader can recompute the layer.
  const bool prefix = shape.pass.cached > 0 && !shape.decode();
  const int64_t C = shape.pass.cached, rows = shape.token_rows(), kept = prefix ? rows - C : rows;
  for (const auto& [name, data] : tensors) {
    std::vector<int64_t> dims = global_tensor_shape(name, shape);
    const bool tokens = dims.size() >= 3 && dims[0] == shape.B && (dims[1] == rows || (name == "lse" && dims[2] == rows));
    if (!prefix || !tokens) {
      write_npy(dir + "/" + name + ".npy", data, dims);
      continue;
    }
    // [B, N, w] -> [B, N - C, w]; lse [B, H, N] -> [B, H, N - C]
    const bool lse = name == "lse";
    const int64_t outer = lse ? shape.B * dims[1] : shape.B, w = lse ? 1 : int64_t(data.size()) / (shape.B * rows);
    std::vector<float> cut(size_t(outer * kept * w));
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(&data[size_t((o * rows + C) * w)], kept * w, &cut[size_t(o * kept * w)]);
    if (lse) dims[2] = kept;
    else dims[1] = kept;
    write_npy(dir + "/" + name + ".npy", cut, dims);
  }
  if (C > 0 && shape.latent_cache()) {  // MLA's decode: the cached latents [c_kv | k_R], [B, C, r_kv + d_rope]
    const int64_t w = shape.latent_width(), Hd = int64_t(shape.H) * shape.d;
    write_npy(dir + "/latent_cache.npy",
              input_token_rows(cfg.seed, InputId::k_cache, shape.B, C, w, Positions::contiguous(0, C), 0, w,
                               input_law(InputId::k_cache, shape.D, Hd)),
              {shape.B, C, w});
  } else if (C > 0) {
    const int64_t Gd = int64_t(shape.G) * shape.d, Hd = int64_t(shape.H) * shape.d;
    for (auto [id, file] : {std::pair{InputId::k_cache, "k_cache"}, std::pair{InputId::v_cache, "v_cache"}})
      write_npy(dir + "/" + file + ".npy",
                input_token_rows(cfg.seed, id, shape.B, C, Gd, Positions::contiguous(0, C), 0, Gd, input_law(id, shape.D, Hd)),
                {shape.B, C, shape.G, shape.d});
  }
  nlohmann::json meta = {
      {"strategy", label}, {"B", shape.B}, {"N", shape.N}, {"H", shape.H}, {"G", shape.G}, {"d", shape.d},
      {"D", shape.D}, {"causal", shape.mask.causal}, {"rope", shape.rope}, {"P", world_size},
      {"mesh", mesh_json(mesh)},
      {"eps", shape.eps}, {"rope_theta", shape.rope_theta}, {"seed", cfg.seed}, {"dtype", cfg.dtype},
      {"window", shape.mask.window}, {"sinks", shape.sinks}, {"pass", shape.decode() ? "decode" : shape.prefill() ? "prefill" : "train"},
      {"block", shape.full_block ? "full" : "attn"}, {"F", shape.F},
      // --cached C: the token tensors are the new tokens, at positions C .. (prefill: N - C of
      // them; decode: decode_steps, one per step), and k_cache.npy, v_cache.npy hold the cache.
      {"cached", shape.pass.cached}, {"decode_steps", shape.pass.steps}};
  if (!shape.mask.doc_lens.empty()) meta["doc_lens"] = shape.mask.doc_lens;  // absent: one document
  if (shape.mla) {  // --attention mla: its ranks and head dims (d = d_nope + d_rope, G = H)
    const MlaDims& m = shape.mla_dims;
    meta["attention"] = "mla";
    meta["mla"] = {{"q_rank", m.q_rank}, {"kv_rank", m.kv_rank}, {"d_nope", m.d_nope}, {"d_rope", m.d_rope}, {"d_v", m.d_v},
                   {"travel", shape.mla_latent ? "latent" : "expanded"}};  // latent: no k, v, dk, dv are dumped
  }
  std::ofstream mf(dir + "/meta.json");
  mf << meta.dump(2) << "\n";
  if (!mf) throw std::runtime_error("error writing " + dir + "/meta.json");
}

}  // namespace cpbench
