/* MPI_Init and MPI_Finalize only: the launch benchmark's workload. */
#include <mpi.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Finalize();
  return 0;
}
