# NCCL communicator (comm/nccl_communicator.cpp), included by comm/CMakeLists.txt when the CUDA
# backend is on. It bootstraps over MPI, so it is built only with CPBENCH_MPI=ON. Without NCCL the
# build goes on and --comm nccl reports that it is not built in.
# Search order: NCCL_HOME / NCCL_ROOT (environment or cache), then the CUDA toolkit's directories,
# then the system paths.
if(NOT CPBENCH_MPI)
  message(STATUS "cpbench: NCCL communicator OFF (it needs MPI for its bootstrap; CPBENCH_MPI=OFF)")
else()
  set(_cpbench_nccl_hints $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${NCCL_HOME} ${NCCL_ROOT}
                          ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  find_path(CPBENCH_NCCL_INCLUDE_DIR nccl.h
    HINTS ${_cpbench_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(CPBENCH_NCCL_LIBRARY nccl
    HINTS ${_cpbench_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  if(CPBENCH_NCCL_INCLUDE_DIR AND CPBENCH_NCCL_LIBRARY)
    file(STRINGS ${CPBENCH_NCCL_INCLUDE_DIR}/nccl.h _nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
           CPBENCH_NCCL_VERSION "${_nccl_ver}")
    message(STATUS "cpbench: NCCL ${CPBENCH_NCCL_VERSION} (${CPBENCH_NCCL_LIBRARY}): --comm nccl available")
    target_sources(cpbench_comm PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/nccl_communicator.cpp)
    target_include_directories(cpbench_comm SYSTEM PRIVATE ${CPBENCH_NCCL_INCLUDE_DIR})
    target_link_libraries(cpbench_comm PUBLIC cpbench_cuda PRIVATE ${CPBENCH_NCCL_LIBRARY})
    target_compile_definitions(cpbench_comm PUBLIC CPBENCH_HAVE_NCCL=1
                                                   CPBENCH_NCCL_VERSION="${CPBENCH_NCCL_VERSION}")
  else()
    message(STATUS "cpbench: NCCL not found (set NCCL_HOME to its prefix): --comm nccl unavailable")
  endif()
endif()
