// A ring level's travel policy (--ring-pass; DESIGN "Ring travel policies"): what moves between
// the positions of a ring while each computes the block in hand. One row of kRingTravels per
// policy, its flag value and properties as data, and its functions in its own file:
//   kv     K,V blocks travel, the dK,dV accumulators follow them back (ring_core.cpp: the core's
//          own loops, the only policy with a backward);
//   q      query blocks travel with their float32 partial (o, lse), merged at every rank it
//          visits and returned to its owner (ring_travel_q.cpp; prefill);
//   q-a2a  Meta's pass-Q (arXiv:2411.01783): query blocks travel alone, each rank keeps the
//          partial it computes for each, and one exchange returns them (ring_travel_q_a2a.cpp;
//          prefill, single ring only).
// A new policy (on single rings) is a value here, its row, and its file (plus scripts/cpmodel.py's
// byte term, the schema's ring_pass enums): the flag's choices, the config, the report's name,
// `cpbench list --json`, the checks and the ring level read the table. A double ring has its own
// loops for kv and q only (DoubleRingCore; ring_schedule.h check_double_ring_loop).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/float8.h"
#include "kernels/tensor.h"

namespace cpbench {

class Backend;

// --comm-dtype (issue 42): what a K,V ring block travels as: the run dtype (default), bf16, or fp8
// e4m3 with its scales (LayerShape::fp8_scaling's granularity; kernels/float8.h's encoding). Its
// owner encodes the block once and computes on its own block as formed; every receiver decodes it.
enum class KvTransit { run, bf16, fp8 };
// Bytes of a block of `elems` values in transit: elem*elems (the run dtype, elem bytes each), 2*elems
// (bf16), or under fp8 elems e4m3 codes plus their scale bytes (block: one per 32 values; tensor: one).
int64_t kv_transit_bytes(int64_t elems, int64_t elem, KvTransit t, Fp8Scaling scaling);
// What an encoded block travels in (t != run): u8 (fp8 codes and scale bytes) or bf16.
DType kv_transit_dtype(KvTransit t);
// The owner's encoding of a k|v block `src` (run dtype) into `dst` (kv_transit_dtype, its
// kv_transit_bytes), and a receiver's decoding back (t != run): the one codec the ring core and
// allgather-kv's gathers use.
void encode_kv_transit(Backend& be, KvTransit t, Fp8Scaling scaling, const Tensor& src, Tensor& dst);
void decode_kv_transit(Backend& be, KvTransit t, Fp8Scaling scaling, const Tensor& src, Tensor& dst);


class RingCore;
struct CommPrediction;
struct RingCoreShape;
struct RingTravelBuffers;

enum class RingTravel { kv, q, q_a2a };

// What one rank of a ring level moves, for the byte model: `tokens_kv` (B x its keys per batch
// row, the cache shard included) with `kv` = its k|v elements per token (KV heads x (d + d_v);
// 2 x KV heads x d without MLA); `tokens_q` (B x its new tokens) with `hq` = query heads x d, its
// partials' `ho` = query heads x d_v and `heads` lse rows per token.
struct RingBlockSizes {
  int64_t tokens_kv = 0, kv = 0, tokens_q = 0, hq = 0, ho = 0, heads = 0;
  KvTransit transit = KvTransit::run;  // --comm-dtype: what the k|v block travels as (K,V travel)
  Fp8Scaling scaling = Fp8Scaling::block;
};

struct RingTravelPolicy {
  RingTravel id;
  const char* flag;     // its --ring-pass value and the report's inference.ring_pass
  const char* summary;  // its part of --ring-pass's help
  bool queries_travel;  // Q blocks move instead of K,V: a forward-only policy (--pass prefill)
  // nullptr: defined on a double ring's schedule (DoubleRingCore) too; else why it is not, for
  // the refusal (ring_schedule.h travel_refusal).
  const char* single_ring_only;
  // Single ring, R positions (the core set up over the ring): the buffers the policy's forward
  // needs beyond the core's own, allocated once (none for kv); its forward, `hops` in [0, R-1]
  // (-1: R-1); the bytes one rank sends per layer (DESIGN's terms, by the mesh `level`); the
  // bytes its buffers hold.
  void (*setup)(RingCore& core, RingTravelBuffers& bufs, int R);
  void (*forward)(RingCore& core, RingTravelBuffers& bufs, const Tensor& q, const Tensor& k, const Tensor& v,
                  Tensor& o, int hops);
  CommPrediction (*bytes)(const RingBlockSizes& b, int R, int64_t elem, int64_t acc, int hops,
                          const std::string& level);
  int64_t (*buffer_bytes)(const RingCoreShape& s, int R);
};

// kv (ring_core.cpp)
void travel_kv_setup(RingCore& core, RingTravelBuffers& bufs, int R);
void travel_kv_forward(RingCore& core, RingTravelBuffers& bufs, const Tensor& q, const Tensor& k, const Tensor& v,
                       Tensor& o, int hops);
CommPrediction travel_kv_bytes(const RingBlockSizes& b, int R, int64_t elem, int64_t acc, int hops,
                               const std::string& level);
int64_t travel_kv_buffer_bytes(const RingCoreShape& s, int R);
// q (ring_travel_q.cpp)
void travel_q_setup(RingCore& core, RingTravelBuffers& bufs, int R);
void travel_q_forward(RingCore& core, RingTravelBuffers& bufs, const Tensor& q, const Tensor& k, const Tensor& v,
                      Tensor& o, int hops);
CommPrediction travel_q_bytes(const RingBlockSizes& b, int R, int64_t elem, int64_t acc, int hops,
                              const std::string& level);
int64_t travel_q_buffer_bytes(const RingCoreShape& s, int R);
// q-a2a (ring_travel_q_a2a.cpp)
void travel_q_a2a_setup(RingCore& core, RingTravelBuffers& bufs, int R);
void travel_q_a2a_forward(RingCore& core, RingTravelBuffers& bufs, const Tensor& q, const Tensor& k, const Tensor& v,
                          Tensor& o, int hops);
CommPrediction travel_q_a2a_bytes(const RingBlockSizes& b, int R, int64_t elem, int64_t acc, int hops,
                                  const std::string& level);
int64_t travel_q_a2a_buffer_bytes(const RingCoreShape& s, int R);

inline const std::vector<RingTravelPolicy>& ring_travels() {
  static const std::vector<RingTravelPolicy> kRingTravels = {
      {RingTravel::kv, "kv", "K,V blocks circulate, default", false, nullptr, travel_kv_setup, travel_kv_forward,
       travel_kv_bytes, travel_kv_buffer_bytes},
      {RingTravel::q, "q", "query blocks circulate with their partial; --pass prefill, ring family", true, nullptr,
       travel_q_setup, travel_q_forward, travel_q_bytes, travel_q_buffer_bytes},
      {RingTravel::q_a2a, "q-a2a", "Meta's pass-Q: query blocks circulate, partials return in one all-to-all; single rings",
       true, "returns the partials in one exchange over a single ring", travel_q_a2a_setup, travel_q_a2a_forward,
       travel_q_a2a_bytes, travel_q_a2a_buffer_bytes},
  };
  return kRingTravels;
}

// The row of `t`; the policy whose flag is `flag` (throws std::invalid_argument naming the
// choices); the flags in table order.
const RingTravelPolicy& ring_travel(RingTravel t);
RingTravel parse_ring_travel(const std::string& flag);
std::vector<std::string> ring_travel_flags();
// --ring-pass's help: "flag (summary) | ..." in table order.
std::string ring_travel_help();

}  // namespace cpbench
