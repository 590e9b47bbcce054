/* Speaks PMI-1 on PMI_FD as MPICH 4.1+'s client does, whose lines are sized
 * to fit: puts a value of argv[1] bytes (within get_maxes' vallen_max, but
 * the line is longer than 1024 bytes), fences, reads it back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fd;
static char buf[8192];

static const char *req(const char *line)
{
    size_t n = strlen(line), off = 0;
    while (off < n) {
        ssize_t w = write(fd, line + off, n - off);
        if (w <= 0) { perror("write"); exit(2); }
        off += w;
    }
    size_t got = 0;
    while (got == 0 || buf[got - 1] != '\n') {
        ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (r <= 0) { fprintf(stderr, "no reply to %.40s\n", line); exit(3); }
        got += r;
    }
    buf[got - 1] = 0;
    return buf;
}

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
