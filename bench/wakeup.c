/* wakeup.c - what waking a thread, and working after a sleep, cost on this
 * machine: the two figures that make steady traffic cost hookwheel and Redis
 * two to three times more per timer than a burst (bench/results, Sizing).
 *
 *   build/bench/wakeup [rounds]
 *
 * 1. Ping-pong: two threads hand a token back and forth through eventfds,
 *    each sleeping in read() until the other writes: wall time and CPU time
 *    (both threads) per round trip (two wake-ups), as the kernel places the
 *    threads, then with both pinned to CPU 0 (no wake-up crosses cores).
 * 2. Work after a sleep: a fixed piece of work (2,000 random increments in a
 *    1 MiB table) timed back to back, then after a sleep of 50 us and 1 ms
 *    before each piece. On a machine whose idle CPUs lose their caches and
 *    TLB (a virtual machine whose vCPU halts), the same work takes several
 *    times longer after a sleep.
 * Prints one line per measurement. No timing assertion: a report. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int to_peer, to_main;
static int rounds = 50000;
static int pin;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static double cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static void pin_cpu0(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *peer(void *arg)
{
    (void)arg;
    uint64_t v;
    if (pin)
        pin_cpu0();
    for (int i = 0; i < rounds; i++) {
        if (read(to_peer, &v, sizeof v) != sizeof v || write(to_main, &v, sizeof v) != sizeof v)
            exit(1);
    }
    return NULL;
}

static void ping_pong(int pinned)
{
    pthread_t t;
    uint64_t v = 1;
    pin = pinned;
    to_peer = eventfd(0, 0);
    to_main = eventfd(0, 0);
    if (to_peer < 0 || to_main < 0 || pthread_create(&t, NULL, peer, NULL) != 0) {
        perror("wakeup");
        exit(1);
    }
    if (pinned)
        pin_cpu0();
    double w0 = now_us(), c0 = cpu_us();
    for (int i = 0; i < rounds; i++) {
        if (write(to_peer, &v, sizeof v) != sizeof v || read(to_main, &v, sizeof v) != sizeof v)
            exit(1);
    }
    double w1 = now_us(), c1 = cpu_us();
    pthread_join(t, NULL);
    close(to_peer);
    close(to_main);
    printf("ping-pong %s: %.1f us wall, %.1f us CPU per round trip (two wake-ups)\n",
           pinned ? "both on CPU 0" : "as scheduled", (w1 - w0) / rounds, (c1 - c0) / rounds);
    if (pinned) { /* back to every CPU for what follows */
        cpu_set_t all;
        CPU_ZERO(&all);
        for (int i = 0; i < CPU_SETSIZE; i++)
            CPU_SET(i, &all);
        pthread_setaffinity_np(pthread_self(), sizeof all, &all);
    }
}

static void work_after_sleep(unsigned char *table, int sleep_us)
{
    int n = rounds / 5;
    double total = 0;
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15u;
        for (int k = 0; k < 2000; k++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            table[(x >> 40) & ((1u << 20) - 1)]++;
        }
        total += now_us() - t0;
        if (sleep_us)
            usleep((useconds_t)sleep_us);
    }
    printf("work after a sleep of %4d us: %.2f us per piece\n", sleep_us, total / n);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = atoi(argv[1]) > 0 ? atoi(argv[1]) : rounds;
    ping_pong(0);
    ping_pong(1);
    unsigned char *table = malloc(1u << 20);
    if (!table)
        return 1;
    memset(table, 1, 1u << 20);
    work_after_sleep(table, 0);
    work_after_sleep(table, 50);
    work_after_sleep(table, 1000);
    free(table);
    return 0;
}
