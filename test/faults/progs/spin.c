/* MPICH rank for the fault-injection test: a child in the background, then
   about a second of allreduces. */
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int x = 1, y = 0, i;
  if (system("sleep 600 >/dev/null 2>&1 &") != 0) return 2;
  MPI_Init(&argc, &argv);
  for (i = 0; i < 50; i++) {
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    usleep(20000);
  }
  MPI_Finalize();
  return 0;
}
