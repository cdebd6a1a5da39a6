#include "comm/watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

#ifdef CPBENCH_HAVE_MPI
#include <mpi.h>
#endif

namespace cpbench {

namespace {
constexpr int kQueryTag = 1, kAnswerTag = 2;
constexpr int kAnswerLen = 256;
constexpr double kAskSeconds = 3.0;  // how long a firing rank waits for its peers' answers
constexpr int kAbortCode = 124;      // as timeout(1)

std::string ranks_str(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return "[" + s + "]";
}
}  // namespace

Watchdog::Watchdog(World& w, CommLog& log, double timeout_s, OnFire on_fire)
    : w_(w), log_(log), timeout_ms_(timeout_s * 1e3), on_fire_(std::move(on_fire)) {
#ifdef CPBENCH_SIMULATED
  // cpbench-sim: SMPI refuses MPI calls from a second thread, and a simulated run cannot hang on
  // a peer that stopped (every rank is a thread of one simulator process): no watchdog.
  timeout_ms_ = 0;
#endif
  if (timeout_ms_ <= 0) return;
#ifdef CPBENCH_HAVE_MPI
  auto* comm = new MPI_Comm;
  MPI_Comm_dup(MPI_COMM_WORLD, comm);
  query_comm_ = comm;
#endif
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  if (timeout_ms_ <= 0) return;
  stop_ = true;
  cv_.notify_all();
  thread_.join();
#ifdef CPBENCH_HAVE_MPI
  auto* comm = static_cast<MPI_Comm*>(query_comm_);
  MPI_Comm_free(comm);
  delete comm;
#endif
}

void Watchdog::set_job(const std::string& job) {
  std::lock_guard<std::mutex> lk(mu_);
  job_ = job;
  job_since_ms_ = now_ms();
}

std::string Watchdog::describe_call(const InFlightCall& c, double now) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << op_name(c.op) << " on group '" << c.group << "' (phase " << phase_name(c.phase)
    << ", waiting for world ranks " << ranks_str(c.peers) << ") for " << (now - c.since_ms) / 1e3 << " s";
  return s.str();
}

std::string Watchdog::state_line() const {
  std::string job;
  {
    std::lock_guard<std::mutex> lk(mu_);
    job = job_;
  }
  InFlightCall c;
  std::string s = job.empty() ? "between jobs" : "job '" + job + "'";
  if (log_.in_flight(&c)) s += ", in " + describe_call(c, now_ms());
  else if (!job.empty()) s += ", computing";
  return s;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(100));
    if (stop_) break;
    const std::string job = job_;
    const double job_since = job_since_ms_;
    lk.unlock();
#ifdef CPBENCH_HAVE_MPI
    // Answer the peers' queries: what this rank is doing now.
    auto comm = *static_cast<MPI_Comm*>(query_comm_);
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, comm, &flag, &st);
      if (!flag) break;
      int dummy = 0;
      MPI_Recv(&dummy, 1, MPI_INT, st.MPI_SOURCE, kQueryTag, comm, MPI_STATUS_IGNORE);
      char answer[kAnswerLen] = {};
      std::snprintf(answer, sizeof answer, "%s", state_line().c_str());
      MPI_Send(answer, kAnswerLen, MPI_CHAR, st.MPI_SOURCE, kAnswerTag, comm);
    }
#endif
    const double now = now_ms();
    InFlightCall c;
    if (log_.in_flight(&c) && now - c.since_ms > timeout_ms_) {
      fire("blocked in " + describe_call(c, now), c.peers);
    } else if (!job.empty() && now - job_since > timeout_ms_) {
      std::vector<int> all;
      for (int r = 0; r < w_.size(); ++r)
        if (r != w_.rank()) all.push_back(r);
      fire("in the job for " + std::to_string(int((now - job_since) / 1e3)) + " s", all);
    }
    lk.lock();
  }
}

std::string Watchdog::ask_peers(const std::vector<int>& peers) {
  std::string out;
#ifdef CPBENCH_HAVE_MPI
  auto comm = *static_cast<MPI_Comm*>(query_comm_);
  const size_t n = peers.size();
  std::vector<MPI_Request> sends(n), recvs(n);
  std::vector<std::vector<char>> answers(n, std::vector<char>(kAnswerLen, 0));
  int query = 1;
  for (size_t i = 0; i < n; ++i) {
    MPI_Isend(&query, 1, MPI_INT, peers[i], kQueryTag, comm, &sends[i]);
    MPI_Irecv(answers[i].data(), kAnswerLen, MPI_CHAR, peers[i], kAnswerTag, comm, &recvs[i]);
  }
  std::vector<bool> done(n, false);
  const double deadline = now_ms() + kAskSeconds * 1e3;
  size_t left = n;
  while (left > 0 && now_ms() < deadline) {
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      int flag = 0;
      MPI_Test(&recvs[i], &flag, MPI_STATUS_IGNORE);
      if (flag) done[i] = true, --left;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string who = "rank " + std::to_string(peers[i]);
    if (!done[i]) out += (out.empty() ? "" : "; ") + who + " did not answer within " +
                         std::to_string(int(kAskSeconds)) + " s (stopped, dead or hung outside MPI)";
    else out += (out.empty() ? "" : "; ") + who + ": " + std::string(answers[i].data());
  }
  // The requests of ranks that never answered stay pending: the job is aborted next.
#else
  (void)peers;
#endif
  return out;
}

void Watchdog::fire(const std::string& what, const std::vector<int>& peers) {
  std::string job;
  {
    std::lock_guard<std::mutex> lk(mu_);
    job = job_;
  }
  std::ostringstream m;
  m << "timeout: rank " << w_.rank() << " (host " << w_.host() << "), job '" << (job.empty() ? "-" : job)
    << "', " << what << " > --timeout " << timeout_ms_ / 1e3 << " s";
  const std::string peers_state = ask_peers(peers);
  if (!peers_state.empty()) m << "; peers: " << peers_state;
  const std::string msg = m.str();
  std::fprintf(stderr, "cpbench: watchdog: %s\n", msg.c_str());
  std::fflush(stderr);
  if (on_fire_) on_fire_(msg);
  // Give rank 0 a moment to write the report before the job goes down.
  if (w_.rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(3));
  w_.abort(kAbortCode);
}

}  // namespace cpbench
