// Balanced layouts of packed documents (DESIGN "Balancing packed documents"): `--balance
// doc-zigzag|greedy` replaces a ring strategy's static layout by a map of every document token to
// a ring position. Positions stay global, so the mask, RoPE, the kernels and the dump read the
// layout through Positions and nothing else changes.
//
//   doc-zigzag: every document is cut into 2R chunks and position r takes chunks r and 2R-1-r
//               (TransformerEngine THD, ring-flash-attention varlen). Chunk sizes differ by at most
//               one token: a document's remainder tokens go round robin over the positions with a
//               cursor carried from one document to the next, so every position holds N/R tokens.
//   greedy:     the same chunks, in decreasing visible-pair order, each to the position with the
//               least work so far that has room (longest-processing-time first); a chunk larger
//               than the room is split there and its rest goes on to the next position.
//   dynamic:    each document of length L gets a CP group of c = min(R, next power of two of
//               ceil(L / cap)) positions (cap = --cp-cap, default N/R tokens per position); the
//               groups of size c are the aligned blocks [g*c, (g+1)*c) that fit in R. Documents go,
//               largest work first, to the group of their size whose busiest member would be the
//               least busy after taking it (work = the FLOPs of its tokens: GEMM rows and visible
//               pairs), cut into that group's 2c doc-zigzag chunks. Positions hold different
//               token counts; c = 1 documents never leave their rank. A position stores its tokens
//               by group size (1 first, then 2, 4, ...), so each group's rows are one range.
//
// The layout's own model (visible pairs per position, the ring's K_eff) is computed here from the
// token runs in closed form: it shares no code with the strategy, which derives its hops from
// Positions and the kernels' mask (RingCore::effective_hops). Reports compare the two through
// bytes = model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench/strategy.h"

namespace cpbench {

// Tokens [start, start + count) (global positions) of document `doc`.
struct TokenRun {
  int64_t start = 0, count = 0;
  int doc = 0;
  int group = 0;  // dynamic: its document's CP group size c (0 under the other schemes)
};

// dynamic: the aligned group of c positions that position j belongs to, [first, first + c); a
// position past the last whole group (R not a multiple of c) has none (c = 0).
struct DynamicGroup {
  int first = 0, c = 0;
  int member(int j) const { return j - first; }
};
DynamicGroup dynamic_group_of(int j, int c, int R);

class TokenLayout {
 public:
  // The layout of s's documents (one document when s has none) over R ring positions. Needs
  // R | N (not under dynamic). scheme: doc-zigzag, greedy or dynamic.
  static TokenLayout build(BalanceScheme scheme, const LayerShape& s, int R);

  int positions() const { return int(runs_.size()); }
  const std::vector<TokenRun>& runs(int j) const { return runs_[size_t(j)]; }
  // Ring position j's tokens in storage order (= position order), adjacent runs merged.
  Positions positions_of(int j) const;
  // Query-key pairs the mask lets position j's queries see (over the whole sequence).
  int64_t visible_pairs(int j) const;
  // Some query of position q sees some key of position k (interval arithmetic on the runs).
  bool sees(int q, int k) const;
  // DESIGN's ring hop truncation computed from the runs: the farthest hop k (1..R-1) at which
  // position r receives the keys of r-k and some query of r sees one of them; 0 if none.
  int ring_hops() const;

  // ---- dynamic ----------------------------------------------------------------------------------
  // The CP group size of every document, in document order (all 0 under the other schemes).
  const std::vector<int>& doc_groups() const { return doc_group_; }
  // The group sizes c > 1 some document has, ascending: the rings a step runs, one after another.
  std::vector<int> ring_groups() const;
  // Position j's tokens of documents with group size c, in storage order, and their count.
  Positions positions_of(int j, int c) const;
  int64_t tokens_of(int j, int c) const;
  // The model of the dynamic ring's bytes sent by position j (per layer, both passes): for each
  // group size c its group's ring, where K,V blocks of B*tokens_of(member, c) tokens of kv_row
  // elements (2*G*d: k and v) of `elem` bytes travel c-1 hops to the next member in both passes and
  // each member's float32 (`acc` bytes) dK,dV accumulator of the block it holds goes on with it
  // (c-1 sends, the last one reaching the block's owner). Closed form over the runs; shares no
  // code with the core (dynamic_ring_core.h), whose sends the comm log counts.
  CommPrediction dynamic_ring_bytes(int j, int64_t B, int64_t kv_row, int64_t elem, int64_t acc) const;

 private:
  LayerShape s_;
  std::vector<int64_t> doc_start_, doc_len_;
  std::vector<std::vector<TokenRun>> runs_;
  std::vector<int> doc_group_;
  void build_dynamic();
  // Keys one query at document offset t (document length L) sees.
  int64_t visible_keys(int64_t t, int64_t L) const;
  // Some query of run a sees some key of run b.
  bool any_visible(const TokenRun& a, const TokenRun& b) const;
};

// Every position's tokens under s.balance over R positions (TokenLayout::build(...).positions_of
// for each), built once per (scheme, shape, R) and kept: the strategies ask for them at setup, at
// every hop schedule and for every rank's positions. The one place a strategy gets its layout.
const std::vector<Positions>& balanced_positions(const LayerShape& s, int R);

}  // namespace cpbench
