// The strategy registry: one line per strategy. Order is the order of reports and tables.
#include <sstream>

#include "bench/strategy.h"

namespace cpbench {

std::unique_ptr<Strategy> make_single();
std::unique_ptr<Strategy> make_ulysses();

const std::vector<StrategyInfo>& strategy_registry() {
  static const std::vector<StrategyInfo> reg = {
      {"single", "Reference: every rank computes the whole layer on the whole sequence.\n"
                 "Nothing travels; the strong-scaling baseline.",
       "none", make_single},
      {"ulysses", "DeepSpeed Ulysses: all-to-all q,k,v from token shards to head shards,\n"
                  "attention on the full sequence for H/P heads, all-to-all o back.",
       "P divides heads and kv_heads; P divides seq", make_ulysses},
  };
  return reg;
}

const StrategyInfo* find_strategy(const std::string& name) {
  for (const auto& s : strategy_registry())
    if (s.name == name) return &s;
  return nullptr;
}

MeshSpec Strategy::resolve_mesh(const MeshSpec& requested, int P) const {
  MeshSpec m;
  m.U = 1;
  m.R = P;
  m.placement = requested.placement;
  return m;
}

std::vector<std::string> dump_tensor_names() {
  return {"x", "norm_w", "w_qkv", "w_o", "dy", "y", "dx", "dnorm_w", "dw_qkv", "dw_o",
          "q", "k",      "v",     "o",   "do", "dq", "dk", "dv",     "lse"};
}

std::vector<int64_t> global_tensor_shape(const std::string& n, const LayerShape& s) {
  const int64_t Hd = int64_t(s.H) * s.d;
  if (n == "x" || n == "dy" || n == "y" || n == "dx") return {s.B, s.N, s.D};
  if (n == "norm_w" || n == "dnorm_w") return {s.D};
  if (n == "w_qkv" || n == "dw_qkv") return {s.D, s.qkv_cols()};
  if (n == "w_o" || n == "dw_o") return {Hd, s.D};
  if (n == "q" || n == "o" || n == "do" || n == "dq") return {s.B, s.N, s.H, s.d};
  if (n == "k" || n == "v" || n == "dk" || n == "dv") return {s.B, s.N, s.G, s.d};
  if (n == "lse") return {s.B, s.H, s.N};
  throw std::invalid_argument("unknown tensor '" + n + "'");
}

}  // namespace cpbench
