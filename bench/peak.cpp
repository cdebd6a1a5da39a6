#include "bench/peak.h"

#include "bench/metrics.h"

namespace cpbench {

double device_table_peak(const std::string& device, const std::string& dtype) {
  if (dtype == "fp32") return 0;
  auto has = [&](const char* s) { return device.find(s) != std::string::npos; };
  // H100 SXM reports "H100 80GB HBM3" (PCIe and NVL are slower), H200 SXM "H200" (not NVL).
  if (has("H200") && !has("NVL")) return 989.0;
  if (has("H100") && (has("HBM3") || has("SXM"))) return 989.0;
  if (has("A100")) return 312.0;
  return 0;
}

Peak resolve_peak(const RunConfig& cfg, Backend& be, World& w) {
  if (cfg.peak_tflops > 0) return {cfg.peak_tflops, "flag", ""};
  std::vector<double> table = {device_table_peak(be.device_name(), cfg.dtype)};
  w.allreduce_min(table);
  if (table[0] > 0) return {table[0], "device-table", ""};

  const int64_t n = be.device_memory() ? 8192 : 1024;
  std::vector<double> rates;
  std::string error;
  try {
    const DType dt = cfg.storage_dtype();  // (fp8: the bf16 GEMM; the CPU has no fp8 units)
    Tensor a = be.alloc({n, n}, dt, MemKind::activations), b = be.alloc({n, n}, dt, MemKind::activations),
           c = be.alloc({n, n}, dt, MemKind::activations);
    be.fill(a, 0.5f);
    be.fill(b, 0.25f);
    be.gemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);  // warm-up
    be.synchronize();
    for (int rep = 0; rep < 5; ++rep) {
      w.barrier();
      Event e0 = be.record_event();
      be.gemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
      Event e1 = be.record_event();
      be.synchronize();
      rates.push_back(2.0 * double(n) * n * n / (be.elapsed_ms(e0, e1) * 1e-3) / 1e12);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  be.compute_log().clear();
  be.reset_flops();
  be.release_cached_memory();
  // Agree: a rank that could not calibrate makes the peak unavailable everywhere.
  std::vector<double> failed = {error.empty() ? 0.0 : 1.0};
  w.allreduce_max(failed);
  if (failed[0] > 0)
    return {0, "unavailable", "GEMM calibration (n=" + std::to_string(n) + ") failed" +
                                  (error.empty() ? " on another rank" : ": " + error)};
  std::vector<double> mine = {median(rates)}, all;
  w.gather_to_root(mine, all);
  std::vector<double> peak = {w.rank() == 0 ? median(all) : 0.0};
  w.allreduce_max(peak);
  return {peak[0], "calibrated-gemm", ""};
}

}  // namespace cpbench
