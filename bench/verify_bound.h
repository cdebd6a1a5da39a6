// The verification bound (DESIGN, Clarifications: "Verification bound"). A tensor a passes
// against its reference b when
//     ||a - b|| <= bound * max(||b||, m)
// where m is a scale the tensor's operands give. For dq and dk, m is the norm of the same formula
// evaluated on magnitudes, so it stays large when the gradient itself cancels to ~0 (a sliding
// window of 1, one-token documents: softmax is 1, dq = dk = 0 exactly, and both sides return
// fp32 rounding noise whose relative L2 error is ~1):
//     m_dq = || (1/sqrt(d)) * (P o (|dP| + |D|)) @ |K| ||
//     m_dk = || (1/sqrt(d)) * (P o (|dP| + |D|))^T @ |Q| ||   (summed over the query heads of a kv head)
// with P_ij = exp(q_i.k_j / sqrt(d) - lse_i) for visible pairs (0 otherwise), dP = do @ v^T and
// D_i = rowsum(do_i o o_i), all from the reference's (single's) roped q, k and v, o, do, lse.
// Every other tensor has m = 0: its rule is the plain relative L2 error.
// scripts/verify_bound.py is the same rule for the Python dump checks.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "bench/strategy.h"

namespace cpbench {

// The bound by the run's dtype: fp32 1e-5; bf16 and fp16 2e-2; fp8 2^-4 = 6.25e-2, e4m3's unit
// roundoff: rounding P to e4m3 alone moves o by up to about that against float64 on the same
// inputs (tests/unit/test_cpu_lowp.cpp's fp8 case asserts it), and a CP strategy rounds P against
// other running maxima than `single` does (measured 0.6-2.3e-2 at P = 4, N = 512: docs/NUMERICS.md).
// --comm-dtype (what K,V travel as; `single` sends nothing) loosens it to its own format's bound:
// bf16 2e-2, fp8 2^-4 (the remote blocks' k, v rounded to it; measured 1.2e-3 and 2.5e-2 at P = 4).
double verify_tolerance(const std::string& dtype, const std::string& comm_dtype = "run");

// e = ||a - b|| / max(||b||, m) in double: 0 when a == b (also when both are zero), +inf when
// the sizes differ, when a and b hold NaN/+Inf/-Inf at different positions or of different kinds
// (non-finite elements are left out of the norms otherwise), or when max(||b||, m) = 0 and a != b.
double verify_error(const std::vector<float>& a, const std::vector<float>& b, double m = 0);

// The scales m of the tensors that have one (dq, dk); every other tensor's is 0.
struct GradientScales {
  double dq = 0, dk = 0;
  double of(const std::string& tensor) const { return tensor == "dq" ? dq : tensor == "dk" ? dk : 0.0; }
};

// Sums of squares (not yet square-rooted) of the m_dq and m_dk elements that belong to the work
// items (batch row b, kv head g) whose index b*G + g is congruent to `part` modulo `parts`, so
// that ranks can share the O(B*H*N^2*d) work: the scales are the square roots of the sums over
// all parts. `ref` holds the global tensors q [B,N,H,d], k, v [B,N,G,d], o, do [B,N,H,d] and
// lse [B,H,N] (natural token order); visibility is the mask of `shape` (AttnMask). A row whose
// lse is not finite (it sees no key) contributes nothing. Under --pass prefill both are 0.
GradientScales gradient_scale_squares(const std::map<std::string, std::vector<float>>& ref, const LayerShape& shape,
                                      int part = 0, int parts = 1);

// The scales themselves, computed in one part.
GradientScales gradient_scales(const std::map<std::string, std::vector<float>>& ref, const LayerShape& shape);

// TEST ONLY: CPBENCH_TEST_PERTURB=TENSOR:VALUE makes `cpbench verify` add VALUE to every element
// of TENSOR as exported by each strategy under test (never `single`), so a test can show that an
// error in a gradient that should vanish fails the bound. Unset or empty: no perturbation.
struct TestPerturbation {
  std::string tensor;  // empty: none
  float value = 0;
};
// Reads and checks the variable; throws std::invalid_argument naming it and the value when it is
// not TENSOR:VALUE with a dumped tensor name and a finite number.
TestPerturbation test_perturbation();

}  // namespace cpbench
