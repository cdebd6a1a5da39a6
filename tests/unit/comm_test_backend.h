// A minimal Backend for the communicator tests: memory and raw copies only (no compute).
// With device_like = true it pretends to hold device memory: device_memory() is true and the
// bytes it stores are XOR-ed with a key (give each rank its own), so a communicator that moved or
// reduced the "device" bytes directly (instead of staging through copy_to_host_raw /
// copy_from_host_raw) delivers garbage and the tests see it. The compute operations throw: the comm tests must not need them.
#pragma once
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace cpbench {
namespace testing {

class CommTestBackend final : public Backend {
 public:
  explicit CommTestBackend(bool device_like, unsigned char key = 0xff)
      : device_like_(device_like), key_(key ? key : 0xff) {}
  std::string name() const override { return device_like_ ? "comm-test-device" : "comm-test-host"; }
  std::string device_name() const override { return "none"; }

  Tensor alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) override {
    Tensor t;
    t.dtype = dtype;
    t.kind = kind;
    t.shape = std::move(shape);
    const size_t bytes = t.bytes();
    void* p = std::malloc(bytes ? bytes : 1);
    if (!p) throw std::bad_alloc();
    t.holder = std::shared_ptr<void>(p, std::free);
    t.data = p;
    return t;
  }

  // fp32 only (the tests build 16-bit data through the raw copies).
  void upload(const std::vector<float>& host, Tensor& dst) override {
    if (dst.dtype != DType::f32 || host.size() != static_cast<size_t>(dst.numel()))
      throw std::invalid_argument("CommTestBackend::upload: fp32 of matching size only");
    copy_from_host_raw(dst, host.data(), dst.bytes());
  }
  std::vector<float> download(const Tensor& src) override {
    if (src.dtype != DType::f32) throw std::invalid_argument("CommTestBackend::download: fp32 only");
    std::vector<float> h(static_cast<size_t>(src.numel()));
    copy_to_host_raw(h.data(), src, src.bytes());
    return h;
  }
  bool device_memory() const override { return device_like_; }
  void copy_to_host_raw(void* dst, const Tensor& src, size_t bytes) override {
    ++to_host_calls;
    if (bytes > src.bytes()) throw std::invalid_argument("copy_to_host_raw: too many bytes");
    std::memcpy(dst, src.data, bytes);
    if (device_like_) scramble(dst, bytes);
  }
  void copy_from_host_raw(Tensor& dst, const void* src, size_t bytes) override {
    ++from_host_calls;
    if (bytes > dst.bytes()) throw std::invalid_argument("copy_from_host_raw: too many bytes");
    std::memcpy(dst.data, src, bytes);
    if (device_like_) scramble(dst.data, bytes);
  }

  Event record_event() override { return Event{nullptr, now_ms()}; }
  double elapsed_ms(const Event& a, const Event& b) override { return b.host_ms - a.host_ms; }
  void synchronize() override {}

  long to_host_calls = 0, from_host_calls = 0;

 protected:
  void do_fill(Tensor&, float) override { unused("fill"); }
  void do_copy_2d(Tensor&, int64_t, const Tensor&, int64_t, int64_t, int64_t) override { unused("copy_2d"); }
  void do_add(Tensor&, const Tensor&, const Tensor&) override { unused("add"); }
  void do_convert(Tensor&, const Tensor&) override { unused("convert"); }
  void do_gemm(bool, bool, int64_t, int64_t, int64_t, float, const Tensor&, int64_t, const Tensor&, int64_t, float,
               Tensor&, int64_t) override {
    unused("gemm");
  }
  void do_rmsnorm_fwd(const Tensor&, const Tensor&, float, int64_t, Tensor&, Tensor&) override { unused("rmsnorm_fwd"); }
  void do_rmsnorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, Tensor&, Tensor&) override {
    unused("rmsnorm_bwd");
  }
  void do_rope(Tensor&, int64_t, int64_t, int, int, int64_t, const Positions&, double, bool,
               const DocStarts&) override {
    unused("rope");
  }
  void do_attn_fwd(const AttnShape&, const Tensor&, const Tensor&, const Tensor&, const Positions&, const Positions&,
                   Tensor&, Tensor&) override {
    unused("attn_fwd");
  }
  void do_attn_merge(const AttnShape&, Tensor&, Tensor&, const Tensor&, const Tensor&) override { unused("attn_merge"); }
  void do_attn_bwd_delta(const AttnShape&, const Tensor&, const Tensor&, Tensor&) override { unused("attn_bwd_delta"); }
  void do_attn_sink_fwd(const AttnShape&, const Tensor&, Tensor&, Tensor&) override { unused("attn_sink_fwd"); }
  void do_attn_sink_bwd(const AttnShape&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) override {
    unused("attn_sink_bwd");
  }
  void do_attn_bwd(const AttnShape&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const Tensor&, const Positions&, const Positions&, Tensor&, Tensor&, Tensor&) override {
    unused("attn_bwd");
  }

 private:
  void scramble(void* p, size_t n) const {
    auto* b = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(b[i] ^ key_);
  }
  [[noreturn]] static void unused(const char* op) {
    throw std::logic_error(std::string("CommTestBackend: ") + op + " is not available in the comm tests");
  }
  bool device_like_;
  unsigned char key_;
};

}  // namespace testing
}  // namespace cpbench
