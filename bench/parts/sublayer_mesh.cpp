#include "bench/parts/sublayer_mesh.h"

#include <sstream>

namespace cpbench {

int mlp_degree(const MeshSpec& m) { return m.mlp_tp > 0 ? m.mlp_tp : m.tp; }
std::string mlp_level(const MeshSpec& m) { return m.mlp_tp > 0 ? "mlp_tp" : "tp"; }

bool helix(const LayerShape& s, const MeshSpec& m, int P) { return s.decode() && P > 1 && m.mlp_tp == P && m.tp < P; }

int resolve_mlp_tp(int requested, const MeshSpec& m, bool shards) {
  return shards && requested > 0 && requested != m.tp ? requested : 0;
}

void check_mlp_mesh(const std::string& who, const LayerShape& s, int P, const MeshSpec& m) {
  if (helix(s, m, P) && s.H % P != 0) {
    std::ostringstream e;
    e << who << ": Helix decode (--mlp-tp " << m.mlp_tp << " = P) gives each rank heads/P of w_o's rows: P=" << P
      << " does not divide heads=" << s.H;
    throw ConstraintError(e.str());
  }
}

MeshDesc job_mesh_desc(const Strategy& strat, const MeshSpec& m) {
  MeshDesc d = strat.mesh_desc(m);
  if (m.mlp_tp > 0) d.mlp = {{"mlp_dp", d.ranks() / m.mlp_tp}, {"mlp_tp", m.mlp_tp}};
  return d;
}

CommPrediction mlp_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem) {
  if (!s.full_block) return {};
  return tp_sublayer_bytes(s, P, mlp_degree(m), mlp_level(m), elem);
}

CommPrediction helix_attention_bytes(const LayerShape& s, int P, const std::string& merge_level, int R, int64_t elem,
                                     int64_t acc) {
  CommPrediction p;
  // A member computes H/(tU) = R*H/P heads' partial; the chunk another member owns is H/P heads:
  // o (float32) and lse of one step.
  const int64_t owned = s.H / P, chunk = acc * s.B * owned * s.vdim() + 4 * s.B * owned;
  if (R > 1) p.add(merge_level, Phase::fwd, 0, s.pass.steps * chunk * (R - 1));
  return p.add(tp_sublayer_bytes(s, P, P, "mlp_tp", elem));
}

}  // namespace cpbench
