// Per-sub-layer meshes (DESIGN "Per-sub-layer meshes"): the MLP sub-layer may run on its own
// tensor-parallel level over the same P ranks as the attention (--mlp-tp N: the levels
// {mlp_dp = P/N, mlp_tp = N}, N contiguous ranks), the re-layout between the two sub-layers being
// the MLP's own all-gather of its input rows and reduce-scatter of its output (token rows are
// the residual stream's, whichever group gathers them). Its proof is Helix decode
// (arXiv:2507.07120): under --pass decode with N = P, the attention's partials go to their
// heads' owners in one all-to-all over the merge level instead of an all-gather, each rank merges
// H/P heads exactly, and w_o is row-parallel over all P ranks like the MLP.
// Here: what the MLP's mesh is, its constraints and its terms of the byte model; the block
// (bench/block/block.cpp) runs it.
#pragma once
#include <string>

#include "bench/parts/tp_level.h"
#include "bench/strategy.h"

namespace cpbench {

// The MLP's tensor-parallel degree (mlp_tp, or the attention's tp) and the level its
// collectives are logged and modelled on ("mlp_tp", or the attention's "tp").
int mlp_degree(const MeshSpec& m);
std::string mlp_level(const MeshSpec& m);
// Helix decode: --pass decode, the MLP over all P > 1 ranks, the attention not (tp < P).
bool helix(const LayerShape& s, const MeshSpec& m, int P);

// The resolved MeshSpec::mlp_tp of a job from the request N (--mlp-tp; 0 = none): 0 when the
// MLP runs on the attention's tp level anyway (N = 0 or N = m.tp) or the strategy does not shard
// the block (`shards` false: single, the replicated reference, runs unchanged), else N.
int resolve_mlp_tp(int requested, const MeshSpec& m, bool shards);
// Throws ConstraintError naming the flag and the values when this job's meshes cannot run Helix:
// P must divide heads (H/P heads per rank for w_o). What does not depend on the strategy (N | P,
// N | ffn_dim, N | dim under decode, --block full) is the config's (bench/config.cpp), checked
// once before any job; a strategy that merges over two levels (usp's double ring) refuses Helix
// in its check.
void check_mlp_mesh(const std::string& who, const LayerShape& s, int P, const MeshSpec& m);

// The mesh a job builds: the strategy's levels, and under --mlp-tp N the MLP's {mlp_dp, mlp_tp}.
MeshDesc job_mesh_desc(const Strategy& strat, const MeshSpec& m);

// ---- the byte model's terms (bytes sent per rank per layer) ------------------------------------
// The MLP sub-layer's term under --block full (0 otherwise): tp_sublayer_bytes on its own mesh.
CommPrediction mlp_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem);
// Helix's attention output per decode step: the all-to-all of the float32 partials (o, lse) of a
// merge group of R ranks, each member sending the (R-1)/R of its H/(tU) heads' partial that
// other members own, then w_o's all-reduce over all P ranks ("mlp_tp"): S times.
CommPrediction helix_attention_bytes(const LayerShape& s, int P, const std::string& merge_level, int R, int64_t elem,
                                     int64_t acc);

}  // namespace cpbench
