// Simulated network probe (built with smpicxx, run by scripts/simulate.sh): the one-way time of a
// ping-pong between rank 0 and a rank on the same node and on the next node, and the time of an
// all-to-all within a node and over all ranks. Prints one JSON object (rank 0); check_net.py
// compares it with the platform's link numbers.
//   net_probe GPUS_PER_NODE BYTES
#include <mpi.h>
#include <smpi/smpi.h>

#include <cstdio>
#include <cstdlib>

namespace {

// One-way time of `reps` round trips of `bytes` between ranks a and b (others only wait).
double ping_pong(int a, int b, long bytes, char* buf, int rank) {
  const int reps = 4;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < reps; ++i) {
    if (rank == a) {
      MPI_Send(buf, int(bytes), MPI_BYTE, b, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, int(bytes), MPI_BYTE, b, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == b) {
      MPI_Recv(buf, int(bytes), MPI_BYTE, a, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, int(bytes), MPI_BYTE, a, 0, MPI_COMM_WORLD);
    }
  }
  const double t = (MPI_Wtime() - t0) / (2.0 * reps);
  MPI_Barrier(MPI_COMM_WORLD);
  return t;
}

double all_to_all(MPI_Comm comm, long bytes_per_peer, char* send, char* recv) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  MPI_Alltoall(send, int(bytes_per_peer), MPI_BYTE, recv, int(bytes_per_peer), MPI_BYTE, comm);
  double t = MPI_Wtime() - t0, tmax = 0;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, comm);
  return tmax;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 3) {
    if (rank == 0) std::fprintf(stderr, "usage: net_probe GPUS_PER_NODE BYTES\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int g = std::atoi(argv[1]);
  const long bytes = std::atol(argv[2]);
  char* send = static_cast<char*>(SMPI_SHARED_MALLOC(size_t(bytes) * size_t(size)));
  char* recv = static_cast<char*>(SMPI_SHARED_MALLOC(size_t(bytes) * size_t(size)));
  MPI_Comm node;
  MPI_Comm_split(MPI_COMM_WORLD, rank / g, rank, &node);

  const double intra_small = ping_pong(0, 1, 8, send, rank);
  const double intra_big = ping_pong(0, 1, bytes, send, rank);
  double inter_small = -1, inter_big = -1;
  if (size > g) {
    inter_small = ping_pong(0, g, 8, send, rank);
    inter_big = ping_pong(0, g, bytes, send, rank);
  }
  const double a2a_node = all_to_all(node, bytes / g, send, recv);
  const double a2a_world = all_to_all(MPI_COMM_WORLD, bytes / size, send, recv);
  if (rank == 0)
    std::printf("{\"ranks\": %d, \"gpus_per_node\": %d, \"bytes\": %ld, \"intra_small_s\": %.9g, \"intra_big_s\": %.9g, "
                "\"inter_small_s\": %.9g, \"inter_big_s\": %.9g, \"alltoall_node_s\": %.9g, \"alltoall_world_s\": %.9g}\n",
                size, g, bytes, intra_small, intra_big, inter_small, inter_big, a2a_node, a2a_world);
  SMPI_SHARED_FREE(send);
  SMPI_SHARED_FREE(recv);
  MPI_Comm_free(&node);
  MPI_Finalize();
  return 0;
}
