/* wheel_bench.c - microbenchmark of the hashed timing wheel (service/wheel.c).
 *
 * Single-threaded; run it on an otherwise quiet machine. Four workloads:
 *
 *  W1  cost of wheel_add and wheel_cancel: 1,000,000 timers with delays in
 *      [1 ms, 10 s], tick 1 ms, for 4096 slots (the service default,
 *      HOOKWHEEL_WHEEL_SLOTS) and 65536 slots; then the even-indexed half is
 *      cancelled (really unlinked). CLOCK_MONOTONIC around each whole loop,
 *      divided by its count. The wtimer array is allocated and initialised
 *      (wtimer_init, due_ms) before timing: the service embeds the wtimer in
 *      its job, so neither allocation nor the random draw is the wheel's cost.
 *  W2  lateness in real time: 200,000 timers with delays in [100 ms, 10 s]
 *      (--quick: 40,000 in [100 ms, 2 s]), all added at start, then the
 *      engine's loop shape: sleep until the next tick with work
 *      (wheel_next_ms, clock_nanosleep to the absolute ms boundary), advance,
 *      process. Lateness = wall-clock us when a timer is processed minus
 *      due_ms * 1000; "early" counts negative lateness. A human-readable
 *      line adds how late each sleep woke after its ms boundary and the
 *      longest wheel_advance, to tell the scheduler's share from the wheel's.
 *  W3  bytes of bookkeeping per pending timer at 1,000,000 pending:
 *      sizeof(wtimer) + the wheel's own heap / N. The heap is measured with
 *      mallinfo2() around wheel_create, as uordblks + hblkhd (in-use arena
 *      bytes plus mmapped chunks: a large slot array is served by mmap and
 *      would be missed by uordblks alone). It includes malloc's chunk
 *      overhead. The slot-count arithmetic is printed as a cross-check (and
 *      used, said so, when mallinfo2 cannot see the allocator, as under
 *      ASan), and the heap is measured again after the 1,000,000 adds (it
 *      must not grow).
 *  W4  a burst: 100,000 timers due at the same instant, 1 s ahead; same loop
 *      as W2; time from that instant to the return of the wheel_advance that
 *      hands out the last of them.
 *
 * Delays come from splitmix64 (service/backoff.h) with seed 42, timer i
 * taking the i-th draw: delay = lo + next() mod (hi - lo + 1). Real time is
 * CLOCK_REALTIME in ms and us (service/clock.h), as in the service.
 *
 * Output: human-readable lines, and per workload one line starting with
 * "RESULT <workload>" of space-separated key=value pairs; the keys are stable
 * (bench/wheel_bench.sh and the results harness parse them). Exit status 0 on
 * success, 1 when a sanity check fails, 2 on bad usage. */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backoff.h"
#include "clock.h"
#include "list.h"
#include "wheel.h"
#include "xalloc.h"

#define SEED 42
#define TICK_MS 1
#define SLOTS_DEFAULT 4096 /* config.c: wheel-slots */
#define SLOTS_LARGE 65536
#define W1_N 1000000
#define W3_N 1000000
#define W4_N 100000
#define W4_AHEAD_MS 1000

/* The W2 parameters, full or --quick. */
struct w2_params {
    size_t n;
    uint64_t lo_ms, hi_ms;
};

static const struct w2_params w2_full = {200000, 100, 10000};
static const struct w2_params w2_quick = {40000, 100, 2000};

/* ---- helpers ---- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Prints a failed sanity check and exits 1: a benchmark of a wheel that
 * loses or duplicates timers must not print figures. */
static void check(int ok, const char *what)
{
    if (ok)
        return;
    fprintf(stderr, "wheel_bench: sanity check failed: %s\n", what);
    exit(1);
}

/* Initialises timers[0..n) with due = base_ms + a delay drawn from a fresh
 * splitmix64 stream (seed 42), so every workload sees the same sequence. */
static void fill_timers(wtimer *timers, size_t n, uint64_t base_ms, uint64_t lo, uint64_t hi)
{
    uint64_t state = SEED;
    for (size_t i = 0; i < n; i++) {
        wtimer_init(&timers[i]);
        timers[i].due_ms = base_ms + lo + splitmix64_next(&state) % (hi - lo + 1);
    }
}

/* Sleeps until the wall clock reads at_ms (an absolute ms boundary). */
static void sleep_until_ms(uint64_t at_ms)
{
    struct timespec ts = {.tv_sec = (time_t)(at_ms / 1000),
                          .tv_nsec = (long)(at_ms % 1000) * 1000000L};
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of the sorted v[0..n), n >= 1, given in parts per
 * thousand (990 is p99): the smallest value with at least that share of v at
 * or below it. Integer arithmetic, so p99.9 of 200,000 is exactly rank 199,800. */
static int64_t percentile(const int64_t *v, size_t n, unsigned permille)
{
    size_t rank = (n * permille + 999) / 1000;
    return v[(rank ? rank : 1) - 1];
}

/* Heap bytes in use: arena chunks plus mmapped chunks. */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* Called with each non-empty batch that wheel_advance handed out; must empty
 * the list. */
typedef void (*batch_cb)(struct list_node *expired, void *arg);

/* What the loop itself saw, to tell the wheel's share of lateness from the
 * scheduler's: how long after each target ms boundary the sleep returned,
 * and the longest wheel_advance call. */
struct loop_stats {
    int64_t *oversleep_us; /* one per sleep */
    size_t n, cap;
    uint64_t advance_max_ns;
};

static void note_oversleep(struct loop_stats *ls, int64_t us)
{
    if (ls->n == ls->cap) {
        ls->cap = ls->cap ? 2 * ls->cap : 1024;
        ls->oversleep_us = xrealloc(ls->oversleep_us, ls->cap * sizeof *ls->oversleep_us);
    }
    ls->oversleep_us[ls->n++] = us;
}

/* The engine loop's shape without the epoll: until the wheel is empty, sleep
 * exactly until the next tick with work, advance to the wall clock, and hand
 * the batch to cb straight after wheel_advance returns. The engine sleeps in
 * epoll_wait with a relative timeout in whole ms instead, which can wake up
 * to 1 ms past the boundary; sleeping to the absolute boundary measures the
 * wheel, not that rounding. */
static void run_until_empty(wheel *w, batch_cb cb, void *arg, struct loop_stats *ls)
{
    struct list_node expired;
    list_init(&expired);
    for (;;) {
        uint64_t now = clock_now_ms();
        int64_t wait = wheel_next_ms(w, now);
        if (wait < 0)
            return;
        if (wait > 0) {
            sleep_until_ms(now + (uint64_t)wait);
            note_oversleep(ls, (int64_t)(clock_now_us() - (now + (uint64_t)wait) * 1000));
        }
        uint64_t t0 = mono_ns();
        size_t moved = wheel_advance(w, clock_now_ms(), &expired);
        uint64_t t1 = mono_ns();
        if (t1 - t0 > ls->advance_max_ns)
            ls->advance_max_ns = t1 - t0;
        if (moved > 0)
            cb(&expired, arg);
    }
}

/* Prints the loop's own figures (human-readable only) and frees them. */
static void print_loop_stats(struct loop_stats *ls)
{
    double p50 = 0, p99 = 0, max = 0;
    if (ls->n) {
        qsort(ls->oversleep_us, ls->n, sizeof *ls->oversleep_us, cmp_i64);
        p50 = percentile(ls->oversleep_us, ls->n, 500) / 1000.0;
        p99 = percentile(ls->oversleep_us, ls->n, 990) / 1000.0;
        max = ls->oversleep_us[ls->n - 1] / 1000.0;
    }
    printf("   loop: %zu sleeps, woke after the ms boundary by p50 %.3f  p99 %.3f  max %.3f ms; "
           "longest wheel_advance %.3f ms\n",
           ls->n, p50, p99, max, ls->advance_max_ns / 1e6);
    free(ls->oversleep_us);
}

/* ---- W1: insert and cancel cost ---- */

struct w1_result {
    double insert_ns, cancel_ns;
};

static struct w1_result w1_run(wtimer *timers, uint32_t slots)
{
    struct w1_result r;
    uint64_t base = clock_now_ms();
    fill_timers(timers, W1_N, base, 1, 10000);
    wheel *w = wheel_create(slots, TICK_MS, base);

    uint64_t t0 = mono_ns();
    for (size_t i = 0; i < W1_N; i++)
        wheel_add(w, &timers[i]);
    uint64_t t1 = mono_ns();
    for (size_t i = 0; i < W1_N; i += 2)
        wheel_cancel(w, &timers[i]);
    uint64_t t2 = mono_ns();

    check(wheel_count(w) == W1_N / 2, "W1: half the timers remain after cancel");
    for (size_t i = 0; i < W1_N; i++)
        check(list_linked(&timers[i].node) == (int)(i & 1), "W1: exactly the even half unlinked");
    r.insert_ns = (double)(t1 - t0) / W1_N;
    r.cancel_ns = (double)(t2 - t1) / (W1_N / 2);
    wheel_free(w);
    return r;
}

static void w1(wtimer *timers)
{
    struct w1_result d = w1_run(timers, SLOTS_DEFAULT);
    struct w1_result l = w1_run(timers, SLOTS_LARGE);
    printf("W1 insert %d timers, delays [1 ms, 10 s], tick %d ms; cancel the even half\n", W1_N,
           TICK_MS);
    printf("   slots %5d: %.1f ns/insert, %.1f ns/cancel\n", SLOTS_DEFAULT, d.insert_ns,
           d.cancel_ns);
    printf("   slots %5d: %.1f ns/insert, %.1f ns/cancel\n", SLOTS_LARGE, l.insert_ns, l.cancel_ns);
    printf("RESULT W1 insert_ns=%.1f cancel_ns=%.1f insert_ns_65536=%.1f cancel_ns_65536=%.1f\n",
           d.insert_ns, d.cancel_ns, l.insert_ns, l.cancel_ns);
}

/* ---- W2: lateness in real time ---- */

struct w2_state {
    int64_t *late_us; /* one per timer, in processing order */
    size_t n;
};

static void w2_batch_cb(struct list_node *expired, void *arg)
{
    struct w2_state *st = arg;
    struct list_node *n;
    while ((n = list_pop_head(expired))) {
        const wtimer *t = container_of(n, wtimer, node);
        st->late_us[st->n++] = (int64_t)(clock_now_us() - t->due_ms * 1000);
    }
}

static void w2(wtimer *timers, const struct w2_params *p)
{
    struct w2_state st = {xcalloc(p->n, sizeof *st.late_us), 0};
    uint64_t now = clock_now_ms();
    wheel *w = wheel_create(SLOTS_DEFAULT, TICK_MS, now);
    fill_timers(timers, p->n, now, p->lo_ms, p->hi_ms);
    for (size_t i = 0; i < p->n; i++)
        wheel_add(w, &timers[i]);
    struct loop_stats ls = {0};
    run_until_empty(w, w2_batch_cb, &st, &ls);
    check(st.n == p->n, "W2: every timer expired exactly once");

    size_t early = 0;
    for (size_t i = 0; i < st.n; i++)
        early += st.late_us[i] < 0;
    qsort(st.late_us, st.n, sizeof *st.late_us, cmp_i64);
    double p50 = percentile(st.late_us, st.n, 500) / 1000.0;
    double p99 = percentile(st.late_us, st.n, 990) / 1000.0;
    double p999 = percentile(st.late_us, st.n, 999) / 1000.0;
    double max = st.late_us[st.n - 1] / 1000.0;
    printf("W2 %zu timers, delays [%" PRIu64 " ms, %" PRIu64 " ms], slots %d, tick %d ms, "
           "real time\n",
           p->n, p->lo_ms, p->hi_ms, SLOTS_DEFAULT, TICK_MS);
    printf("   lateness ms: p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f;  early %zu\n", p50, p99, p999,
           max, early);
    print_loop_stats(&ls);
    printf("RESULT W2 p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f early=%zu\n", p50, p99, p999,
           max, early);
    wheel_free(w);
    free(st.late_us);
}

/* ---- W3: bytes per pending timer ---- */

static double w3_run(wtimer *timers, uint32_t slots)
{
    uint64_t base = clock_now_ms();
    fill_timers(timers, W3_N, base, 1, 10000);
    size_t before = heap_in_use();
    wheel *w = wheel_create(slots, TICK_MS, base);
    size_t created = heap_in_use();
    for (size_t i = 0; i < W3_N; i++)
        wheel_add(w, &timers[i]);
    size_t filled = heap_in_use();
    check(wheel_count(w) == W3_N, "W3: 1,000,000 timers pending");
    check(filled == created, "W3: wheel_add allocates nothing");

    size_t own = created - before;
    size_t arith = slots * sizeof(struct list_node) + (slots + 63) / 64 * sizeof(uint64_t);
    const char *how = "measured";
    if (own < arith) {
        /* mallinfo2 does not see this allocator (a sanitizer's, say). */
        own = arith;
        how = "mallinfo2 blind, slot arithmetic";
    }
    double per = (double)sizeof(wtimer) + (double)own / W3_N;
    printf("   slots %5u: wheel heap %zu B, %s (slots*16 + bitmap = %zu B; the rest is the "
           "struct and malloc overhead) -> %.3f B/timer\n",
           slots, own, how, arith, per);
    wheel_free(w);
    return per;
}

static void w3(wtimer *timers)
{
    printf("W3 bookkeeping per pending timer at %d pending: sizeof(wtimer) = %zu B + wheel heap / N "
           "(mallinfo2 uordblks+hblkhd around wheel_create)\n",
           W3_N, sizeof(wtimer));
    double d = w3_run(timers, SLOTS_DEFAULT);
    double l = w3_run(timers, SLOTS_LARGE);
    printf("RESULT W3 bytes_per_timer=%.3f bytes_per_timer_65536=%.3f\n", d, l);
}

/* ---- W4: a burst due at one instant ---- */

struct w4_state {
    size_t seen, n;
    uint64_t last_us; /* when the batch holding the last timer was returned */
    uint64_t drained_us; /* when that batch had been walked to its end */
};

static void w4_batch_cb(struct list_node *expired, void *arg)
{
    struct w4_state *st = arg;
    uint64_t returned = clock_now_us();
    struct list_node *n;
    while ((n = list_pop_head(expired)))
        st->seen++;
    if (st->seen == st->n) {
        st->last_us = returned;
        st->drained_us = clock_now_us();
    }
}

static void w4(wtimer *timers)
{
    struct w4_state st = {0, W4_N, 0, 0};
    uint64_t now = clock_now_ms();
    uint64_t due = now + W4_AHEAD_MS;
    wheel *w = wheel_create(SLOTS_DEFAULT, TICK_MS, now);
    for (size_t i = 0; i < W4_N; i++) {
        wtimer_init(&timers[i]);
        timers[i].due_ms = due;
        wheel_add(w, &timers[i]);
    }
    struct loop_stats ls = {0};
    run_until_empty(w, w4_batch_cb, &st, &ls);
    check(st.seen == W4_N, "W4: every timer expired exactly once");

    double last = (double)(int64_t)(st.last_us - due * 1000) / 1000.0;
    double drained = (double)(int64_t)(st.drained_us - due * 1000) / 1000.0;
    printf("W4 %d timers due at one instant %d ms ahead, slots %d, tick %d ms\n", W4_N,
           W4_AHEAD_MS, SLOTS_DEFAULT, TICK_MS);
    printf("   last returned by wheel_advance %.3f ms after the instant "
           "(batch popped to the end at %.3f ms)\n",
           last, drained);
    print_loop_stats(&ls);
    printf("RESULT W4 last_ms=%.3f\n", last);
    wheel_free(w);
}

int main(int argc, char **argv)
{
    const struct w2_params *p = &w2_full;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            p = &w2_quick;
        } else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    wtimer *timers = xcalloc(W1_N, sizeof *timers);
    w1(timers);
    w2(timers, p);
    w3(timers);
    w4(timers);
    free(timers);
    return 0;
}
