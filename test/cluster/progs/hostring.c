/* Multi-host MPICH check: a token passes around a ring (each hop adds one),
 * an allreduce sums the ranks, and rank 0 gathers where every rank runs.
 * "Where" is /tmp/gompi-host, which only that host's private /tmp holds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define HOSTLEN 128
int main(int argc, char **argv) {
  int rank, size, tok = 1, sum = 0, i;
  char host[HOSTLEN] = "unknown", *all = NULL;
  FILE *f = fopen("/tmp/gompi-host", "r");
  if (f) { if (!fgets(host, HOSTLEN, f)) strcpy(host, "empty"); fclose(f); }
  host[strcspn(host, "\n")] = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) {
    if (rank == 0) { MPI_Send(&tok, 1, MPI_INT, 1, 0, MPI_COMM_WORLD); MPI_Recv(&tok, 1, MPI_INT, size-1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(&tok, 1, MPI_INT, rank-1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); tok++; MPI_Send(&tok, 1, MPI_INT, (rank+1)%size, 0, MPI_COMM_WORLD); }
  }
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) all = malloc((size_t)size * HOSTLEN);
  MPI_Gather(host, HOSTLEN, MPI_CHAR, all, HOSTLEN, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("ring token %d sum %d size %d\n", tok, sum, size);
    for (i = 0; i < size; i++) printf("rank %d at %s\n", i, all + (size_t)i * HOSTLEN);
    free(all);
  }
  MPI_Finalize();
  return 0;
}
