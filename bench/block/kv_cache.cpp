#include "bench/block/kv_cache.h"

#include <algorithm>
#include <stdexcept>

#include "bench/block/block.h"
#include "bench/inputs.h"

namespace cpbench {

void KvCache::setup(TensorRegistry& reg, Backend& be, uint64_t seed, const LayerShape& s, const Positions& cached,
                    int64_t extra, const std::vector<int64_t>& heads) {
  const int64_t Cr = cached.count(), nk = Cr + extra, hn = int64_t(heads.size()), Gd = int64_t(s.G) * s.d;
  const int64_t Hd = int64_t(s.H) * s.d, row = hn * s.d;
  cached_ = Cr;
  latent_ = s.latent_cache();
  // (upload_seeded: the simulator keeps no data, so a 1M-token cache is not drawn for it)
  if (latent_) {  // one latent row per token, seeded as a prefill's [c_kv | k_R] would stand
    const int64_t w = s.latent_width();
    k_ = reg.add("k_cache", {s.B, nk, 1, w}, s.dtype, Held::activation);
    v_ = k_;
    upload_seeded(be, [&] {
      const std::vector<float> rows =
          input_token_rows(seed, InputId::k_cache, s.B, s.pass.cached, w, cached, 0, w, input_law(InputId::k_cache, s.D, Hd));
      std::vector<float> full(static_cast<size_t>(s.B * nk * w), 0.0f);
      for (int64_t b = 0; b < s.B; ++b)
        std::copy_n(&rows[static_cast<size_t>(b * Cr * w)], Cr * w, &full[static_cast<size_t>(b * nk * w)]);
      return full;
    }, k_);
    return;
  }
  k_ = reg.add("k_cache", {s.B, nk, hn, s.d}, s.dtype, Held::activation);
  v_ = reg.add("v_cache", {s.B, nk, hn, s.d}, s.dtype, Held::activation);
  // Runs of consecutive original heads are drawn together (one draw for a contiguous shard).
  auto draw = [&](InputId id) {
    std::vector<float> full(static_cast<size_t>(s.B * nk * row), 0.0f);
    for (int64_t c = 0; c < hn;) {
      int64_t run = 1;
      while (c + run < hn && heads[size_t(c + run)] == heads[size_t(c)] + run) ++run;
      const int64_t w = run * s.d;
      const std::vector<float> rows = input_token_rows(seed, id, s.B, s.pass.cached, Gd, cached, heads[size_t(c)] * s.d, w,
                                                       input_law(id, s.D, Hd));
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < Cr; ++t)
          std::copy_n(&rows[static_cast<size_t>((b * Cr + t) * w)], w,
                      &full[static_cast<size_t>((b * nk + t) * row + c * s.d)]);
      c += run;
    }
    return full;
  };
  upload_seeded(be, [&] { return draw(InputId::k_cache); }, k_);
  upload_seeded(be, [&] { return draw(InputId::v_cache); }, v_);
  if (s.fp8) {  // an fp8 cache: the shard quantized once (its new rows are zero here, no part of an amax)
    be.quantize_fp8(k_, s.fp8_scaling);
    be.quantize_fp8(v_, s.fp8_scaling);
  }
}

void KvCache::write(Backend& be, const Tensor& k, const Tensor& v, int64_t first, int h0) {
  const int64_t B = k_.shape[0], nk = k_.shape[1], hn = k_.shape[2], d = k_.shape[3];
  const int64_t n = k.shape[1], src_heads = k.shape[2];
  if (n != 1 && (h0 != 0 || src_heads != hn))
    throw std::logic_error("KvCache::write: several rows of a part of the heads");
  // Per batch row, n * hn * d elements from head h0 of the source rows into rows [first, +n).
  const int64_t row = n * hn * d, pitch = nk * hn * d, src_pitch = n * src_heads * d, c0 = int64_t(h0) * d;
  const int64_t tail = (B - 1) * pitch + row, src_tail = (B - 1) * src_pitch + row;
  Tensor kd = k_.view(first * hn * d, {tail}), vd = v_.view(first * hn * d, {tail});
  be.copy_2d(kd, pitch, k.view(c0, {src_tail}), src_pitch, B, row);
  be.copy_2d(vd, pitch, v.view(c0, {src_tail}), src_pitch, B, row);
}

void KvCache::write_latent(Backend& be, const Tensor& latent, int64_t first) {
  const int64_t B = k_.shape[0], nk = k_.shape[1], w = k_.shape[3];
  if (latent.numel() != B * w) throw std::logic_error("KvCache::write_latent: one step's B latent rows expected");
  Tensor kd = k_.view(first * w, {(B - 1) * nk * w + w});
  be.copy_2d(kd, nk * w, latent, w, B, w);
}

int64_t KvCache::held_bytes() const {
  if (empty()) return 0;
  if (latent_) return k_.shape[0] * cached_ * k_.shape[3] * int64_t(dtype_size(k_.dtype));  // the latent
  return 2 * k_.shape[0] * cached_ * k_.shape[2] * k_.shape[3] * int64_t(dtype_size(k_.dtype));
}

}  // namespace cpbench
