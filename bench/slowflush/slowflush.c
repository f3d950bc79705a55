/* A disk whose flush takes time, for measuring on a machine whose flush is free.
 *
 * LD_PRELOAD this into a process (a PostgreSQL cluster, `porteiro serve` on SQLite) and
 * every fsync/fdatasync first does the real flush, then sleeps SLOW_FLUSH_US
 * microseconds (default 2000: the order of an SSD that honours flushes). Nothing else
 * changes, so durability and every other system call stay as they are.
 *
 *   gcc -shared -fPIC -O2 -o /tmp/slowflush.so bench/slowflush/slowflush.c -ldl
 *
 * docs/performance.md ("On a disk that flushes") shows how the figures there were taken.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

static useconds_t delay(void) {
    const char *text = getenv("SLOW_FLUSH_US");
    return text ? (useconds_t)atoi(text) : 2000;
}

typedef int (*flush_fn)(int);

/* The libc function `name` (looked up once into `*real`) on `fd`, then the delay. */
static int flush_then_wait(const char *name, flush_fn *real, int fd) {
    if (!*real) *real = (flush_fn)dlsym(RTLD_NEXT, name);
    int result = (*real)(fd);
    usleep(delay());
    return result;
}

int fdatasync(int fd) {
    static flush_fn real;
    return flush_then_wait("fdatasync", &real, fd);
}

int fsync(int fd) {
    static flush_fn real;
    return flush_then_wait("fsync", &real, fd);
}
