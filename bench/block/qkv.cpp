#include "bench/block/qkv.h"

#include <stdexcept>
#include <string>

namespace cpbench {

void rope_and_split_qkv(Backend& be, const QkvLayout& l, bool rope, const Positions& pos,
                        double theta, Tensor& qkv, Tensor& q, Tensor& k, Tensor& v) {
  const int64_t rows = l.B * l.T, C = l.cols(), Hd = int64_t(l.hq) * l.d, Gd = int64_t(l.hk) * l.d;
  if (rope) {
    Tensor qpart = qkv.view(0, {qkv.numel()});
    Tensor kpart = qkv.view(Hd, {qkv.numel() - Hd});
    be.rope(qpart, l.B, l.T, l.hq, l.d, C, pos, theta, false, l.docs);
    be.rope(kpart, l.B, l.T, l.hk, l.d, C, pos, theta, false, l.docs);
  }
  be.copy_2d(q, Hd, qkv, C, rows, Hd);
  be.copy_2d(k, Gd, qkv.view(Hd, {qkv.numel() - Hd}), C, rows, Gd);
  be.copy_2d(v, Gd, qkv.view(Hd + Gd, {qkv.numel() - Hd - Gd}), C, rows, Gd);
}

void merge_and_unrope_dqkv(Backend& be, const QkvLayout& l, bool rope, const Positions& pos,
                           double theta, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                           Tensor& dqkv) {
  const int64_t rows = l.B * l.T, C = l.cols(), Hd = int64_t(l.hq) * l.d, Gd = int64_t(l.hk) * l.d;
  be.copy_2d(dqkv, C, dq, Hd, rows, Hd);
  Tensor dk_dst = dqkv.view(Hd, {dqkv.numel() - Hd});
  be.copy_2d(dk_dst, C, dk, Gd, rows, Gd);
  Tensor dv_dst = dqkv.view(Hd + Gd, {dqkv.numel() - Hd - Gd});
  be.copy_2d(dv_dst, C, dv, Gd, rows, Gd);
  if (rope) {
    Tensor qpart = dqkv.view(0, {dqkv.numel()});
    be.rope(qpart, l.B, l.T, l.hq, l.d, C, pos, theta, true, l.docs);
    be.rope(dk_dst, l.B, l.T, l.hk, l.d, C, pos, theta, true, l.docs);
  }
}

const Tensor& in_dtype(Backend& be, DType dt, const Tensor& acc, Tensor& scratch) {
  if (dt == DType::f32) return acc;
  be.convert(scratch, acc);
  return scratch;
}

Tensor reuse_as(const Tensor& arena, DType dt, std::vector<int64_t> shape, size_t byte_offset) {
  Tensor t;
  t.holder = arena.holder;
  t.dtype = dt;
  t.kind = arena.kind;
  t.shape = std::move(shape);
  if (byte_offset + t.bytes() > arena.bytes())
    throw std::logic_error("reuse_as: " + std::to_string(t.bytes()) + " bytes at offset " +
                           std::to_string(byte_offset) + " do not fit a buffer of " +
                           std::to_string(arena.bytes()) + " bytes");
  t.data = static_cast<char*>(arena.data) + byte_offset;
  return t;
}

}  // namespace cpbench
