#include "bench/parts/layout.h"

#include <stdexcept>

namespace cpbench {

HeadSplit HeadSplit::even(int heads, int g) {
  HeadSplit s;
  s.heads = heads;
  for (int j = 0; j < g; ++j) {
    s.first.push_back(j * (heads / g));
    s.count.push_back(heads / g);
  }
  return s;
}

namespace {
// Columns (per token row) of member j's chunk on the tokens side.
int64_t chunk_cols(const std::vector<HeadTensor>& ts, int d, int j) {
  int64_t c = 0;
  for (const auto& h : ts) c += int64_t(h.split->count.at(size_t(j))) * h.head_elems(d);
  return c;
}
// Columns per token row on the sequence side: this member's heads of every tensor.
int64_t seq_cols(const std::vector<SeqTensor>& ts, int d) {
  int64_t c = 0;
  for (const auto& h : ts) c += int64_t(h.heads) * h.head_elems(d);
  return c;
}
}  // namespace

std::vector<int64_t> chunk_elems(const std::vector<HeadTensor>& ts, int64_t B, int64_t T, int d) {
  std::vector<int64_t> n;
  for (int j = 0; j < ts.at(0).split->members(); ++j) n.push_back(B * T * chunk_cols(ts, d, j));
  return n;
}

void pack_heads_to_peers(Backend& be, const std::vector<HeadTensor>& src, int64_t B, int64_t T, int d, Tensor& send) {
  const int64_t rows = B * T;
  int64_t off = 0;  // chunk j's first element
  for (int j = 0; j < src.at(0).split->members(); ++j) {
    const int64_t cc = chunk_cols(src, d, j);
    int64_t col = 0;
    for (const auto& h : src) {
      const int64_t e = h.head_elems(d);
      const int64_t w = int64_t(h.split->count[size_t(j)]) * e, c0 = int64_t(h.split->first[size_t(j)]) * e;
      Tensor dst = send.view(off + col, {send.numel() - off - col});
      be.copy_2d(dst, cc, h.t->view(c0, {h.t->numel() - c0}), int64_t(h.split->heads) * e, rows, w);
      col += w;
    }
    off += rows * cc;
  }
}

void unpack_peers_to_sequence(Backend& be, const Tensor& recv, int64_t B, int64_t T, int d, int g,
                              int nseg, const std::vector<SeqTensor>& dst) {
  const int64_t cc = seq_cols(dst, d);
  const int64_t seg_len = T / nseg, gT = int64_t(g) * T;
  for (int j = 0; j < g; ++j)
    for (int64_t b = 0; b < B; ++b)
      for (int s = 0; s < nseg; ++s) {
        const int64_t src_row = (int64_t(j) * B + b) * T + s * seg_len;  // row in recv
        const int64_t dst_tok = b * gT + s * (gT / nseg) + j * seg_len;   // row in dst
        int64_t col = 0;
        for (const auto& h : dst) {
          const int64_t w = int64_t(h.heads) * h.head_elems(d);
          Tensor out = h.t->view(dst_tok * w, {h.t->numel() - dst_tok * w});
          be.copy_2d(out, w, recv.view(src_row * cc + col, {recv.numel() - src_row * cc - col}), cc,
                     seg_len, w);
          col += w;
        }
      }
}

void pack_sequence_to_peers(Backend& be, const std::vector<SeqTensor>& src, int64_t B, int64_t T,
                            int d, int g, int nseg, Tensor& send) {
  const int64_t cc = seq_cols(src, d);
  const int64_t seg_len = T / nseg, gT = int64_t(g) * T;
  for (int j = 0; j < g; ++j)
    for (int64_t b = 0; b < B; ++b)
      for (int s = 0; s < nseg; ++s) {
        const int64_t dst_row = (int64_t(j) * B + b) * T + s * seg_len;
        const int64_t src_tok = b * gT + s * (gT / nseg) + j * seg_len;
        int64_t col = 0;
        for (const auto& h : src) {
          const int64_t w = int64_t(h.heads) * h.head_elems(d);
          Tensor out = send.view(dst_row * cc + col, {send.numel() - dst_row * cc - col});
          be.copy_2d(out, cc, h.t->view(src_tok * w, {h.t->numel() - src_tok * w}), w, seg_len, w);
          col += w;
        }
      }
}

void unpack_peers_to_heads(Backend& be, const Tensor& recv, int64_t B, int64_t T, int d,
                           const std::vector<HeadTensor>& dst) {
  const int64_t rows = B * T;
  int64_t off = 0;
  for (int j = 0; j < dst.at(0).split->members(); ++j) {
    const int64_t cc = chunk_cols(dst, d, j);
    int64_t col = 0;
    for (const auto& h : dst) {
      const int64_t e = h.head_elems(d);
      const int64_t w = int64_t(h.split->count[size_t(j)]) * e, c0 = int64_t(h.split->first[size_t(j)]) * e;
      Tensor out = h.t->view(c0, {h.t->numel() - c0});
      be.copy_2d(out, int64_t(h.split->heads) * e, recv.view(off + col, {recv.numel() - off - col}), cc, rows, w);
      col += w;
    }
    off += rows * cc;
  }
}

namespace {
// Calls f(rank j, segment start row within the rank's T tokens, natural start token, rows) for
// every contiguous run of a rank's tokens.
template <class F>
void for_each_rank_run(int64_t T, int g, RankChunks layout, F f) {
  for (int j = 0; j < g; ++j) {
    if (layout == RankChunks::contiguous) {
      f(j, int64_t(0), int64_t(j) * T, T);
    } else {
      const int64_t c = T / 2;
      f(j, int64_t(0), int64_t(j) * c, c);
      f(j, c, int64_t(2 * g - 1 - j) * c, c);
    }
  }
}

void check_rank_chunks(const char* op, int64_t T, RankChunks layout) {
  if (layout == RankChunks::zigzag && T % 2 != 0)
    throw std::invalid_argument(std::string(op) + ": zigzag needs an even token count per rank, got T=" +
                                std::to_string(T));
}
}  // namespace

void gathered_to_natural(Backend& be, const Tensor& gathered, int64_t B, int64_t T, int64_t C,
                         int g, RankChunks layout, Tensor& natural, int64_t chunk_pitch) {
  check_rank_chunks("gathered_to_natural", T, layout);
  const int64_t gT = int64_t(g) * T, pitch = chunk_pitch ? chunk_pitch : B * T * C;
  for_each_rank_run(T, g, layout, [&](int j, int64_t row, int64_t tok, int64_t n) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t src = j * pitch + (b * T + row) * C, dst = (b * gT + tok) * C;
      Tensor out = natural.view(dst, {natural.numel() - dst});
      be.copy_2d(out, C, gathered.view(src, {gathered.numel() - src}), C, n, C);
    }
  });
}

void natural_to_gathered(Backend& be, const Tensor& natural, int64_t B, int64_t T, int64_t C,
                         int g, RankChunks layout, Tensor& gathered, int64_t chunk_pitch) {
  check_rank_chunks("natural_to_gathered", T, layout);
  const int64_t gT = int64_t(g) * T, pitch = chunk_pitch ? chunk_pitch : B * T * C;
  for_each_rank_run(T, g, layout, [&](int j, int64_t row, int64_t tok, int64_t n) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t dst = j * pitch + (b * T + row) * C, src = (b * gT + tok) * C;
      Tensor out = gathered.view(dst, {gathered.numel() - dst});
      be.copy_2d(out, C, natural.view(src, {natural.numel() - src}), C, n, C);
    }
  });
}

void add_lse_rows(std::vector<float>& global, const std::vector<float>& local, int64_t B, int H,
                  int64_t N, int h0, int hl, const Positions& pos) {
  const int64_t T = pos.count();
  if (static_cast<int64_t>(local.size()) != B * hl * T || static_cast<int64_t>(global.size()) != B * H * N ||
      h0 < 0 || h0 + hl > H)
    throw std::logic_error("add_lse_rows: size mismatch");
  const std::vector<int64_t> p = pos.list();
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < hl; ++h) {
      const float* src = &local[static_cast<size_t>((b * hl + h) * T)];
      float* dst = &global[static_cast<size_t>((b * H + h0 + h) * N)];
      for (int64_t t = 0; t < T; ++t) dst[p[static_cast<size_t>(t)]] += src[t];
    }
}

}  // namespace cpbench
