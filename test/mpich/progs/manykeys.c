/* Speaks PMI-1 on PMI_FD: every rank puts argv[1] keys of 1000 bytes, fences,
 * and reads back a key of every rank (a big job's business cards in one
 * round: more data than one control frame holds). */
#include "rawpmi.h"

int main(int argc, char **argv)
{
    int keys = atoi(argv[1]), rank, size;
    fd = atoi(getenv("PMI_FD"));
    rank = atoi(getenv("PMI_RANK"));
    size = atoi(getenv("PMI_SIZE"));
    req("cmd=init pmi_version=1 pmi_subversion=1\n");
    char kvs[300], val[1001], line[1400];
    sscanf(req("cmd=get_my_kvsname\n"), "cmd=my_kvsname kvsname=%299s", kvs);
    memset(val, 'a' + rank % 26, 1000);
    val[1000] = 0;
    for (int i = 0; i < keys; i++) {
        sprintf(line, "cmd=put kvsname=%s key=k%d-%d value=%s\n", kvs, rank, i, val);
        if (!strstr(req(line), "rc=0")) { fprintf(stderr, "put %d: %s\n", i, buf); return 4; }
    }
    if (strcmp(req("cmd=barrier_in\n"), "cmd=barrier_out")) { fprintf(stderr, "barrier: %s\n", buf); return 5; }
    int ok = 0;
    for (int r = 0; r < size; r++) {
        sprintf(line, "cmd=get kvsname=%s key=k%d-%d\n", kvs, r, keys - 1);
        const char *v = strstr(req(line), "value=");
        ok += v && strlen(v + 6) == 1000 && v[6] == 'a' + r % 26;
    }
    printf("rank %d read %d of %d\n", rank, ok, size);
    req("cmd=finalize\n");
    return 0;
}
