/* A token passes around a ring of MPI_Send/MPI_Recv; each hop adds one. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, tok = 1; /* a lone rank is its own ring */
  char name[MPI_MAX_PROCESSOR_NAME]; int len;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_processor_name(name, &len);
  if (size > 1) {
    if (rank == 0) { tok = 1; MPI_Send(&tok, 1, MPI_INT, 1, 0, MPI_COMM_WORLD); MPI_Recv(&tok, 1, MPI_INT, size-1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(&tok, 1, MPI_INT, rank-1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); tok++; MPI_Send(&tok, 1, MPI_INT, (rank+1)%size, 0, MPI_COMM_WORLD); }
  }
  printf("rank %d of %d on %s tok %d\n", rank, size, name, tok);
  MPI_Finalize();
  return 0;
}
