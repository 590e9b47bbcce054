/* MPI_Allreduce of a known vector; every rank checks the sum. */
#include <mpi.h>
#include <stdio.h>
#define N 1000
int main(int argc, char **argv) {
  int rank, size, i, bad = 0;
  static double in[N], out[N];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (i = 0; i < N; i++) in[i] = rank + i;
  MPI_Allreduce(in, out, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (i = 0; i < N; i++)
    if (out[i] != (double)size * (size - 1) / 2 + (double)i * size) bad++;
  if (bad) { printf("rank %d: %d wrong sums\n", rank, bad); MPI_Abort(MPI_COMM_WORLD, 4); }
  if (rank == 0) printf("allreduce ok size %d\n", size);
  MPI_Finalize();
  return 0;
}
