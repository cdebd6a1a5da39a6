#include "bench/numerics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention_reference.h"
#include "kernels/float16.h"

namespace cpbench {

std::vector<std::string> numerics_tensor_names(const std::vector<std::string>& exported) {
  std::vector<std::string> n;
  for (const char* t : {"o", "dq", "dk", "dv", "dsinks"})
    if (std::find(exported.begin(), exported.end(), t) != exported.end()) n.emplace_back(t);
  return n;
}

Reference64 attention_reference64(const ExportedTensors& single, const LayerShape& s, bool with_grad, World& w) {
  auto f64 = [&](const char* name) {
    const std::vector<float>& f = single.at(name);
    return std::vector<double>(f.begin(), f.end());
  };
  AttnShape a;  // the whole layer's attention, as single runs it (bench/strategies/single.cpp)
  a.B = s.B;
  a.nq = a.nk = s.N;
  a.hq = s.H;
  a.hk = s.G;
  a.d = s.d;
  a.d_v = s.d_v;
  a.causal = s.mask.causal;
  a.window = s.mask.window;
  a.docs = s.mask.docs;
  const Positions all = Positions::contiguous(0, s.N);
  const std::vector<double> sinks = s.sinks ? f64("sinks") : std::vector<double>{};
  AttnRefOptions opt;
  opt.sinks = s.sinks ? &sinks : nullptr;
  opt.part = w.rank();
  opt.parts = w.size();
  const std::vector<double> dout = with_grad ? f64("do") : std::vector<double>(size_t(s.B * s.N * s.H * s.vdim()), 0.0);
  AttnRef r = attn_reference(a, f64("q"), f64("k"), f64("v"), dout, all, all, with_grad, opt);
  Reference64 ref;
  ref["o"] = std::move(r.o);
  if (with_grad) {
    ref["dq"] = std::move(r.dq);
    ref["dk"] = std::move(r.dk);
    ref["dv"] = std::move(r.dv);
    if (s.sinks) ref["dsinks"] = std::move(r.dsinks);
  }
  for (auto& [name, v] : ref) w.allreduce_sum(v);  // each rank computed its pairs, zeros elsewhere
  return ref;
}

TensorError error_against(const std::vector<float>& got, const std::vector<double>& want) {
  TensorError e;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double diff = double(got[i]) - want[i];
    num += diff * diff;
    den += want[i] * want[i];
    e.max_abs = std::max(e.max_abs, std::isfinite(diff) ? std::abs(diff) : std::numeric_limits<double>::infinity());
  }
  e.rel_fro = got.size() != want.size() || !std::isfinite(num) ? std::numeric_limits<double>::infinity()
              : den > 0                                        ? std::sqrt(num / den)
                                                               : std::sqrt(num);
  return e;
}

std::vector<double> NumericsTensor::ratio() const {
  std::vector<double> r(rel_fro.size());
  for (size_t i = 0; i < r.size(); ++i)
    r[i] = single_rel_fro[i] > 0 ? rel_fro[i] / single_rel_fro[i] : (rel_fro[i] > 0 ? INFINITY : 1.0);
  return r;
}

namespace {

// A gradient of q, k or v as the block hands it on: rounded once to a 16-bit run dtype.
std::vector<float> handed_on(const std::string& name, const std::vector<float>& x, DType dtype) {
  std::vector<float> r = x;
  if (name != "dq" && name != "dk" && name != "dv") return r;
  if (dtype == DType::bf16)
    for (float& v : r) v = bf16_to_f32(f32_to_bf16(v));
  else if (dtype == DType::f16)
    for (float& v : r) v = f16_to_f32(f32_to_f16(v));
  return r;
}

}  // namespace

void NumericsResult::add(uint64_t seed, const std::vector<std::string>& names, const ExportedTensors& got,
                         const ExportedTensors& single, const Reference64& ref, DType dtype) {
  seeds.push_back(seed);
  for (const std::string& n : names) {
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const NumericsTensor& t) { return t.name == n; });
    if (it == tensors.end()) {
      tensors.push_back({n, {}, {}, {}});
      it = tensors.end() - 1;
    }
    const TensorError mine = error_against(handed_on(n, got.at(n), dtype), ref.at(n));
    it->rel_fro.push_back(mine.rel_fro);
    it->max_abs.push_back(mine.max_abs);
    it->single_rel_fro.push_back(error_against(handed_on(n, single.at(n), dtype), ref.at(n)).rel_fro);
  }
}

}  // namespace cpbench
