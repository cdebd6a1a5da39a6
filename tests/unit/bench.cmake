# Harness pieces that need no MPI run: config parsing, job planning, inputs, npy, comm model.
cpbench_unit_test(test_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_bench.cpp LIBS cpbench_lib)
