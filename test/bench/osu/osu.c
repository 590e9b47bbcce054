/* OSU-style micro-benchmarks for MPICH, the reference gompi-bench is
 * measured against in the same run (make bench). Same sizes, iteration
 * counts and output format as cmd/gompi-bench:
 *   latency   one-way ping-pong time between ranks 0 and 1, us (other ranks wait
 *             in the barrier that starts the next size)
 *   pairs     the same between ranks 2k and 2k+1, all pairs at once, us, from
 *             the first rank's start to the last rank's end on the host's
 *             wall clock (the oversubscribed case: 4 ranks on 2 cores)
 *   bw        streaming bandwidth 0 -> 1, windows of 64 nonblocking sends, GB/s
 *   mr        message rate (osu_mbw_mr): ranks i and i+size/2 in pairs, all at
 *             once, windows of 64 nonblocking sends each acknowledged (4 bytes),
 *             millions of messages/s summed over pairs, 1 B to 64 KiB
 *             (cmd/gompi-bench/mr.go)
 *   mrp       mr with persistent requests: per size, windows of 64
 *             MPI_Send_init/MPI_Recv_init made once, each iteration
 *             MPI_Startall and MPI_Waitall (cmd/gompi-bench/mr.go)
 *   farm      task farm: rank 0 hands 2000 tasks (8 B) to the workers that ask
 *             first (MPI_ANY_SOURCE), each computes 10-80 us (busy); time of
 *             the whole farm, ms (cmd/gompi-bench/farm.go; ITERS: task count)
 *   allreduce time per MPI_Allreduce of doubles (sum), us (max over ranks)
 *   barrier   time per MPI_Barrier, us
 *   overlap   MPI_Iallreduce of MAXBYTES hidden behind as much local compute
 *             (passes over an array of that size, calibrated on rank 0 to
 *             last as long as the allreduce): overlap_comm, overlap_compute,
 *             overlap_both (us, max over ranks) and overlap, the ratio of both
 *             to the longer of the two alone (cmd/gompi-bench/overlap.go)
 * Output lines: "<bench> <bytes> <value>". Usage: osu BENCH [MAXBYTES [ITERS]];
 * ITERS replaces the iteration count of every size (gompi-bench -iters), with
 * the warm-up scaled the same way (barrier: ITERS/20). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int force;  /* ITERS, 0: the counts below */
static int iters(size_t n, int small, int large) { return force ? force : n <= 8192 ? small : large; }

static double *ov_in, *ov_out, *ov_work;
static int ov_cnt;
static void compute(long passes) {
  for (long p = 0; p < passes; p++)
    for (int i = 0; i < ov_cnt; i++) ov_work[i] = ov_work[i] * 0.999 + 0.001;
}
/* mode 0: MPI_Allreduce; 1: compute; 2: MPI_Iallreduce + compute + MPI_Wait */
static double time_mode(int mode, int it, long passes) {
  double t0 = 0, dt, worst;
  int warm = it / 10 + 1;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < it + warm; i++) {
    if (i == warm) t0 = MPI_Wtime();
    if (mode == 0) MPI_Allreduce(ov_in, ov_out, ov_cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (mode == 1) compute(passes);
    if (mode == 2) {
      MPI_Request r;
      MPI_Iallreduce(ov_in, ov_out, ov_cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
      compute(passes);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  }
  dt = (MPI_Wtime() - t0) * 1e6 / it;
  MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *bench = argc > 1 ? argv[1] : "latency";
  size_t max = argc > 2 ? (size_t)atol(argv[2]) : (8u << 20);
  force = argc > 3 ? atoi(argv[3]) : 0;
  char *a = malloc(max ? max : 1), *b = malloc(max ? max : 1);
  memset(a, 1, max);
  memset(b, 0, max);
  if (!strcmp(bench, "latency")) {
    for (size_t n = 1; n <= max; n *= 2) {
      int it = iters(n, 10000, 200), warm = it / 10;
      double t0 = 0;
      MPI_Barrier(MPI_COMM_WORLD);
      for (int i = 0; i < it + warm; i++) {
        if (i == warm) t0 = MPI_Wtime();
        if (rank == 0) {
          MPI_Send(a, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
          MPI_Recv(b, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
          MPI_Recv(b, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(a, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
      }
      if (rank == 0) printf("latency %zu %.3f\n", n, (MPI_Wtime() - t0) * 1e6 / (2.0 * it));
    }
  } else if (!strcmp(bench, "pairs")) {
    /* Timed on the host's wall clock from the earliest rank's start to the
     * latest rank's end, so a pair that runs while the other waits for a
     * CPU is not timed alone. All ranks must share the clock (one host). */
    int peer = rank ^ 1, active = peer < size;
    for (size_t n = 1; n <= max; n *= 2) {
      int it = iters(n, 10000, 200), warm = it / 10;
      long long t[2], r[2];
      for (int phase = 0; phase < 2; phase++) {
        MPI_Barrier(MPI_COMM_WORLD);
        t[0] = -wall_ns();
        for (int i = 0; i < (phase ? it : warm) && active; i++) {
          if (rank % 2 == 0) {
            MPI_Send(a, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          } else {
            MPI_Recv(b, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(a, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
          }
        }
        t[1] = wall_ns();
      }
      /* max of -start is -(earliest start) */
      MPI_Reduce(t, r, 2, MPI_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) printf("pairs %zu %.3f\n", n, (double)(r[1] + r[0]) / 1e3 / (2.0 * it));
    }
  } else if (!strcmp(bench, "bw")) {
    enum { W = 64 };
    MPI_Request req[W];
    MPI_Status st[W];
    for (size_t n = 1; n <= max; n *= 2) {
      int it = iters(n, 200, 20), warm = 2;
      double t0 = 0;
      MPI_Barrier(MPI_COMM_WORLD);
      for (int i = 0; i < it + warm; i++) {
        if (i == warm) t0 = MPI_Wtime();
        if (rank == 0) {
          for (int w = 0; w < W; w++) MPI_Isend(a, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
          MPI_Waitall(W, req, st);
          MPI_Recv(b, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
          for (int w = 0; w < W; w++) MPI_Irecv(b, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
          MPI_Waitall(W, req, st);
          MPI_Send(a, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
        }
      }
      if (rank == 0) printf("bw %zu %.4f\n", n, (double)n * W * it / (MPI_Wtime() - t0) / 1e9);
    }
  } else if (!strcmp(bench, "mr") || !strcmp(bench, "mrp")) {
    enum { W = 64 };
    MPI_Request req[W];
    MPI_Status st[W];
    int pairs = size / 2, persistent = !strcmp(bench, "mrp");
    char ack[4] = {0};
    for (size_t n = 1; n <= max && n <= (64u << 10); n *= 2) {
      int it = iters(n, 2000, 50), warm = it / 10;
      double t0 = 0, rate = 0, sum = 0;
      MPI_Barrier(MPI_COMM_WORLD);
      if (persistent && rank < 2 * pairs)
        for (int w = 0; w < W; w++) {
          if (rank < pairs) MPI_Send_init(a, (int)n, MPI_BYTE, rank + pairs, 2, MPI_COMM_WORLD, &req[w]);
          else MPI_Recv_init(b, (int)n, MPI_BYTE, rank - pairs, 2, MPI_COMM_WORLD, &req[w]);
        }
      for (int i = 0; i < it + warm && rank < 2 * pairs; i++) {
        if (i == warm) t0 = MPI_Wtime();
        if (persistent) MPI_Startall(W, req);
        if (rank < pairs) {
          if (!persistent)
            for (int w = 0; w < W; w++) MPI_Isend(a, (int)n, MPI_BYTE, rank + pairs, 2, MPI_COMM_WORLD, &req[w]);
          MPI_Waitall(W, req, st);
          MPI_Recv(ack, 4, MPI_BYTE, rank + pairs, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          if (!persistent)
            for (int w = 0; w < W; w++) MPI_Irecv(b, (int)n, MPI_BYTE, rank - pairs, 2, MPI_COMM_WORLD, &req[w]);
          MPI_Waitall(W, req, st);
          MPI_Send(ack, 4, MPI_BYTE, rank - pairs, 3, MPI_COMM_WORLD);
        }
      }
      if (rank < pairs) rate = (double)W * it / (MPI_Wtime() - t0) / 1e6;
      if (persistent && rank < 2 * pairs)
        for (int w = 0; w < W; w++) MPI_Request_free(&req[w]);
      MPI_Reduce(&rate, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) printf("%s %zu %.4f\n", bench, n, sum);
    }
  } else if (!strcmp(bench, "farm")) {
    long long msg = 0, tasks = force ? force : 2000;
    MPI_Barrier(MPI_COMM_WORLD);
    long long t0 = wall_ns();
    if (rank == 0) {
      MPI_Status st;
      long long next = 0;
      for (int stopped = 0; stopped < size - 1;) {
        MPI_Recv(&msg, 1, MPI_LONG_LONG, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &st);
        msg = -1;
        if (next < tasks) msg = next++;
        else stopped++;
        MPI_Send(&msg, 1, MPI_LONG_LONG, st.MPI_SOURCE, 2, MPI_COMM_WORLD);
      }
    } else {
      for (;;) {
        MPI_Send(&msg, 1, MPI_LONG_LONG, 0, 1, MPI_COMM_WORLD);
        MPI_Recv(&msg, 1, MPI_LONG_LONG, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (msg < 0) break;
        long long end = wall_ns() + (msg % 8 + 1) * 10000;
        while (wall_ns() < end) {
        }
      }
    }
    if (rank == 0) printf("farm 8 %.3f\n", (double)(wall_ns() - t0) / 1e6);
  } else if (!strcmp(bench, "allreduce")) {
    for (size_t n = 8; n <= max; n *= 2) {
      int cnt = (int)(n / sizeof(double)), it = iters(n, 2000, 50), warm = it / 10 + 1;
      double t0 = 0, dt, worst;
      MPI_Barrier(MPI_COMM_WORLD);
      for (int i = 0; i < it + warm; i++) {
        if (i == warm) t0 = MPI_Wtime();
        MPI_Allreduce(a, b, cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      }
      dt = (MPI_Wtime() - t0) * 1e6 / it;
      MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) printf("allreduce %zu %.3f\n", n, worst);
    }
  } else if (!strcmp(bench, "barrier")) {
    int it = force ? force : 20000, warm = force ? force / 20 : 1000;
    double t0 = 0;
    for (int i = 0; i < it + warm; i++) {
      if (i == warm) t0 = MPI_Wtime();
      MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) printf("barrier 0 %.3f\n", (MPI_Wtime() - t0) * 1e6 / it);
  } else if (!strcmp(bench, "overlap")) {
    size_t n = max < 8 ? 8 : max / 8 * 8;
    int it = iters(n, 100, 20);
    ov_cnt = (int)(n / sizeof(double));
    ov_in = malloc(n), ov_out = malloc(n), ov_work = malloc(n);
    for (int i = 0; i < ov_cnt; i++) ov_in[i] = ov_work[i] = 1;
    double tcomm = time_mode(0, it, 0);
    double t0 = MPI_Wtime();
    compute(4);
    double pass = (MPI_Wtime() - t0) * 1e6 / 4;
    long passes = (long)(tcomm / pass + 0.5);
    if (passes < 1) passes = 1;
    MPI_Bcast(&passes, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    double tcomp = time_mode(1, it, passes), tboth = time_mode(2, it, passes);
    if (rank == 0) {
      printf("overlap_comm %zu %.3f\noverlap_compute %zu %.3f\noverlap_both %zu %.3f\n", n, tcomm, n, tcomp, n, tboth);
      printf("overlap %zu %.3f\n", n, tboth / (tcomm > tcomp ? tcomm : tcomp));
    }
    free(ov_in), free(ov_out), free(ov_work);
  } else {
    if (rank == 0) fprintf(stderr, "osu: unknown benchmark %s (latency, pairs, bw, mr, mrp, farm, allreduce, barrier, overlap)\n", bench);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  free(a);
  free(b);
  MPI_Finalize();
  return 0;
}
