/* iobench: the ROMIO side of `make bench-io` (test/bench -io). Rank 0 prints
 * one line per run, the same as cmd/gompi-iobench:
 *
 *   io <write|read> <hard|contig|fpp> <coll|indep> <ranks> <bytes> <seconds>
 *
 * seconds is the wall time from a barrier before MPI_File_open to a barrier
 * after MPI_File_close (a write includes MPI_File_sync, as dd's
 * conv=fdatasync), so MB/s = bytes / seconds / 1e6.
 *
 *   iobench [-i] [-H key=value]... write|read PATTERN FILE BYTES_PER_RANK
 *
 *   hard    IOR's "hard" pattern: 47008-byte records, record j of rank r at
 *           offset (j*P + r)*47008; the view is vector(n, 47008, P*47008)
 *           displaced by r*47008 and each rank writes all its records in one
 *           call (MPI_File_write_all, or MPI_File_write with -i)
 *   contig  rank r owns [r*B, (r+1)*B), written in 8 MiB calls
 *   fpp     file per process (FILE.<rank>, MPI_COMM_SELF), 8 MiB calls; -i is
 *           meaningless here and ignored
 *
 * BYTES_PER_RANK is rounded down to whole records (hard) or 8 MiB calls
 * (others, unless smaller). A read checks one byte per 4 KiB of the pattern.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC 47008L
#define XFER (8L << 20)

static unsigned char pat(int r, long k) { return (unsigned char)(r * 29 + (k >> 12) * 7 + 1); }

static void die(const char *what, int err) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(err, s, &n);
    fprintf(stderr, "iobench: %s: %s\n", what, s);
    MPI_Abort(MPI_COMM_WORLD, 2);
}
#define CHECK(call) do { int e_ = (call); if (e_ != MPI_SUCCESS) die(#call, e_); } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    int indep = 0, a = 1;
    MPI_Info info;
    MPI_Info_create(&info);
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "-i")) indep = 1;
        else if (!strcmp(argv[a], "-H") && a + 1 < argc) {
            char kv[256], *eq;
            snprintf(kv, sizeof kv, "%s", argv[++a]);
            if (!(eq = strchr(kv, '='))) break;
            *eq = 0;
            MPI_Info_set(info, kv, eq + 1);
        } else break;
    }
    if (argc - a != 4 || (strcmp(argv[a], "write") && strcmp(argv[a], "read"))) {
        fprintf(stderr, "usage: iobench [-i] [-H key=value]... write|read hard|contig|fpp FILE BYTES_PER_RANK\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int wr = !strcmp(argv[a], "write");
    const char *pattern = argv[a + 1], *path = argv[a + 2];
    long per = atol(argv[a + 3]);
    int hard = !strcmp(pattern, "hard"), fpp = !strcmp(pattern, "fpp");
    if (!hard && !fpp && strcmp(pattern, "contig")) {
        fprintf(stderr, "iobench: unknown pattern %s\n", pattern);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (fpp) indep = 1;
    long xfer = hard ? REC : (per < XFER ? per : XFER);
    long n = per / xfer;
    per = n * xfer;
    long chunk = hard ? per : xfer; /* bytes per call */
    unsigned char *buf = malloc(chunk);
    if (wr)
        for (long k = 0; k < chunk; k++) buf[k] = pat(r, k);

    MPI_Datatype ftype = MPI_BYTE;
    MPI_Offset disp = 0;
    char fname[4096];
    snprintf(fname, sizeof fname, fpp ? "%s.%d" : "%s", path, r);
    if (hard) {
        CHECK(MPI_Type_vector(n, REC, P * REC, MPI_BYTE, &ftype));
        CHECK(MPI_Type_commit(&ftype));
        disp = r * REC;
    } else if (!fpp) disp = (MPI_Offset)r * per;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_File fh;
    int amode = wr ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY;
    CHECK(MPI_File_open(fpp ? MPI_COMM_SELF : MPI_COMM_WORLD, fname, amode, info, &fh));
    CHECK(MPI_File_set_view(fh, disp, MPI_BYTE, ftype, "native", info));
    MPI_Status st;
    for (long done = 0; done < per; done += chunk) {
        if (wr) {
            if (indep) CHECK(MPI_File_write(fh, buf, chunk, MPI_BYTE, &st));
            else CHECK(MPI_File_write_all(fh, buf, chunk, MPI_BYTE, &st));
        } else {
            if (indep) CHECK(MPI_File_read(fh, buf, chunk, MPI_BYTE, &st));
            else CHECK(MPI_File_read_all(fh, buf, chunk, MPI_BYTE, &st));
            for (long k = 0; k < chunk; k += 4096)
                if (buf[k] != pat(r, k)) {
                    fprintf(stderr, "iobench: rank %d: %s: byte %ld of the view is %d, want %d\n", r, fname, done + k, buf[k], pat(r, k));
                    MPI_Abort(MPI_COMM_WORLD, 3);
                }
        }
    }
    if (wr) CHECK(MPI_File_sync(fh));
    CHECK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (r == 0)
        printf("io %s %s %s %d %ld %.6f\n", wr ? "write" : "read", pattern, indep ? "indep" : "coll", P, per * P, t);
    if (ftype != MPI_BYTE) MPI_Type_free(&ftype);
    MPI_Info_free(&info);
    free(buf);
    MPI_Finalize();
    return 0;
}
