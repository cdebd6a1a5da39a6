// Seeded synthetic inputs. Every value is a pure function of (seed, tensor, global index), so
// each rank generates exactly its shard, in any layout, without materialising the global tensor,
// and `single` sees the same numbers as every sharded strategy.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace cpbench {

enum class InputId : uint64_t { x = 1, norm_w = 2, w_qkv = 3, w_o = 4, dy = 5, norm2_w = 6, w_gate = 7, w_up = 8, w_down = 9,
                            k_cache = 10, v_cache = 11,  // --cached: the seeded KV cache
                            sinks = 12,                  // --sinks: the logit of each query head
                            // --attention mla: its projections (bench/block/mla.h)
                            w_dq = 13, q_norm_w = 14, w_uq = 15, w_qr = 16, w_dkv = 17, kv_norm_w = 18, w_kr = 19,
                            w_uk = 20, w_uv = 21 };

// Uniform in [-1, 1) from a counter-based hash (splitmix64).
float input_uniform(uint64_t seed, InputId id, uint64_t index);

// Scale and offset of each input: value = offset + scale * uniform.
struct InputLaw {
  float scale, offset;
};
// F: the MLP's width; fan_in: an MLA projection's input width (its rows).
InputLaw input_law(InputId id, int64_t D, int64_t Hd, int64_t F = 0, int64_t fan_in = 0);

// Rows of a global [B, N, C] tensor at token positions `pos` (for every batch row), columns
// [c0, c0 + nc): returns [B, pos.count(), nc] in that order.
std::vector<float> input_token_rows(uint64_t seed, InputId id, int64_t B, int64_t N, int64_t C,
                                    const Positions& pos, int64_t c0, int64_t nc, InputLaw law);

// A block of a global [rows, cols] weight: rows [r0, r0+nr), columns [c0, c0+nc) -> [nr, nc].
std::vector<float> input_matrix_block(uint64_t seed, InputId id, int64_t cols, int64_t r0,
                                      int64_t nr, int64_t c0, int64_t nc, InputLaw law);

// Uploads the values draw() returns (one of the above) into t, or draws nothing where the
// backend keeps no data: the simulator drops uploads, and drawing every simulated rank's inputs
// in its one process (SMPI) would take the host's memory at 1M tokens.
template <class Draw>
void upload_seeded(Backend& be, Draw&& draw, Tensor& t) {
  if (be.keeps_data()) be.upload(draw(), t);
}

// Adds local rows [B, T, nc] (tokens at `pos`) into a global [B, N, C] array at columns c0...
void add_token_rows(std::vector<float>& global, const std::vector<float>& local, int64_t B,
                    int64_t N, int64_t C, const Positions& pos, int64_t c0, int64_t nc);

}  // namespace cpbench
