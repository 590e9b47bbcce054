/* One PMI-1 request on PMI_FD and its reply line, for the test programs
 * that speak the wire protocol themselves (bigput.c, manykeys.c). */
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
