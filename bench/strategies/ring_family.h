// The ring family: ring attention over the whole CP group, as a composition of parts (a layout,
// ring_layout.h; a schedule and a travel policy, ring_schedule.h) on DESIGN's block (block.h).
// ring, ring-zigzag, ring-striped and double-ring are presets of it (one small file each:
// ring.cpp, ring_zigzag.cpp, ring_striped.cpp, double_ring.cpp), differing only in the data
// below. Everything a preset does not name (--ring-pass, --cached, --pass decode, masks) the
// parts provide for all of them alike.
//
// Bytes per rank: the ring level's term (ring_level_bytes) on level "cp" (a single ring; groups)
// or ring_inner / ring_outer (a double ring); under --pass decode the block's decode merge over
// the CP group (Block::decode_prediction).
#pragma once
#include <string>

#include "bench/parts/ring_schedule.h"
#include "bench/block/block.h"

namespace cpbench {

struct RingPreset {
  std::string name;
  std::string summary;      // two lines for README / `cpbench list`
  std::string tiers;        // one line
  RingOrder order = RingOrder::contiguous;  // the static layout
  // The schedule: one ring over the P ranks, or LoongTrain's double ring over windows of w ranks
  // (--inner-ring; --mesh all runs every w dividing P).
  bool double_ring = false;
  // --balance schemes it takes: doc-zigzag and greedy replace the static order; dynamic (single
  // ring only) also replaces the schedule by one ring per CP group.
  bool balance = false;
  bool balance_dynamic = false;
};

class RingFamily final : public Block {
 public:
  explicit RingFamily(RingPreset preset) : p_(std::move(preset)) {}
  // The preset's name, text and --balance schemes; every preset takes --ring-pass q, --cached
  // and --pass decode (the parts provide them).
  StrategyDesc describe() const override;
  std::string mesh_label(const MeshSpec& m) const override;
  std::vector<MeshSpec> mesh_candidates(const MeshSpec& base, int P) const override;
  MeshSpec resolve_mesh(const MeshSpec& requested, const LayerShape& s, int P) const override;
  void check(const LayerShape& s, int P, const MeshSpec& m) const override;
  CommPrediction attention_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                 int rank) const override;

 protected:
  Positions token_positions(const LayerShape& s, const Mesh& m) const override;
  void core_setup() override;
  // kc_, vc_ are k_, v_ themselves without a cache (block.h). Under MLA's latent travel this rank
  // expands its own block first (latent_keys.h).
  void core_forward() override;
  void core_backward() override { level_.backward(q_, k_, v_, o_, do_, dq_, dk_, dv_); }
  void export_lse(std::vector<float>& global) override;
  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const override;

 private:
  // The parts this preset composes for a shape on a resolved mesh of P ranks.
  RingLayoutPart layout(const LayerShape& s, int P) const { return RingLayoutPart(p_.order, s, P); }
  RingSchedule schedule(const LayerShape& s, int P, const MeshSpec& m) const;
  // The model's sizes of a rank's blocks: its N/P keys (the cache shard included) and its
  // (N - C)/P new queries.
  static RingBlockSizes block_sizes(const LayerShape& s, int P);

  RingPreset p_;
  RingLevel level_;
  LatentBlock latent_;  // --mla-travel latent: this rank's latent, for every head (off otherwise)
};

}  // namespace cpbench
