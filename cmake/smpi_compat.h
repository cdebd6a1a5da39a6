// Forced into every file of the cpbench-sim sub-build (cmake/simgrid.cmake), after the SMPI
// helper header that smpicxx forces in. That header turns `exit` into a function-like macro,
// which breaks C++ members named exit (CLI11's App::exit). cpbench never calls exit(): main
// returns, and a failing run ends in MPI_Abort, which SMPI implements.
#undef exit
