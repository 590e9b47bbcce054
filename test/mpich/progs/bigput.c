/* Speaks PMI-1 on PMI_FD as MPICH 4.1+'s client does, whose lines are sized
 * to fit: puts a value of argv[1] bytes (within get_maxes' vallen_max, but
 * the line is longer than 1024 bytes), fences, reads it back. */
#include "rawpmi.h"

int main(int argc, char **argv)
{
    int len = argc > 1 ? atoi(argv[1]) : 1000;
    fd = atoi(getenv("PMI_FD"));
    req("cmd=init pmi_version=1 pmi_subversion=1\n");
    char kvs[300];
    sscanf(req("cmd=get_my_kvsname\n"), "cmd=my_kvsname kvsname=%299s", kvs);
    char *val = malloc(len + 1), *line = malloc(len + 400);
    memset(val, 'v', len);
    val[len] = 0;
    sprintf(line, "cmd=put kvsname=%s key=big value=%s\n", kvs, val);
    printf("put line %zu bytes: %s\n", strlen(line), req(line));
    req("cmd=barrier_in\n");
    sprintf(line, "cmd=get kvsname=%s key=big\n", kvs);
    const char *v = strstr(req(line), "value=");
    printf("got %zu bytes back\n", v && strcmp(v + 6, val) == 0 ? strlen(v + 6) : 0);
    req("cmd=finalize\n");
    return 0;
}
