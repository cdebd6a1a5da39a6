# CUDA backend: every operation against the CPU backend in fp32/bf16/fp16 (included by
# tests/unit/CMakeLists.txt when the CUDA backend is built). Without a device each case prints
# "SKIPPED: no CUDA device" and exits 77, which ctest reports as skipped (not cpbench_unit_test:
# its cases need SKIP_RETURN_CODE).
add_executable(test_cuda_kernels ${PROJECT_SOURCE_DIR}/tests/unit/catch_main.cpp ${CMAKE_CURRENT_LIST_DIR}/test_cuda_kernels.cpp)
target_link_libraries(test_cuda_kernels PRIVATE Catch2::Catch2 cpbench_warnings cpbench_backends cpbench_cuda)
catch_discover_tests(test_cuda_kernels TEST_PREFIX "test_cuda_kernels:" PROPERTIES LABELS unit SKIP_RETURN_CODE 77)

# The kernels' own source (kernels/cuda/*_kernel(s).cuh) on a host emulator of CUDA thread blocks
# (cuda_emu.h): checks fragment layouts, index math, masks and tile skipping against float64
# references, and shared-memory races and cp.async waits, with no GPU (runs in CI).
cpbench_unit_test(test_cuda_emu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_emu.cpp
  LIBS cpbench_cuda)
target_compile_options(test_cuda_emu PRIVATE -Wno-unknown-pragmas)  # the kernels' #pragma unroll

# Mutation test of the emulator (issue 20): every __syncthreads, __syncwarp and cp.async wait in
# the kernels is switched off in turn (CPBENCH_EMU_SKIP_SYNC, at run time: one build) and the
# [mutation] cases must fail each time, or the site is listed with its reason in the script.
# Each site runs under the binaries whose [mutation] cases reach it (test_cuda_emu_decode: the
# decode kernels, defined below).
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME cuda_emu_mutation
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/cuda_emu_mutation.py $<TARGET_FILE:test_cuda_emu>
                 ${PROJECT_SOURCE_DIR}/kernels/cuda $<TARGET_FILE:test_cuda_emu_decode>)
set_tests_properties(cuda_emu_mutation PROPERTIES LABELS unit TIMEOUT 600)

# The SwiGLU kernels of the MLP sub-layer (--block full) on the same emulator.
cpbench_unit_test(test_cuda_emu_mlp
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_emu_mlp.cpp
  LIBS cpbench_cuda)
target_compile_options(test_cuda_emu_mlp PRIVATE -Wno-unknown-pragmas)

# The decode attention kernels (nq = 1: split along the keys, then combined) on the same emulator;
# its [mutation] case also runs under cuda_emu_mutation (the decode kernel's barrier).
cpbench_unit_test(test_cuda_emu_decode
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_emu_decode.cpp
  LIBS cpbench_cuda)
target_compile_options(test_cuda_emu_decode PRIVATE -Wno-unknown-pragmas)
