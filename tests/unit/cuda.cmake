# CUDA backend: every operation against the CPU backend in fp32/bf16/fp16 (included by
# tests/unit/CMakeLists.txt when the CUDA backend is built). Without a device each case prints
# "SKIPPED: no CUDA device" and passes.
cpbench_unit_test(test_cuda_kernels
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_kernels.cpp
  LIBS cpbench_backends cpbench_cuda)

# The kernels' own source (kernels/cuda/*_kernel(s).cuh) on a host emulator of CUDA thread blocks
# (cuda_emu.h): checks fragment layouts, index math, masks and tile skipping against float64
# references, with no GPU (runs in CI).
cpbench_unit_test(test_cuda_emu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_emu.cpp
  LIBS cpbench_cuda)
target_compile_options(test_cuda_emu PRIVATE -Wno-unknown-pragmas)  # the kernels' #pragma unroll

# The SwiGLU kernels of the MLP sub-layer (--block full) on the same emulator.
cpbench_unit_test(test_cuda_emu_mlp
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_emu_mlp.cpp
  LIBS cpbench_cuda)
target_compile_options(test_cuda_emu_mlp PRIVATE -Wno-unknown-pragmas)
