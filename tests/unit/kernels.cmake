# Kernels: tensors, positions, the CPU backend and its attention kernels against naive float64
# references, and its bf16/fp16 emulation against the scalar reference of test_lowp_ref.h bit for
# bit (included by tests/unit/CMakeLists.txt).
cpbench_unit_test(test_kernels
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/test_tensor.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_cpu_kernels.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_cpu_attention.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_cpu_lowp.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_float8.cpp
  LIBS cpbench_backends cpbench_cpu BLAS::BLAS OpenMP::OpenMP_CXX)
# The OpenBLAS concurrency test calls cblas directly.
target_include_directories(test_kernels SYSTEM PRIVATE ${CPBENCH_CBLAS_INCLUDE})
