// Layout changes around all-to-all exchanges (Ulysses, USP): pack per-peer chunks, place what
// arrives; and around all_gather / reduce_scatter (allgather-kv, megatron-sp): rank-ordered
// chunks <-> natural token order. All are copy_2d calls on the backend, so they run on either
// backend. At the end, host-side helpers for exporting head-sliced results.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace cpbench {

// How one tensor's heads are split over the g members of an exchange: member j takes heads
// [first[j], first[j] + count[j]) of `heads`. Ranges may overlap: under --uneven-heads a KV head
// whose query heads straddle two members goes to both (ulysses_level.h).
struct HeadSplit {
  int heads = 0;
  std::vector<int> first, count;
  int members() const { return static_cast<int>(first.size()); }
  static HeadSplit even(int heads, int g);  // member j: [j*heads/g, (j+1)*heads/g), g divides heads
};

// A tensor on the tokens side of an exchange, [B, T, split->heads, d], and how its heads split
// (the split outlives the call: the Ulysses level keeps its splits from setup). `width`: its
// elements per head when they are not the call's d (MLA's v and o: d_v); 0 = d.
struct HeadTensor {
  Tensor* t;
  const HeadSplit* split;
  int width = 0;
  int64_t head_elems(int d) const { return width > 0 ? width : d; }
};
// A tensor on the sequence side, [B, g*T, heads, d]: the heads this member takes (`width` as above).
struct SeqTensor {
  Tensor* t;
  int heads;
  int width = 0;
  int64_t head_elems(int d) const { return width > 0 ? width : d; }
};

// Elements of each member's chunk on the tokens side (B*T rows of its heads of every tensor).
std::vector<int64_t> chunk_elems(const std::vector<HeadTensor>& ts, int64_t B, int64_t T, int d);

// Tokens -> heads, before the forward all-to-all. Each src is [B, T, heads_i, d]; send becomes
// the g chunks one after another (chunk_elems), chunk j [B, T, sum_i count_i[j] * d] holding
// member j's heads of every tensor, concatenated (tensor 0 first).
void pack_heads_to_peers(Backend& be, const std::vector<HeadTensor>& src, int64_t B, int64_t T, int d, Tensor& send);

// Tokens -> heads, after the forward all-to-all.
// recv is [g, B, T, sum_i(heads_i) * d] (chunk j from group rank j, holding that rank's T
// tokens of this member's heads); each dst is [B, g*T, heads_i, d]. Peer j's tokens are `nseg`
// equal segments (1: contiguous; 2: zigzag halves); segment s of peer j lands at token
// s*(g*T/nseg) + j*(T/nseg), so that the gathered sequence is in position order.
void unpack_peers_to_sequence(Backend& be, const Tensor& recv, int64_t B, int64_t T, int d, int g,
                              int nseg, const std::vector<SeqTensor>& dst);

// Heads -> tokens, before the backward-direction all-to-all (inverse of the unpack above).
// Each src is [B, g*T, heads_i, d]; send becomes [g, B, T, sum_i(heads_i) * d] where chunk j
// holds peer j's tokens.
void pack_sequence_to_peers(Backend& be, const std::vector<SeqTensor>& src, int64_t B, int64_t T,
                            int d, int g, int nseg, Tensor& send);

// Heads -> tokens, after that all-to-all (inverse of pack_heads_to_peers): recv holds the g
// chunks one after another (chunk_elems); member j's heads land in each dst [B, T, heads_i, d]
// at [first_i[j], first_i[j] + count_i[j]) (ranges must not overlap here).
void unpack_peers_to_heads(Backend& be, const Tensor& recv, int64_t B, int64_t T, int d,
                           const std::vector<HeadTensor>& dst);

// ---- around all_gather / reduce_scatter -------------------------------------------------------
// How a group's ranks hold a sequence of g*T tokens (per batch row), T per rank:
//   contiguous: rank j holds [j*T, (j+1)*T)
//   zigzag:     the sequence is cut into 2g chunks of T/2; rank j holds chunks j and 2g-1-j
enum class RankChunks { contiguous, zigzag };

// all_gather result -> natural order. gathered [g, B, T, C] (chunk j from group rank j, its
// tokens in storage order) -> natural [B, g*T, C]. Same dtype. chunk_pitch: elements from chunk
// j to chunk j+1 in `gathered` (0: B*T*C); a larger pitch reads one tensor out of chunks that
// pack several (k of a gathered k|v).
void gathered_to_natural(Backend& be, const Tensor& gathered, int64_t B, int64_t T, int64_t C,
                         int g, RankChunks layout, Tensor& natural, int64_t chunk_pitch = 0);
// The inverse, before a reduce_scatter: natural [B, g*T, C] -> per-rank chunks [g, B, T, C]
// (chunk_pitch as above).
void natural_to_gathered(Backend& be, const Tensor& natural, int64_t B, int64_t T, int64_t C,
                         int g, RankChunks layout, Tensor& gathered, int64_t chunk_pitch = 0);

// ---- verification export (host) -------------------------------------------------------------------
// Adds local lse [B, hl, T] (query heads [h0, h0+hl), tokens at `pos`) into global [B, H, N].
void add_lse_rows(std::vector<float>& global, const std::vector<float>& local, int64_t B, int H,
                  int64_t N, int h0, int hl, const Positions& pos);

}  // namespace cpbench
