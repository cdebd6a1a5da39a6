// The hang watchdog (--timeout): a thread per rank that watches the rank's blocking
// communication call (CommLog::in_flight) and its job. When either lasts longer than the timeout
// it asks the call's peers what they are doing, over a communicator of its own (each rank's
// watchdog thread answers such queries), prints one message naming this rank, its host, the job,
// the phase, the operation, its group and the peers that did not arrive (those in another call,
// and those that do not answer at all: stopped or dead), calls the on-fire hook (rank 0 records
// the job as failed in the report) and aborts the job with exit code 124.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"
#include "comm/world.h"

namespace cpbench {

class Watchdog {
 public:
  // Called on the watchdog thread with the full message before the job is aborted.
  using OnFire = std::function<void(const std::string& message)>;

  // Collective over the world (creates the query communicator). timeout_s <= 0: inactive.
  Watchdog(World& w, CommLog& log, double timeout_s, OnFire on_fire);
  ~Watchdog();  // collective: every rank destroys its watchdog at the same point
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The job now running ("ring seq=4096"); "" between jobs.
  void set_job(const std::string& job);

  // What this rank's watchdog would answer a peer's query now (also used in the message).
  std::string state_line() const;
  // The message for a call blocked since `since_ms` (exposed for tests).
  static std::string describe_call(const InFlightCall& c, double now_ms);

 private:
  void loop();
  void fire(const std::string& what, const std::vector<int>& peers);
  std::string ask_peers(const std::vector<int>& peers);  // "" when none; else who did not arrive

  World& w_;
  CommLog& log_;
  double timeout_ms_;
  OnFire on_fire_;
  mutable std::mutex mu_;
  std::string job_;
  double job_since_ms_ = 0;
  std::atomic<bool> stop_{false};
  std::condition_variable cv_;
  std::thread thread_;
  void* query_comm_ = nullptr;  // MPI_Comm* (MPI build)
};

}  // namespace cpbench
