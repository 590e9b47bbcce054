/* Name service across jobs: "names publish NAME PORT READY DONE" publishes
 * NAME, creates the file READY, waits (up to 60 s) for the file DONE, then
 * unpublishes; "names lookup NAME" prints what every rank finds. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int rank, rc;
  char port[MPI_MAX_PORT_NAME];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (argc == 6 && !strcmp(argv[1], "publish")) {
    rc = MPI_Publish_name(argv[2], MPI_INFO_NULL, argv[3]);
    printf("publish rc=%d\n", rc);
    fflush(stdout);
    FILE *f = fopen(argv[4], "w");
    if (f) fclose(f);
    for (int i = 0; i < 600 && access(argv[5], F_OK) != 0; i++) usleep(100000);
    rc = MPI_Unpublish_name(argv[2], MPI_INFO_NULL, argv[3]);
    printf("unpublish rc=%d\n", rc);
  } else if (argc == 3 && !strcmp(argv[1], "lookup")) {
    rc = MPI_Lookup_name(argv[2], MPI_INFO_NULL, port);
    if (rc == MPI_SUCCESS && port[0] != '\0')
      printf("rank %d found %s\n", rank, port);
    else
      printf("rank %d notfound\n", rank);
  } else {
    fprintf(stderr, "usage: names publish NAME PORT READY DONE | names lookup NAME\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return 0;
}
