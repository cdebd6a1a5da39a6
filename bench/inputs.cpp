#include "bench/inputs.h"

#include <cmath>
#include <stdexcept>

namespace cpbench {

namespace {
// cpbench-sim: the sim backend keeps no tensor data, so inputs are not generated (the vectors
// keep their sizes, which upload checks); hashing every weight of every simulated rank would
// dominate the simulation's own run time at scale.
#ifdef CPBENCH_SIMULATED
constexpr bool kSimulated = true;
#else
constexpr bool kSimulated = false;
#endif

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

float input_uniform(uint64_t seed, InputId id, uint64_t index) {
  uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(id) * 0x632be59bd9b4e019ULL ^ index));
  // 24 random bits -> [-1, 1)
  return static_cast<float>(static_cast<double>(h >> 40) / double(1 << 23) - 1.0);
}

InputLaw input_law(InputId id, int64_t D, int64_t Hd, int64_t F, int64_t fan_in) {
  switch (id) {
    case InputId::x: return {1.0f, 0.0f};
    case InputId::norm_w: return {0.1f, 1.0f};
    case InputId::w_qkv: return {float(1.0 / std::sqrt(double(D))), 0.0f};
    case InputId::w_o: return {float(1.0 / std::sqrt(double(Hd))), 0.0f};
    case InputId::dy: return {1.0f, 0.0f};
    case InputId::norm2_w: return {0.1f, 1.0f};
    case InputId::w_gate:
    case InputId::w_up: return {float(1.0 / std::sqrt(double(D))), 0.0f};
    case InputId::w_down: return {float(1.0 / std::sqrt(double(F > 0 ? F : 1))), 0.0f};
    // The cache's roped k, v: unit-range values, the magnitude of a computed k (rmsnorm'd input
    // times a 1/sqrt(D)-scaled projection: standard deviation ~0.58, that of uniform [-1, 1)).
    case InputId::k_cache:
    case InputId::v_cache: return {1.0f, 0.0f};
    // The sinks' logits, uniform in [-1, 3): the range of a row's lse at the lengths the tests run
    // (a row of n keys with small scores has lse ~ log n), so that the sink changes every row's
    // softmax measurably, the first rows' most (a stand-in: no published distribution of trained
    // sink logits is used here).
    case InputId::sinks: return {2.0f, 1.0f};
    // MLA: the norms' weights as the block's, the projections scaled by their fan-in (xn's D, or
    // a latent's rank) so every activation keeps the unit scale of w_qkv's outputs.
    case InputId::q_norm_w:
    case InputId::kv_norm_w: return {0.1f, 1.0f};
    case InputId::w_dq:
    case InputId::w_uq:
    case InputId::w_qr:
    case InputId::w_dkv:
    case InputId::w_kr:
    case InputId::w_uk:
    case InputId::w_uv: return {float(1.0 / std::sqrt(double(fan_in > 0 ? fan_in : 1))), 0.0f};
  }
  throw std::logic_error("input_law: unknown input");
}

std::vector<float> input_token_rows(uint64_t seed, InputId id, int64_t B, int64_t N, int64_t C,
                                    const Positions& pos, int64_t c0, int64_t nc, InputLaw law) {
  const int64_t T = pos.count();
  std::vector<float> out(static_cast<size_t>(B * T * nc));
  if (kSimulated) return out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const uint64_t row = static_cast<uint64_t>((b * N + pos.at(t)) * C + c0);
      float* dst = &out[static_cast<size_t>((b * T + t) * nc)];
      for (int64_t c = 0; c < nc; ++c)
        dst[c] = law.offset + law.scale * input_uniform(seed, id, row + static_cast<uint64_t>(c));
    }
  return out;
}

std::vector<float> input_matrix_block(uint64_t seed, InputId id, int64_t cols, int64_t r0,
                                      int64_t nr, int64_t c0, int64_t nc, InputLaw law) {
  std::vector<float> out(static_cast<size_t>(nr * nc));
  if (kSimulated) return out;
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t c = 0; c < nc; ++c)
      out[static_cast<size_t>(r * nc + c)] =
          law.offset + law.scale * input_uniform(seed, id, static_cast<uint64_t>((r0 + r) * cols + c0 + c));
  return out;
}

void add_token_rows(std::vector<float>& global, const std::vector<float>& local, int64_t B,
                    int64_t N, int64_t C, const Positions& pos, int64_t c0, int64_t nc) {
  const int64_t T = pos.count();
  if (static_cast<int64_t>(local.size()) != B * T * nc || static_cast<int64_t>(global.size()) != B * N * C)
    throw std::logic_error("add_token_rows: size mismatch");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      float* dst = &global[static_cast<size_t>((b * N + pos.at(t)) * C + c0)];
      const float* src = &local[static_cast<size_t>((b * T + t) * nc)];
      for (int64_t c = 0; c < nc; ++c) dst[c] += src[c];
    }
}

}  // namespace cpbench
