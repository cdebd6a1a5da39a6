# Mesh groups, byte accounting, names, the comm log's clock (and, without MPI, the one-rank world).
cpbench_unit_test(test_mesh SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_mesh.cpp LIBS cpbench_comm)
