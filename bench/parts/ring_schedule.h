// The schedule and travel parts of a ring level: how the blocks of a layout (ring_layout.h)
// move between the R positions, and what moves.
//
// Schedules:
//   single  one ring over the R positions (ring_core.h);
//   double  LoongTrain's double ring: inner rings of w consecutive positions, blocks hopping
//           between the R/w windows overlapped with each round (double_ring_core.h);
//   groups  --balance dynamic: one ring per CP group size, each over its group of c positions
//           (dynamic_ring_core.h; ring only, K,V travel, the whole CP group).
// Travel policies (--ring-pass): bench/parts/ring_travel.h, one row and one file each; on a
// single ring the core runs the shape's policy, a double ring runs kv or q (its own loops).
// A schedule's hops are truncated to the ones some position needs (DESIGN's ring hop
// truncation): the running ring scans the layout's positions against the mask (scan_hops); the
// byte model takes the same scan, or under --balance the balanced layout's own interval model
// (model_hops), so that bytes = model checks one against the other.
//
// Bytes (one function for every ring level, ring_level_bytes): the schedule's term for the travel
// policy: the policy's own term (ring_travel.h's `bytes`) for a single ring,
// DoubleRingCore::predicted_bytes / predicted_bytes_pass_q for a double ring, and
// TokenLayout::dynamic_ring_bytes for groups (different per rank).
#pragma once
#include <string>

#include "bench/parts/attn_sinks.h"
#include "bench/parts/ring_layout.h"
#include "bench/parts/double_ring_core.h"
#include "bench/parts/dynamic_ring_core.h"
#include "bench/parts/ring_core.h"

namespace cpbench {

enum class RingScheduleKind { single, double_, groups };

struct RingSchedule {
  RingScheduleKind kind = RingScheduleKind::single;
  int R = 1;  // positions
  int w = 0;  // double: ranks per inner ring (w | R)
  // The single ring's mesh level in the per-tier model: "cp" when the ring is the whole CP group
  // (the ring family), "ring" for usp's ring level. A double ring's levels are ring_inner and
  // ring_outer; groups' are "cp".
  std::string level = "ring";

  static RingSchedule single(int R, std::string level) { return {RingScheduleKind::single, R, 0, std::move(level)}; }
  static RingSchedule double_ring(int R, int w) { return {RingScheduleKind::double_, R, w, "ring"}; }
  static RingSchedule groups(int R) { return {RingScheduleKind::groups, R, 0, "cp"}; }
  int windows() const { return kind == RingScheduleKind::double_ ? R / w : 1; }
};

// Throws ConstraintError naming `who` when the travel policy has no schedule on this ring level
// (q-a2a's return exchange is defined for a single ring only); travel_refusal is its message
// ("" when the policy runs on the schedule).
void check_travel(const std::string& who, RingTravel travel, const RingSchedule& sch);
std::string travel_refusal(const std::string& who, RingTravel travel, const RingSchedule& sch);
// Throws ConstraintError naming `who` when the shape's --acc-dtype is not float32 on a schedule that
// keeps its accumulators float32 (the groups' own loop); precision_refusal is its message ("" when
// the schedule rounds them: a single or a double ring).
void check_precision(const std::string& who, const LayerShape& s, const RingSchedule& sch);
std::string precision_refusal(const std::string& who, const LayerShape& s, const RingSchedule& sch);
// Throws ConstraintError naming `who` when the shape's --mla-travel latent cannot run on this ring
// level (queries travel instead of K,V; a ring per CP group); latent_refusal is its message ("" when
// it runs, or without latent travel).
void check_latent(const std::string& who, const LayerShape& s, const RingSchedule& sch);
std::string latent_refusal(const std::string& who, const LayerShape& s, const RingSchedule& sch);
// A double ring has loops for kv and q only (DoubleRingCore); any other policy is a logic_error.
void check_double_ring_loop(RingTravel travel);

// The hops a schedule runs: a single ring's K_eff, or a double ring's rounds and inner hops.
// (groups run every hop of each group.)
struct RingHops {
  int single = -1;
  DoubleRingHops dbl;
};

// The running ring's hops: the layout's positions scanned against the mask.
RingHops scan_hops(const RingSchedule& sch, const RingLayoutPart& layout, const LayerShape& s);
// The byte model's hops: scan_hops, or under --balance the balanced layout's own model.
RingHops model_hops(const RingSchedule& sch, const RingLayoutPart& layout, const LayerShape& s);

// (What one rank of a ring level holds, for the byte model: RingBlockSizes, ring_travel.h.)
// Bytes one rank of the ring level sends per layer. `rank` matters only to groups, whose ranks
// hold different token counts (TokenLayout::dynamic_ring_bytes, from the shape).
CommPrediction ring_level_bytes(const RingSchedule& sch, const LayerShape& s, const RingHops& hops, RingTravel travel,
                                const RingBlockSizes& b, int64_t elem, int64_t acc, int rank = 0);
// The busiest rank's bytes (what a plan or dry run shows when ranks differ), and whether they do.
CommPrediction ring_level_bytes_busiest(const RingSchedule& sch, const LayerShape& s, const RingHops& hops,
                                        RingTravel travel, const RingBlockSizes& b, int64_t elem, int64_t acc);
inline bool ring_level_bytes_per_rank(const RingSchedule& sch) { return sch.kind == RingScheduleKind::groups; }
// Bytes the level's core keeps allocated per rank (`cs.n`: the rank's new tokens per batch row,
// `cs.nk` its keys; groups: the busiest rank's tokens and its largest block, from the shape).
int64_t ring_level_activation_bytes(const RingSchedule& sch, const LayerShape& s, const RingCoreShape& cs);

// The running ring level: the core its schedule names, over the layout's positions. setup
// allocates everything; forward and backward allocate nothing.
class RingLevel {
 public:
  // single: `ring` is the ring's communicator; double: `ring` the inner ring, `outer` the windows;
  // groups: `ring` the CP group. `cs` as the cores take it (RingCoreShape), its travel policy
  // included. `sinks`: the sinks of the cs.hq heads (attn_sinks.h; off by default), applied once
  // to the level's final rows after every schedule's last merge. `latent` (cs.latent > 0): MLA's
  // latent travel (latent_keys.h), single and double rings; backward() then leaves the latent's gradient
  // in latent.grad instead of writing dk, dv.
  void setup(Backend& be, const RingSchedule& sch, Communicator& ring, Communicator* outer, const RingCoreShape& cs,
             const RingLayoutPart& layout, SinkHeads sinks = {}, const LatentBlock& latent = {});
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o);
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& dout, Tensor& dq,
                Tensor& dk, Tensor& dv);
  const Tensor& lse() const;

 private:
  AttnShape rows_shape() const;  // the level's query rows [B, n, cs.hq, d], for the sinks
  Backend* be_ = nullptr;
  RingCoreShape cs_;
  SinkHeads sinks_;
  RingSchedule sch_;
  RingTravel travel_ = RingTravel::kv;
  RingHops hops_;
  RingCore single_;
  DoubleRingCore double_;
  DynamicRingCore groups_;
};

}  // namespace cpbench
