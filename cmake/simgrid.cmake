# SimGrid SMPI support (issue 13, docs/SIMULATION.md). Included twice, in two roles:
#
# 1. In the normal build (CPBENCH_SIM_BUILD OFF): when CPBENCH_SIMGRID is AUTO and smpicxx is
#    found, or ON, adds a sub-build of this same source tree (ExternalProject) in
#    <build>/sim with CMAKE_CXX_COMPILER=smpicxx, CUDA, tests and micro-benchmarks off. Its
#    product is <build>/sim/bench/cpbench-sim, launched by scripts/simulate.sh. The normal
#    targets are unaffected: nothing of theirs is compiled with smpicxx.
#    Sets CPBENCH_HAVE_SIMGRID and CPBENCH_SIM_EXE for the tests.
# 2. In that sub-build (CPBENCH_SIM_BUILD ON): MPI is SMPI, which smpicxx provides (headers and
#    libsimgrid); MPI::MPI_CXX becomes an empty interface target so the rest of the tree links
#    as usual, and CPBENCH_SIMULATED is defined everywhere (the sim backend, the simulated clock,
#    the communicator's thread-free progress mode).

if(CPBENCH_SIM_BUILD)
  if(NOT CPBENCH_MPI)
    message(FATAL_ERROR "cpbench-sim: the SimGrid build needs CPBENCH_MPI=ON")
  endif()
  add_library(MPI::MPI_CXX INTERFACE IMPORTED)
  # SMPI's helper header (forced in by smpicxx) would also route malloc/free through SMPI's
  # shared allocator; cpbench's host memory must stay ordinary memory, only the sim backend's
  # tensors are shared (SMPI_SHARED_MALLOC, explicitly).
  add_compile_definitions(CPBENCH_SIMULATED=1 SMPI_NO_OVERRIDE_MALLOC=1)
  add_compile_options(-include ${PROJECT_SOURCE_DIR}/cmake/smpi_compat.h)
  message(STATUS "cpbench: SimGrid sub-build, MPI = SMPI (${CMAKE_CXX_COMPILER})")
  return()
endif()

set(CPBENCH_HAVE_SIMGRID OFF)
set(CPBENCH_SIM_EXE "")
if(CPBENCH_SIMGRID STREQUAL "OFF")
  message(STATUS "cpbench: cpbench-sim OFF (CPBENCH_SIMGRID=OFF)")
  return()
endif()
find_program(CPBENCH_SMPICXX smpicxx)
find_program(CPBENCH_SMPIRUN smpirun)
if(NOT CPBENCH_SMPICXX OR NOT CPBENCH_SMPIRUN)
  if(CPBENCH_SIMGRID STREQUAL "ON")
    message(FATAL_ERROR "cpbench: CPBENCH_SIMGRID=ON but smpicxx/smpirun were not found "
                        "(Debian: apt-get install libsimgrid-dev, or scripts/deps.sh)")
  endif()
  message(STATUS "cpbench: cpbench-sim OFF (no smpicxx; install libsimgrid-dev)")
  return()
endif()

include(ExternalProject)
set(CPBENCH_HAVE_SIMGRID ON)
set(CPBENCH_SIM_EXE ${CMAKE_BINARY_DIR}/sim/bench/cpbench-sim)
set(_sim_args
  -DCMAKE_CXX_COMPILER=${CPBENCH_SMPICXX}
  -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
  -DCPBENCH_SIM_BUILD=ON
  -DCPBENCH_SIMGRID=OFF
  -DCPBENCH_CUDA=OFF
  -DCPBENCH_MPI=ON
  -DCPBENCH_TESTS=OFF
  -DCPBENCH_MICRO=OFF
  -DCPBENCH_WERROR=${CPBENCH_WERROR})
if(CMAKE_CXX_COMPILER_LAUNCHER)
  list(APPEND _sim_args -DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER})
endif()
ExternalProject_Add(cpbench_sim_build
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${CMAKE_BINARY_DIR}/sim
  CMAKE_ARGS ${_sim_args}
  BUILD_COMMAND ${CMAKE_COMMAND} --build <BINARY_DIR> --target cpbench
  BUILD_ALWAYS ON          # the sources are ours: let the sub-build decide what is stale
  INSTALL_COMMAND ""
  BUILD_BYPRODUCTS ${CPBENCH_SIM_EXE}
  USES_TERMINAL_BUILD ON)
message(STATUS "cpbench: cpbench-sim ON (${CPBENCH_SMPICXX}) -> ${CPBENCH_SIM_EXE}")
