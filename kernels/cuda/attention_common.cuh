// Host-side dispatch and argument checks shared by the attention kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_kernels.h"

namespace cpbench::cuda {

// Run-time head dim -> compile-time D; an unsupported value is an error, never a fallback.
#define CPB_DISPATCH_HEAD_DIM(dval, D, ...)                                                       \
  switch (dval) {                                                                                 \
    case 64: {                                                                                    \
      constexpr int D = 64;                                                                       \
      __VA_ARGS__;                                                                                \
      break;                                                                                      \
    }                                                                                             \
    case 128: {                                                                                   \
      constexpr int D = 128;                                                                      \
      __VA_ARGS__;                                                                                \
      break;                                                                                      \
    }                                                                                             \
    default:                                                                                      \
      throw std::invalid_argument("cuda attention: head dim " + std::to_string(dval) +            \
                                  " is not supported (built for d = " +                           \
                                  attn_supported_head_dims() + ")");                              \
  }

// Run-time dtype -> element type (bf16, fp16).
#define CPB_DISPATCH_HALF_DTYPE(dt, T, ...)                                                       \
  switch (dt) {                                                                                   \
    case DType::bf16: {                                                                           \
      using T = __nv_bfloat16;                                                                    \
      __VA_ARGS__;                                                                                \
      break;                                                                                      \
    }                                                                                             \
    case DType::f16: {                                                                            \
      using T = __half;                                                                           \
      __VA_ARGS__;                                                                                \
      break;                                                                                      \
    }                                                                                             \
    default:                                                                                      \
      throw std::invalid_argument(std::string("cuda attention: dtype ") + dtype_name(dt) +        \
                                  " is not supported (the tensor-core kernels take bf16 or "      \
                                  "fp16)");                                                       \
  }

// The tensor-core kernels hold q, k, v, o in tiles of one head dim D: the values' head dim must
// equal the scores' (MLA's dv != d runs in fp32, or through the decode kernel when nq == 1).
inline void check_single_head_dim(const char* op, const AttnArgs& a) {
  if (a.dv != a.d)
    throw std::invalid_argument(std::string(op) + ": the " + dtype_name(a.dtype) +
                                " tensor-core kernels take dv == d only (got d = " + std::to_string(a.d) +
                                ", dv = " + std::to_string(a.dv) + "); fp32 takes two head dims");
}

// cp.async moves 16-byte chunks: every tensor row must start 16-byte aligned.
inline void check_aligned16(const char* op, const char* name, const void* p) {
  if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw std::invalid_argument(std::string(op) + ": " + name +
                                " is not 16-byte aligned (a view at an odd element offset?)");
}

}  // namespace cpbench::cuda
