# Harness pieces that need no MPI run: config parsing, job planning, inputs, npy, comm model.
cpbench_unit_test(test_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_bench.cpp LIBS cpbench_lib)
# Metrics, typed results, block cache and memory limit (pure functions, no MPI).
cpbench_unit_test(test_metrics SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_metrics.cpp LIBS cpbench_lib)
target_compile_definitions(test_metrics PRIVATE CPBENCH_REPORT_SCHEMA="${PROJECT_SOURCE_DIR}/results_schema/report.schema.json")
# The one table of options, --docs, the second-wave settings (bench/options.cpp, workloads.cpp).
cpbench_unit_test(test_options SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_options.cpp LIBS cpbench_lib)
# The verification bound ||a-b|| <= bound * max(||b||, m) and the scales m of dq, dk (issue 24).
cpbench_unit_test(test_verify_bound SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_verify_bound.cpp LIBS cpbench_lib)
# Balanced layouts of packed documents (--balance doc-zigzag|greedy) and their own model.
cpbench_unit_test(test_balance SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_balance.cpp LIBS cpbench_lib)
