// The strategy plug-in interface. A strategy is one file in bench/strategies/ that plans its
// shards, runs forward and backward of DESIGN's attention layer, states its analytic
// communication model, and exports its share of the global tensors for verification. Adding
// one touches no other file but its registration line in bench/registry.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/world.h"
#include "kernels/backend.h"

namespace cpbench {

// A shape or mesh a strategy cannot run. The message names the constraint and the values.
struct ConstraintError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The layer's sizes (DESIGN notation).
struct LayerShape {
  int64_t B = 1, N = 0;
  int H = 0, G = 0, d = 0, D = 0;
  bool causal = true, rope = true;
  float eps = 1e-5f;
  double rope_theta = 10000.0;
  DType dtype = DType::f32;
  int64_t window = 0;                // sliding window W (0 = none)
  std::vector<int64_t> doc_lens;     // packed documents, summing to N; empty = one document
  bool prefill = false;              // --pass prefill: forward only
  int64_t qkv_cols() const { return int64_t(H + 2 * G) * d; }
};

// The requested USP mesh; U = R = 0 means "the strategy's default".
enum class RingLayout { auto_, zigzag, contiguous };  // usp's ring layout: auto = zigzag iff causal
struct MeshSpec {
  int U = 0, R = 0;
  Placement placement = Placement::ulysses_inner;
  RingLayout ring_layout = RingLayout::auto_;
};

// Bytes sent by one rank per layer (DESIGN's analytic model).
struct CommPrediction {
  int64_t fwd = 0, bwd = 0;
};

// What a strategy works with while it runs.
struct StrategyEnv {
  Backend* be = nullptr;
  World* world = nullptr;
  Mesh* mesh = nullptr;
  LayerShape shape;
  uint64_t seed = 0;
  MeshSpec spec;  // the job's resolved mesh (U, R, placement, usp ring layout)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;  // registered name: "ring-zigzag"
  // Label of one result: name plus mesh when it has one ("usp[u2xr2]").
  virtual std::string label(const MeshSpec& m) const { (void)m; return name(); }
  // The mesh this strategy runs on, from the request and world size P. Throws ConstraintError
  // when the request is impossible (U*R != P ...). Non-USP strategies: U=1, R=P.
  virtual MeshSpec resolve_mesh(const MeshSpec& requested, const LayerShape& s, int P) const;
  // True when --ulysses/--ring/--placement/--mesh apply to this strategy (usp).
  virtual bool uses_mesh() const { return false; }
  // Throws ConstraintError naming the constraint and values when it cannot run this shape on
  // this mesh of P ranks.
  virtual void check(const LayerShape& s, int P, const MeshSpec& m) const = 0;
  // DESIGN's analytic model, computed from the shape alone (never from the comm log).
  // elem = s (bytes of the communicated dtype), acc = s_acc (ring gradient accumulators).
  virtual CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec& m,
                                         int64_t elem, int64_t acc) const = 0;
  // Analytic activation memory per rank (bytes of tensors saved or live across the layer);
  // reported beside the measured peak.
  virtual int64_t activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const = 0;

  // Allocate buffers and fill the seeded inputs and weights of this rank's shard.
  virtual void setup(StrategyEnv& env) = 0;
  virtual void forward() = 0;
  virtual void backward() = 0;
  // Free everything (the harness also drops the object).
  virtual void teardown() {}

  // Verification: add this rank's share of global tensor `name` (DESIGN's dump list, natural
  // token order, float32) into `global`, which has the full global size and is zero on entry.
  // Summing the arrays of all ranks must give the global tensor: replicated data is written by
  // one rank only; weight gradients are partial sums.
  virtual void export_tensor(const std::string& name, std::vector<float>& global) = 0;
};

// Registry (bench/registry.cpp).
struct StrategyInfo {
  std::string name;
  std::string summary;      // two lines for README / `cpbench list`
  std::string constraints;  // human-readable constraints
  std::function<std::unique_ptr<Strategy>()> make;
};
const std::vector<StrategyInfo>& strategy_registry();
const StrategyInfo* find_strategy(const std::string& name);  // null if unknown

// Largest u dividing P, H and G: the widest Ulysses all-to-all the heads allow (usp's default
// mesh, and the hint of the head-constrained strategies' errors).
int max_ulysses_degree(int P, const LayerShape& s);

// Names and global shapes of the tensors of the dump (DESIGN order).
std::vector<std::string> dump_tensor_names();
std::vector<int64_t> global_tensor_shape(const std::string& name, const LayerShape& s);

}  // namespace cpbench
