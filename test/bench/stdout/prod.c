/* prod BYTES LINE WRITE: writes BYTES bytes to stdout in write(2) calls of
 * WRITE bytes, in lines of LINE bytes ending in '\n' (0: no newline at all).
 * The producer of the stdout-throughput bench (test/bench/stdout.go): a C
 * program, so that the rank itself costs next to nothing. */
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc != 4)
		return 2;
	long total = atol(argv[1]), line = atol(argv[2]), ws = atol(argv[3]);
	if (ws <= 0)
		return 2;
	char *buf = malloc(ws);
	if (!buf)
		return 1;
	for (long i = 0; i < ws; i++)
		buf[i] = (line > 0 && i % line == line - 1) ? '\n' : 'a' + i % 26;
	while (total > 0) {
		long n = total < ws ? total : ws;
		for (long off = 0; off < n;) {
			ssize_t w = write(1, buf + off, n - off);
			if (w <= 0)
				return 1;
			off += w;
		}
		total -= n;
	}
	return 0;
}
