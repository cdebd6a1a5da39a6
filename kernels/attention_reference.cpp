#include "kernels/attention_reference.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace cpbench {

bool ref_visible(const AttnShape& s, int64_t i, int64_t j) {
  auto doc = [&](int64_t p) {
    int64_t idx = 0;
    if (s.docs)
      for (size_t x = 0; x < s.docs->size(); ++x)
        if ((*s.docs)[x] <= p) idx = int64_t(x);
    return idx;
  };
  if (doc(i) != doc(j)) return false;
  if (s.causal && j > i) return false;
  if (s.window == 0) return true;
  return s.causal ? i - j < s.window : std::llabs(i - j) < s.window;
}

int64_t ref_visible_pairs(const AttnShape& s, const Positions& qpos, const Positions& kpos) {
  int64_t n = 0;
  for (int64_t i : qpos.list())
    for (int64_t j : kpos.list()) n += ref_visible(s, i, j);
  return n;
}

AttnRef attn_reference(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                       const std::vector<double>& v, const std::vector<double>& dout, const Positions& qpos,
                       const Positions& kpos, bool with_grad, const AttnRefOptions& opt) {
  const double kNegInf = -std::numeric_limits<double>::infinity();
  const int64_t B = s.B, nq = s.nq, nk = s.nk;
  const int hq = s.hq, hk = s.hk, d = s.d, dv = s.vdim();  // q, k over d; v, o over dv
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(d));
  const std::vector<int64_t> qp = qpos.list(), kp = kpos.list();
  AttnRef r;
  r.o.assign(size_t(B * nq * hq * dv), 0.0);
  r.lse.assign(size_t(B * hq * nq), kNegInf);
  if (with_grad) {
    r.dq.assign(size_t(B * nq * hq * d), 0.0);
    r.dk.assign(size_t(B * nk * hk * d), 0.0);
    r.dv.assign(size_t(B * nk * hk * dv), 0.0);
    if (opt.sinks) r.dsinks.assign(size_t(hq), 0.0);
  }
  auto Q = [&](int64_t b, int64_t i, int h) { return &q[size_t(((b * nq + i) * hq + h) * d)]; };
  auto K = [&](int64_t b, int64_t j, int g) { return &k[size_t(((b * nk + j) * hk + g) * d)]; };
  auto V = [&](int64_t b, int64_t j, int g) { return &v[size_t(((b * nk + j) * hk + g) * dv)]; };
  std::vector<double> sc(static_cast<size_t>(nk)), p(sc), dp(sc);
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < hq; ++h) {
      if ((b * hq + h) % opt.parts != opt.part) continue;
      const int g = s.kv_head(h);
      const double sink = opt.sinks ? (*opt.sinks)[size_t(h)] : kNegInf;
      for (int64_t i = 0; i < nq; ++i) {
        double mx = kNegInf;
        for (int64_t j = 0; j < nk; ++j) {
          const bool vis = ref_visible(s, qp[size_t(i)], kp[size_t(j)]);
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += Q(b, i, h)[c] * K(b, j, g)[c];
          sc[size_t(j)] = vis ? dot * scale : kNegInf;
          mx = std::max(mx, sc[size_t(j)]);
        }
        if (mx == kNegInf) continue;  // no visible key (a sink alone carries no value: o = 0)
        mx = std::max(mx, sink);
        double l = opt.sinks ? std::exp(sink - mx) : 0.0;  // the sink's share of the denominator
        for (int64_t j = 0; j < nk; ++j) {
          p[size_t(j)] = std::exp(sc[size_t(j)] - mx);
          l += p[size_t(j)];
        }
        for (int64_t j = 0; j < nk; ++j) p[size_t(j)] /= l;
        double* orow = &r.o[size_t(((b * nq + i) * hq + h) * dv)];
        for (int64_t j = 0; j < nk; ++j)
          for (int c = 0; c < dv; ++c) orow[c] += p[size_t(j)] * V(b, j, g)[c];
        r.lse[size_t((b * hq + h) * nq + i)] = mx + std::log(l);
        if (!with_grad) continue;
        // Softmax Jacobian: dS_j = p_j (dp_j - sum_l p_l dp_l), dp_j = dout . v_j; the sink is a
        // key with dp = 0, so its logit's gradient is p_sink * (0 - sum_l p_l dp_l).
        const double* dorow = &dout[size_t(((b * nq + i) * hq + h) * dv)];
        double sum_pdp = 0;
        for (int64_t j = 0; j < nk; ++j) {
          double t = 0;
          for (int c = 0; c < dv; ++c) t += dorow[c] * V(b, j, g)[c];
          dp[size_t(j)] = t;
          sum_pdp += p[size_t(j)] * t;
        }
        if (opt.sinks) r.dsinks[size_t(h)] -= std::exp(sink - mx) / l * sum_pdp;
        double* dqrow = &r.dq[size_t(((b * nq + i) * hq + h) * d)];
        for (int64_t j = 0; j < nk; ++j) {
          if (p[size_t(j)] == 0) continue;
          const double ds = p[size_t(j)] * (dp[size_t(j)] - sum_pdp);
          double* dkrow = &r.dk[size_t(((b * nk + j) * hk + g) * d)];
          double* dvrow = &r.dv[size_t(((b * nk + j) * hk + g) * dv)];
          for (int c = 0; c < d; ++c) {
            dqrow[c] += scale * ds * K(b, j, g)[c];
            dkrow[c] += scale * ds * Q(b, i, h)[c];
          }
          for (int c = 0; c < dv; ++c) dvrow[c] += p[size_t(j)] * dorow[c];
        }
      }
    }
  return r;
}

}  // namespace cpbench
