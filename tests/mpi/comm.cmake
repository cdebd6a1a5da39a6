# The communicator under mpirun: collectives, point-to-point ring shifts, byte accounting, mesh
# groups, host staging (a fake device backend) and real overlap of isend/irecv with compute.
# One binary, run at several world sizes; it prints "N passed, M failed" and exits non-zero on
# any failure (a rank that fails unexpectedly aborts all ranks, a watchdog ends a hang).
if(CPBENCH_MPI)
  add_executable(test_comm_mpi ${CMAKE_CURRENT_SOURCE_DIR}/test_comm_mpi.cpp)
  target_link_libraries(test_comm_mpi PRIVATE cpbench_comm Threads::Threads cpbench_warnings)
  foreach(np 1 2 3 4 8)
    add_test(NAME comm_mpi_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --allow-run-as-root
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_comm_mpi> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(comm_mpi_np${np} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${np}
                         ENVIRONMENT "CPBENCH_COMM_TEST_WATCHDOG_S=240")
  endforeach()
endif()
