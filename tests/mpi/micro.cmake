# cpbench_micro under mpirun (issue 14 item 7): ranks must run the same cases in the same order.
if(NOT TARGET cpbench_micro)
  return()
endif()
set(_micro $<TARGET_FILE:cpbench_micro>)
set(_one_case --benchmark_min_time=0.01)
# Random interleaving would shuffle the cases differently per rank: refused on every rank.
add_test(NAME micro_mpi_refuses_random_interleaving
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail_cmd.sh "random_interleaving shuffles the cases" 2 --
                 ${CPBENCH_MPIRUN} 2 ${_micro} --benchmark_enable_random_interleaving=true
                 --benchmark_filter=BM_CommAlltoallRaw/MiB:1/ ${_one_case})
# Ranks started on different cases (MPMD, different filters) fail fast instead of hanging.
add_test(NAME micro_mpi_different_cases_fail_fast
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail_cmd.sh "reached case BM_Comm.* another rank reached a different case" 2 --
                 ${CPBENCH_MPIRUN} 1 ${_micro} --benchmark_filter=BM_CommAlltoallRaw/MiB:1/ ${_one_case} :
                 ${MPIEXEC_NUMPROC_FLAG} 1 ${_micro} --benchmark_filter=BM_CommRingShiftRaw/MiB:1/ ${_one_case})
# A rank with an extra case: the other meets it at the end-of-cases agreement and both abort.
add_test(NAME micro_mpi_extra_case_fails_fast
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail_cmd.sh "reached case .* another rank reached a different case" 2 --
                 ${CPBENCH_MPIRUN} 1 ${_micro} --benchmark_filter=BM_CommAlltoallRaw/MiB:1/ ${_one_case} :
                 ${MPIEXEC_NUMPROC_FLAG} 1 ${_micro} "--benchmark_filter=BM_CommAlltoallRaw/MiB:1/|BM_CommRingShiftRaw/MiB:1/"
                 ${_one_case})
# The same cases on both ranks run (the last one's line printed) and exit 0.
add_test(NAME micro_mpi_same_cases_run
         COMMAND ${CPBENCH_EXPECT_PASS} "BM_CommRingShiftRaw/MiB:1" --
                 ${CPBENCH_MPIRUN} 2 ${_micro} "--benchmark_filter=BM_Comm.*Raw/MiB:1/" ${_one_case})
set_tests_properties(micro_mpi_refuses_random_interleaving micro_mpi_different_cases_fail_fast
                     micro_mpi_extra_case_fails_fast micro_mpi_same_cases_run
                     PROPERTIES LABELS "mpi;micro;reliability" TIMEOUT 180)
