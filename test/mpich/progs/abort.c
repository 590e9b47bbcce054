/* The last rank calls MPI_Abort(MPI_COMM_WORLD, 7) while the others block in a receive. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, x;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == size - 1) MPI_Abort(MPI_COMM_WORLD, 7);
  MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Finalize();
  return 0;
}
