/* clockshift.c - an LD_PRELOAD library that shifts the wall clock of one
 * process, for tests of wall-clock steps (NTP, an operator's date).
 *
 * CLOCK_REALTIME (and its coarse variant) as read through clock_gettime is
 * the real time plus an offset in milliseconds: the first 8 bytes (a signed
 * native-endian integer) of the file named by $CLOCKSHIFT_FILE, mapped
 * shared, so a test steps the clock by rewriting that file in place. Every
 * other clock is left alone. Built by the tests that use it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static volatile int64_t *offset_ms;

__attribute__((constructor)) static void clockshift_init(void)
{
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    const char *path = getenv("CLOCKSHIFT_FILE");
    int fd = path ? open(path, O_RDONLY) : -1;
    if (fd < 0)
        return;
    void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED)
        offset_ms = p;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (!real_clock_gettime)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real_clock_gettime(id, ts);
    if (rc != 0 || !offset_ms || (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE))
        return rc;
    int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *offset_ms * 1000000;
    ts->tv_sec = (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
    return 0;
}
