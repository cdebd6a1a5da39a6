#include "bench/measure.h"

#include <algorithm>

namespace cpbench {

namespace {

struct Iteration {
  double fwd, bwd, step, busy;
};

Iteration run_iteration(Strategy& strat, Backend& be, World& w, CommLog& log, bool prefill) {
  w.barrier();
  log.clear();
  be.compute_log().clear();
  be.reset_flops();
  const Event e0 = be.record_event();
  log.set_phase(Phase::fwd);
  be.set_phase(int(Phase::fwd));
  strat.forward();
  const Event e1 = be.record_event();
  if (!prefill) {
    log.set_phase(Phase::bwd);
    be.set_phase(int(Phase::bwd));
    strat.backward();
  }
  const Event e2 = be.record_event();
  be.synchronize();
  log.set_phase(Phase::other);
  be.set_phase(int(Phase::other));
  return {be.elapsed_ms(e0, e1), be.elapsed_ms(e1, e2), be.elapsed_ms(e0, e2), be.compute_busy_ms()};
}

}  // namespace

RankMeasurement measure(Strategy& strat, Backend& be, World& w, CommLog& log, const MeasureOptions& opt) {
  RankMeasurement m;
  for (int i = 0; i < opt.warmup; ++i) run_iteration(strat, be, w, log, opt.prefill);
  const int64_t allocs_before = be.mem().alloc_calls();
  std::vector<double> busy, exposed, hta;
  for (int i = 0; i < opt.iters; ++i) {
    const Iteration it = run_iteration(strat, be, w, log, opt.prefill);
    m.fwd_ms.push_back(it.fwd);
    m.bwd_ms.push_back(it.bwd);
    m.step_ms.push_back(it.step);
    busy.push_back(it.busy);
    exposed.push_back(std::max(0.0, it.step - it.busy));
    // Both overlap figures come from the same iterations (the median of each), so that they
    // differ only by their definitions (docs/REPORT.md "overlap"), not by which samples they saw.
    hta.push_back(hta_overlap(log.records(), be.compute_log()));
    if (i == 0) {
      m.summary.model_flops = be.model_flops();
      m.summary.hardware_flops = be.hardware_flops();
    }
  }
  m.summary.timed_allocations = double(be.mem().alloc_calls() - allocs_before);
  m.records = log.records();
  m.compute = be.compute_log();

  // comm_standalone: the same communication calls with compute switched off. The layout copies
  // (packing, reordering) still run and are busy time, as in the timed iterations; what is left
  // of the replayed step is the communication itself.
  be.set_compute_enabled(false);
  std::vector<double> standalone;
  const int replays = std::max(1, std::min(opt.iters, 5));
  for (int i = 0; i < replays; ++i) {
    const Iteration it = run_iteration(strat, be, w, log, opt.prefill);
    standalone.push_back(std::max(0.0, it.step - it.busy));
  }
  be.set_compute_enabled(true);

  const MemStats mem = be.mem().stats();
  RankSummary& s = m.summary;
  s.step_ms = median(m.step_ms);
  s.busy_ms = median(busy);
  s.exposed_ms = median(exposed);
  s.standalone_ms = median(standalone);
  s.bytes_fwd = double(phase_bytes(m.records, Phase::fwd));
  s.bytes_bwd = double(phase_bytes(m.records, Phase::bwd));
  // A rank that sends nothing has nothing to hide, for the HTA figure as for the ratio (the same
  // rule, exposed_overlap_ratio's): calls in a group of one cost time but move no bytes.
  s.bytes_rec = double(phase_bytes(m.records, Phase::recompute));
  s.hta_overlap = s.bytes_fwd + s.bytes_bwd + s.bytes_rec == 0 ? 1.0 : median(hta);
  const TierBytes tf = phase_tier_bytes(m.records, Phase::fwd), tb = phase_tier_bytes(m.records, Phase::bwd),
                  tr = phase_tier_bytes(m.records, Phase::recompute);
  s.intra_fwd = double(tf.intra), s.inter_fwd = double(tf.inter);
  s.intra_bwd = double(tb.intra), s.inter_bwd = double(tb.inter);
  s.intra_rec = double(tr.intra), s.inter_rec = double(tr.inter);
  s.mem_peak = double(mem.peak_total);
  s.mem_weights = double(mem.peak[int(MemKind::weights)]);
  s.mem_activations = double(mem.peak[int(MemKind::activations)]);
  s.mem_comm = double(mem.peak[int(MemKind::comm)]);
  return m;
}

}  // namespace cpbench
