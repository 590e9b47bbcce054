/* Rank/size/processor name check: every rank agrees on the size (Allreduce). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  int rank, size, len, maxsize = 0;
  char name[MPI_MAX_PROCESSOR_NAME];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_processor_name(name, &len);
  MPI_Allreduce(&size, &maxsize, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (len <= 0 || maxsize != size) {
    printf("rank %d: bad processor name or size\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  printf("rank %d of %d on %s\n", rank, size, name);
  MPI_Finalize();
  return 0;
}
