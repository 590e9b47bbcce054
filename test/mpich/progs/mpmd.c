/* Prints its MPMD appnum and MPI_UNIVERSE_SIZE. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, flag, *app, uflag, *usize;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &app, &flag);
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usize, &uflag);
  printf("rank %d appnum %d universe %d\n", rank, flag ? *app : -1, uflag ? *usize : -1);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
