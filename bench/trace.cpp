#include "bench/trace.h"

#include "comm/world.h"

namespace cpbench {

using nlohmann::json;

void TraceCollector::add(World& w, const std::string& tag, const std::vector<ComputeRecord>& compute,
                         const std::vector<CommRecord>& comm) {
  json ev = json::array();
  const int rank = w.rank();
  for (const auto& c : compute)
    ev.push_back({{"name", c.name}, {"cat", "compute"}, {"ph", "X"}, {"pid", rank}, {"tid", 0},
                  {"ts", (c.t0_ms - origin_ms_) * 1e3}, {"dur", (c.t1_ms - c.t0_ms) * 1e3},
                  {"args", {{"phase", phase_name(Phase(c.phase))}, {"run", tag}}}});
  for (const auto& c : comm)
    ev.push_back({{"name", std::string(op_name(c.op)) + " " + c.group}, {"cat", "comm"}, {"ph", "X"},
                  {"pid", rank}, {"tid", 1}, {"ts", (c.t0_ms - origin_ms_) * 1e3},
                  {"dur", (c.t1_ms - c.t0_ms) * 1e3},
                  {"args", {{"phase", phase_name(c.phase)}, {"bytes_sent", c.bytes_sent},
                            {"buffer_bytes", c.buffer_bytes}, {"peer", c.peer}, {"run", tag}}}});
  const std::vector<std::string> all = w.gather_strings(ev.dump());
  if (rank != 0) return;
  if (events_.empty())
    for (int q = 0; q < w.size(); ++q) {
      events_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", q}, {"args", {{"name", "rank " + std::to_string(q)}}}});
      events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", q}, {"tid", 0}, {"args", {{"name", "compute"}}}});
      events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", q}, {"tid", 1}, {"args", {{"name", "communication"}}}});
    }
  for (const auto& s : all)
    for (auto& e : json::parse(s)) events_.push_back(e);
}

}  // namespace cpbench
