// The peak rate MFU is measured against: --peak-tflops, else a device table, else a calibrated
// GEMM rate (CPU), else none (MFU is then reported as null, with the reason).
#pragma once
#include <string>

#include "bench/config.h"

namespace cpbench {

struct Peak {
  double tflops = 0;   // 0: unknown (MFU null)
  std::string source;  // flag | device-table | calibrated-gemm | unavailable
  std::string reason;  // when unavailable: why
};

// Dense bf16/fp16 tensor-core peaks (DESIGN) of known SXM parts by device name; 0 when unknown
// or when the run is fp32.
double device_table_peak(const std::string& device, const std::string& dtype);

// Collective: every rank calls it. The device table applies only when every rank's device is in
// it. Calibration runs one GEMM per rank at once (shared cores are accounted for) and takes the
// median rate; on a device backend the GEMM is n = 8192 (a 1024^3 GEMM is far from a GPU's peak),
// and when that cannot run the peak is unavailable.
Peak resolve_peak(const RunConfig& cfg, Backend& be, World& w);

}  // namespace cpbench
