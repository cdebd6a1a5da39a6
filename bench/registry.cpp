// The strategy registry: one line per strategy. Order is the order of reports and tables.
#include <sstream>

#include "bench/strategy.h"

namespace cpbench {

std::unique_ptr<Strategy> make_single();
std::unique_ptr<Strategy> make_megatron_sp();
std::unique_ptr<Strategy> make_ulysses();
std::unique_ptr<Strategy> make_ring();
std::unique_ptr<Strategy> make_ring_zigzag();
std::unique_ptr<Strategy> make_ring_striped();
std::unique_ptr<Strategy> make_usp();
std::unique_ptr<Strategy> make_allgather_kv();

const std::vector<StrategyInfo>& strategy_registry() {
  static const std::vector<StrategyInfo> reg = {
      {"single", "Reference: every rank computes the whole layer on the whole sequence.\n"
                 "Nothing travels; the strong-scaling baseline.",
       "none", make_single},
      {"megatron-sp", "Megatron-LM tensor + sequence parallelism: all-gather xn, head-sharded QKV,\n"
                      "attention and w_o, reduce-scatter back to token shards; weights sharded.",
       "P divides heads and kv_heads; P divides seq", make_megatron_sp},
      {"ulysses", "DeepSpeed Ulysses: all-to-all q,k,v from token shards to head shards,\n"
                  "attention on the full sequence for H/P heads, all-to-all o back.",
       "P divides heads and kv_heads; P divides seq", make_ulysses},
      {"ring", "Ring attention on contiguous token shards: K,V circulate P-1 hops, dK,dV\n"
               "accumulators P hops back to their owner; causal work is imbalanced.",
       "P divides seq", make_ring},
      {"ring-zigzag", "Ring attention with rank r holding chunks r and 2P-1-r of 2P:\n"
                      "the causal work is balanced (ring-flash-attention, Llama 3).",
       "2P divides seq", make_ring_zigzag},
      {"ring-striped", "Ring attention with token t on rank t mod P (Striped Attention):\n"
                       "the causal work is balanced without reordering chunks.",
       "P divides seq", make_ring_striped},
      {"usp", "Unified sequence parallelism: Ulysses all-to-all inside U groups, ring attention\n"
              "(zigzag when causal) across R groups; U x R = P (--ulysses, --ring, --mesh all).",
       "U divides heads and kv_heads; U*R = P; 2P divides seq (zigzag) or P divides seq", make_usp},
      {"allgather-kv", "Llama 3 context parallelism: all-gather K,V, attention of the zigzag query\n"
                       "chunks against the whole sequence; bwd re-gathers and reduce-scatters dK,dV.",
       "2P divides seq", make_allgather_kv},
  };
  return reg;
}

const StrategyInfo* find_strategy(const std::string& name) {
  for (const auto& s : strategy_registry())
    if (s.name == name) return &s;
  return nullptr;
}

MeshSpec Strategy::resolve_mesh(const MeshSpec& requested, const LayerShape&, int P) const {
  MeshSpec m;
  m.U = 1;
  m.R = P;
  m.placement = requested.placement;
  return m;
}

int max_ulysses_degree(int P, const LayerShape& s) {
  for (int u = P; u > 1; --u)
    if (P % u == 0 && s.H % u == 0 && s.G % u == 0) return u;
  return 1;
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
