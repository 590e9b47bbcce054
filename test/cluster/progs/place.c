/* Where MPICH thinks each rank is: the host (its private /tmp/gompi-host),
 * the ranks MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups it with,
 * MPI_UNIVERSE_SIZE and MPI_APPNUM; an allreduce and a ring across all
 * ranks show messages flow between hosts. Rank 0 prints it all. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define L 256
int main(int argc, char **argv) {
  int rank, size, i, flag, *uv, *av, sum = 0, tok = 0, srank, ssize;
  char host[64] = "unknown", line[L], *all = NULL, shm[160] = "";
  MPI_Comm sh;
  FILE *f = fopen("/tmp/gompi-host", "r");
  if (f) { if (!fgets(host, sizeof host, f)) strcpy(host, "empty"); fclose(f); }
  host[strcspn(host, "\n")] = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &sh);
  MPI_Comm_rank(sh, &srank); MPI_Comm_size(sh, &ssize);
  int *members = malloc(sizeof(int) * ssize);
  MPI_Allgather(&rank, 1, MPI_INT, members, 1, MPI_INT, sh);
  for (i = 0; i < ssize; i++) { char b[16]; snprintf(b, sizeof b, i ? ",%d" : "%d", members[i]); strncat(shm, b, sizeof shm - strlen(shm) - 1); }
  int us = -1, an = -1;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &uv, &flag); if (flag) us = *uv;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &av, &flag); if (flag) an = *av;
  snprintf(line, L, "rank %d at %s shared [%s] universe %d appnum %d", rank, host, shm, us, an);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (size > 1) {
    if (rank == 0) { tok = 1; MPI_Send(&tok, 1, MPI_INT, 1, 0, MPI_COMM_WORLD); MPI_Recv(&tok, 1, MPI_INT, size-1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(&tok, 1, MPI_INT, rank-1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); tok++; MPI_Send(&tok, 1, MPI_INT, (rank+1)%size, 0, MPI_COMM_WORLD); }
  }
  if (rank == 0) all = malloc((size_t)size * L);
  MPI_Gather(line, L, MPI_CHAR, all, L, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("size %d sum %d ring %d\n", size, sum, tok);
    for (i = 0; i < size; i++) printf("%s\n", all + (size_t)i * L);
  }
  MPI_Comm_free(&sh);
  MPI_Finalize();
  return 0;
}
