// The harness: runs the planned jobs one after another. Each job is set up, measured (or
// verified) and reduced over ranks into one typed JobResult. A job that fails on any rank is
// recorded as failed, with every failing rank's reason, and the sweep goes on; all ranks agree on
// the failure before the next collective. After every job the results so far go to a sink
// (main writes the report there), so a sweep killed late keeps what it measured.
//
// Pieces, one job each: plan.h (jobs), peak.h (MFU peak), measure.h (timed and replay loops),
// metrics.h (pure figures), result.h (the typed result), dump.h, trace.h.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "bench/config.h"
#include "bench/peak.h"
#include "bench/plan.h"
#include "bench/result.h"
#include "bench/trace.h"
#include "comm/communicator.h"
#include "comm/watchdog.h"

namespace cpbench {

// Set from a SIGINT/SIGTERM handler: the sweep stops at the next job boundary (all ranks agree).
extern std::atomic<int> g_stop_signal;

// Collective: each rank passes its error ("" = none). Returns "" when no rank failed, else the
// failing ranks' messages ("rank 1: ...; rank 3: ..."), the same string on every rank.
std::string agree_on_errors(World& w, const std::string& my_error);

class Harness {
 public:
  // Called on rank 0 after every job with every result so far.
  using Sink = std::function<void(const std::vector<JobResult>&)>;

  // timeout_s > 0 starts the watchdog (comm/watchdog.h); on_timeout runs on its thread with the
  // message before the job is aborted (rank 0 records the current job as failed there).
  Harness(const RunConfig& cfg, Backend& be, World& w, double timeout_s = 0,
          Watchdog::OnFire on_timeout = nullptr);
  ~Harness();
  // `cpbench run`: every job timed.
  std::vector<JobResult> run(const std::vector<Job>& jobs, const Peak& peak, const Sink& sink);
  // `cpbench verify`: every job against single.
  std::vector<JobResult> verify(const std::vector<Job>& jobs, const Sink& sink);
  // True when the sweep stopped early on a signal (the signal number), else 0.
  int interrupted() const { return interrupted_; }
  // Chrome trace events gathered so far (rank 0), for --trace.
  const nlohmann::json& trace() const { return trace_.events(); }
  // The job running now, as a failed result with `reason` (for the watchdog; thread-safe).
  // False between jobs.
  bool current_job_failed(const std::string& reason, JobResult* out) const;

 private:
  JobResult run_one(const Job& job, const Peak& peak);
  void set_current(const Job* job);
  bool stop_requested();  // collective

  const RunConfig& cfg_;
  Backend& be_;
  World& w_;
  CommLog log_;
  TraceCollector trace_;
  MeshCache meshes_;  // one mesh per description, reused by later jobs
  int interrupted_ = 0;
  mutable std::mutex current_mu_;
  std::optional<Job> current_;
  std::unique_ptr<Watchdog> watchdog_;  // last member: its thread reads log_ and current_
};

}  // namespace cpbench
