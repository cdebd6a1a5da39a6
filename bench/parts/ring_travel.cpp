#include "bench/parts/ring_travel.h"

#include <stdexcept>

#include "kernels/backend.h"

namespace cpbench {

int64_t kv_transit_bytes(int64_t elems, int64_t elem, KvTransit t, Fp8Scaling scaling) {
  switch (t) {
    case KvTransit::run: return elem * elems;
    case KvTransit::bf16: return 2 * elems;
    case KvTransit::fp8: return e4m3_encoded_bytes(elems, scaling);
  }
  return elem * elems;
}

DType kv_transit_dtype(KvTransit t) { return t == KvTransit::fp8 ? DType::u8 : DType::bf16; }

void encode_kv_transit(Backend& be, KvTransit t, Fp8Scaling scaling, const Tensor& src, Tensor& dst) {
  if (t == KvTransit::fp8) be.encode_fp8(src, dst, scaling);
  else be.convert(dst, src);
}

void decode_kv_transit(Backend& be, KvTransit t, Fp8Scaling scaling, const Tensor& src, Tensor& dst) {
  if (t == KvTransit::fp8) be.decode_fp8(src, dst, scaling);
  else be.convert(dst, src);
}

const RingTravelPolicy& ring_travel(RingTravel t) {
  for (const RingTravelPolicy& p : ring_travels())
    if (p.id == t) return p;
  throw std::logic_error("ring_travel: a RingTravel value without its row in ring_travels()");
}

std::vector<std::string> ring_travel_flags() {
  std::vector<std::string> out;
  for (const RingTravelPolicy& p : ring_travels()) out.push_back(p.flag);
  return out;
}

std::string ring_travel_help() {
  std::string h;
  for (const RingTravelPolicy& p : ring_travels())
    h += (h.empty() ? "" : " | ") + std::string(p.flag) + " (" + p.summary + ")";
  return h;
}

RingTravel parse_ring_travel(const std::string& flag) {
  std::string choices;
  for (const RingTravelPolicy& p : ring_travels()) {
    if (flag == p.flag) return p.id;
    choices += (choices.empty() ? "" : "|") + std::string(p.flag);
  }
  throw std::invalid_argument("--ring-pass: unknown value '" + flag + "' (choose " + choices + ")");
}

}  // namespace cpbench
