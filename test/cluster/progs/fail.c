/* Failure paths of an MPICH job: argv[1] says what rank argv[2] does
 * after MPI_Init (abort, segv, exit0 = return without MPI_Finalize, exit3)
 * while the others wait in MPI_Barrier; "nonl" has every rank print a
 * line without its newline and finalize; "big" writes argv[3] lines to
 * stdout and stderr from every rank; "stdin" has rank 0 count its stdin. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int rank, size, who = argc > 2 ? atoi(argv[2]) : 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *m = argv[1];
  if (rank == who) {
    if (!strcmp(m, "abort")) { fprintf(stderr, "rank %d aborting\n", rank); MPI_Abort(MPI_COMM_WORLD, 7); }
    if (!strcmp(m, "segv")) { sleep(1); *(volatile int *)0 = 1; }
    if (!strcmp(m, "exit0")) { sleep(1); return 0; }
    if (!strcmp(m, "exit3")) { sleep(1); exit(3); }
  }
  if (!strcmp(m, "nonl")) { printf("rank %d no newline", rank); MPI_Finalize(); return 0; }
  if (!strcmp(m, "big")) {
    int n = argc > 3 ? atoi(argv[3]) : 20000, i;
    for (i = 0; i < n; i++) { printf("out rank %d line %d xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", rank, i); fprintf(stderr, "err rank %d line %d yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n", rank, i); }
    MPI_Finalize(); return 0;
  }
  if (!strcmp(m, "stdin")) {
    if (rank == 0) { char buf[65536]; size_t t = 0, k; while ((k = fread(buf, 1, sizeof buf, stdin)) > 0) t += k; printf("rank 0 read %zu\n", t); }
    MPI_Barrier(MPI_COMM_WORLD); MPI_Finalize(); return 0;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  printf("rank %d passed barrier\n", rank);
  MPI_Finalize();
  return 0;
}
