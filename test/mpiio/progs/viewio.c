/* viewio: the ROMIO oracle for gompi's runtime/mpiio. Every rank writes (or
 * reads back and verifies) a deterministic byte pattern through a file view,
 * collectively (MPI_File_write_all/read_all) or independently
 * (MPI_File_write/read), with MPICH's ROMIO. test/mpiio builds the same views
 * with the Go package (test/mpiio/progs/goviewio) and checks that both write
 * byte-identical files and that each reads the other's.
 *
 *   viewio [-r] [-i] [-H key=value]... FILE VIEW [FILE VIEW]...
 *
 *   -r   read and verify instead of write
 *   -i   independent access instead of collective
 *   -H   an info hint (e.g. romio_cb_write=disable, cb_buffer_size=65536)
 *
 * VIEW (P ranks, rank r, all sizes in bytes unless said; disp 64 throughout
 * so that the file starts with 64 untouched zero bytes):
 *   contig:N              etype BYTE, filetype BYTE, disp 64+r*N; N bytes
 *   vector:C,B,R          vector(C, B, P*B, BYTE) resized to extent C*P*B,
 *                         disp 64+r*B; R repetitions (R*C*B bytes)
 *   hvector:C,B,R         the same with hvector (stride in bytes)
 *   indexed:K,U,R         K blocks, block i of length (i%3+1)*U; block i of
 *                         every rank follows block i-1 of every rank, rank
 *                         order inside; resized to the tile; R repetitions
 *   subarray-c:G0,G1      global G0 x G1 array of MPI_INT, C order, ranks on
 *   subarray-f:G0,G1      a p0 x p1 grid (p0 the largest divisor of P not above
 *                         sqrt P), block distribution, etype INT; -f: Fortran
 *                         order (G0 the fastest dimension)
 *   struct:A,B,R          struct {A BYTEs at r*A, B INTs at P*A+4*r*B},
 *                         resized to P*(A+4B); R repetitions
 *
 * Byte k of rank r's buffer is pattern(r, k) below, in every view.
 * Exit 0 on success; on a mismatch rank r prints the first wrong buffer
 * byte and the job aborts with 3.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int r, long k) { return (unsigned char)(r * 37 + k * 11 + (k >> 9) + 1); }

static void die(const char *what, int err) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(err, s, &n);
    fprintf(stderr, "viewio: %s: %s\n", what, s);
    MPI_Abort(MPI_COMM_WORLD, 2);
}
#define CHECK(call) do { int e_ = (call); if (e_ != MPI_SUCCESS) die(#call, e_); } while (0)

static void usage(void) {
    fprintf(stderr, "usage: viewio [-r] [-i] [-H key=value]... FILE VIEW [FILE VIEW]...\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* grid splits P into p0 x p1, p0 the largest divisor of P not above sqrt P. */
static void grid(int P, int *p0, int *p1) {
    int d = 1;
    for (int i = 1; i * i <= P; i++)
        if (P % i == 0) d = i;
    *p0 = d;
    *p1 = P / d;
}

/* block distribution of n over p parts: start and size of part i. */
static void block(int n, int p, int i, int *start, int *size) {
    int q = n / p, rem = n % p;
    *size = q + (i < rem);
    *start = i * q + (i < rem ? i : rem);
}

/* one writes or reads FILE through VIEW. */
static void one(int r, int P, int readmode, int indep, MPI_Info info, const char *path, const char *view) {
    char kind[32] = {0};
    long p[3] = {0, 0, 1};
    const char *colon = strchr(view, ':');
    if (!colon || colon - view >= (long)sizeof kind) usage();
    memcpy(kind, view, colon - view);
    int np = sscanf(colon + 1, "%ld,%ld,%ld", &p[0], &p[1], &p[2]);
    if (np < 1) usage();

    MPI_Offset disp = 64;
    MPI_Datatype etype = MPI_BYTE, ftype = MPI_BYTE, t;
    long nbytes = 0;
    if (!strcmp(kind, "contig")) {
        disp += (MPI_Offset)r * p[0];
        nbytes = p[0];
    } else if (!strcmp(kind, "vector") || !strcmp(kind, "hvector")) {
        long C = p[0], B = p[1], R = p[2];
        if (kind[0] == 'v') CHECK(MPI_Type_vector(C, B, P * B, MPI_BYTE, &t));
        else CHECK(MPI_Type_create_hvector(C, B, (MPI_Aint)P * B, MPI_BYTE, &t));
        CHECK(MPI_Type_create_resized(t, 0, (MPI_Aint)C * P * B, &ftype));
        MPI_Type_free(&t);
        disp += (MPI_Offset)r * B;
        nbytes = R * C * B;
    } else if (!strcmp(kind, "indexed")) {
        int K = p[0];
        long U = p[1], R = p[2], off = 0, mine = 0;
        int *len = malloc(K * sizeof(int)), *dis = malloc(K * sizeof(int));
        for (int i = 0; i < K; i++) {
            len[i] = (i % 3 + 1) * U;
            dis[i] = off + (long)r * len[i];
            off += (long)P * len[i];
            mine += len[i];
        }
        CHECK(MPI_Type_indexed(K, len, dis, MPI_BYTE, &t));
        CHECK(MPI_Type_create_resized(t, 0, off, &ftype));
        MPI_Type_free(&t);
        free(len);
        free(dis);
        nbytes = R * mine;
    } else if (!strcmp(kind, "subarray-c") || !strcmp(kind, "subarray-f")) {
        int p0, p1, g[2] = {p[0], p[1]}, sub[2], st[2];
        grid(P, &p0, &p1);
        block(g[0], p0, r / p1, &st[0], &sub[0]);
        block(g[1], p1, r % p1, &st[1], &sub[1]);
        int order = kind[9] == 'c' ? MPI_ORDER_C : MPI_ORDER_FORTRAN;
        CHECK(MPI_Type_create_subarray(2, g, sub, st, order, MPI_INT, &ftype));
        etype = MPI_INT;
        nbytes = 4L * sub[0] * sub[1];
    } else if (!strcmp(kind, "struct")) {
        long A = p[0], B = p[1], R = p[2];
        int bl[2] = {A, B};
        MPI_Aint d[2] = {(MPI_Aint)r * A, (MPI_Aint)P * A + 4L * r * B};
        MPI_Datatype ty[2] = {MPI_BYTE, MPI_INT};
        CHECK(MPI_Type_create_struct(2, bl, d, ty, &t));
        CHECK(MPI_Type_create_resized(t, 0, (MPI_Aint)P * (A + 4 * B), &ftype));
        MPI_Type_free(&t);
        nbytes = R * (A + 4 * B);
    } else usage();
    if (ftype != MPI_BYTE) CHECK(MPI_Type_commit(&ftype));

    unsigned char *buf = malloc(nbytes ? nbytes : 1);
    for (long k = 0; k < nbytes; k++) buf[k] = readmode ? 0 : pattern(r, k);
    MPI_File fh;
    int amode = readmode ? MPI_MODE_RDONLY : MPI_MODE_CREATE | MPI_MODE_WRONLY;
    CHECK(MPI_File_open(MPI_COMM_WORLD, path, amode, info, &fh));
    CHECK(MPI_File_set_view(fh, disp, etype, ftype, "native", info));
    MPI_Status st;
    /* The count is in bytes so that struct views (BYTE and INT mixed) work. */
    if (nbytes > 0x7fffffff) { fprintf(stderr, "viewio: %ld bytes is too many\n", nbytes); MPI_Abort(MPI_COMM_WORLD, 2); }
    int n = (int)nbytes;
    if (readmode) {
        if (indep) CHECK(MPI_File_read(fh, buf, n, MPI_BYTE, &st));
        else CHECK(MPI_File_read_all(fh, buf, n, MPI_BYTE, &st));
    } else {
        if (indep) CHECK(MPI_File_write(fh, buf, n, MPI_BYTE, &st));
        else CHECK(MPI_File_write_all(fh, buf, n, MPI_BYTE, &st));
    }
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (got != n) {
        fprintf(stderr, "viewio: rank %d: %s %d of %d bytes\n", r, readmode ? "read" : "wrote", got, n);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    CHECK(MPI_File_close(&fh));
    if (readmode)
        for (long k = 0; k < nbytes; k++)
            if (buf[k] != pattern(r, k)) {
                fprintf(stderr, "viewio: rank %d: %s: view byte %ld is %d, want %d\n", r, path, k, buf[k], pattern(r, k));
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
    if (ftype != MPI_BYTE) MPI_Type_free(&ftype);
    printf("viewio: rank %d %s %ld bytes of %s\n", r, readmode ? "verified" : "wrote", nbytes, path);
    free(buf);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    int readmode = 0, indep = 0;
    MPI_Info info;
    MPI_Info_create(&info);
    int a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "-r")) readmode = 1;
        else if (!strcmp(argv[a], "-i")) indep = 1;
        else if (!strcmp(argv[a], "-H") && a + 1 < argc) {
            char kv[256];
            snprintf(kv, sizeof kv, "%s", argv[++a]);
            char *eq = strchr(kv, '=');
            if (!eq) usage();
            *eq = 0;
            MPI_Info_set(info, kv, eq + 1);
        } else usage();
    }
    if (argc - a < 2 || (argc - a) % 2) usage();
    for (; a < argc; a += 2) one(r, P, readmode, indep, info, argv[a], argv[a + 1]);
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}
