/* test_wheel.c - unit tests of the hashed timing wheel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "backoff.h"
#include "wheel.h"

/* A test timer: the wtimer plus what the tests need to check order. */
typedef struct ttimer {
    wtimer t;
    size_t seq; /* insertion order */
    int fired;  /* times returned by wheel_advance */
} ttimer;

static uint64_t rng_state;

static uint64_t rnd(void) { return splitmix64_next(&rng_state); }

static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

static uint64_t tick_of(uint64_t due_ms, uint32_t tick_ms)
{
    return (due_ms + tick_ms - 1) / tick_ms;
}

static void add_timer(wheel *w, ttimer *tt, uint64_t due_ms, size_t seq)
{
    wtimer_init(&tt->t);
    tt->t.due_ms = due_ms;
    tt->seq = seq;
    tt->fired = 0;
    wheel_add(w, &tt->t);
}

static ttimer *pop_timer(struct list_node *list)
{
    struct list_node *n = list_pop_head(list);
    return n ? container_of(n, ttimer, t.node) : NULL;
}

/* Checks that the timers in `expired` come in (tick, insertion) order after
 * the previous one (*last, NULL at first), are due by now_ms, and are
 * returned for the first time; empties the list. Returns how many. */
static size_t check_batch(struct list_node *expired, uint32_t tick_ms, uint64_t now_ms,
                          ttimer **last)
{
    size_t n = 0;
    ttimer *tt;
    while ((tt = pop_timer(expired)) != NULL) {
        assert_true(tt->t.due_ms <= now_ms);
        assert_int_equal(tt->fired, 0);
        tt->fired = 1;
        if (*last) {
            uint64_t a = tick_of((*last)->t.due_ms, tick_ms), b = tick_of(tt->t.due_ms, tick_ms);
            assert_true(a <= b);
            if (a == b)
                assert_true((*last)->seq < tt->seq);
        }
        *last = tt;
        n++;
    }
    return n;
}

static void test_wheel_create_rejects_invalid_arguments(void **state)
{
    (void)state;
    assert_null(wheel_create(0, 1, 0));
    assert_null(wheel_create(1, 1, 0));
    assert_null(wheel_create(12, 1, 0));
    assert_null(wheel_create(16, 0, 0));
    wheel *w = wheel_create(2, 1, 0);
    assert_non_null(w);
    assert_int_equal(wheel_count(w), 0);
    wheel_free(w);
    wheel_free(NULL);
}

static void test_wheel_never_fires_early(void **state)
{
    (void)state;
    enum { N = 5000 };
    const uint32_t tick_ms = 10;
    uint64_t now = 1700000000123;
    ttimer *tts = calloc(N, sizeof *tts);
    wheel *w = wheel_create(64, tick_ms, now);
    struct list_node expired;
    list_init(&expired);
    rng_state = 1;
    for (size_t i = 0; i < N; i++)
        add_timer(w, &tts[i], now + rnd_below(5000), i);
    size_t total = 0;
    while (wheel_count(w) > 0) {
        now += 1 + rnd_below(25);
        size_t n = wheel_advance(w, now, &expired);
        struct list_node *it;
        size_t seen = 0;
        for (it = expired.next; it != &expired; it = it->next, seen++)
            assert_true(container_of(it, ttimer, t.node)->t.due_ms <= now);
        assert_int_equal(seen, n);
        while (pop_timer(&expired))
            ;
        total += n;
    }
    assert_int_equal(total, N);
    wheel_free(w);
    free(tts);
}

static void test_wheel_timers_several_turns_ahead_expire_exactly_at_their_tick(void **state)
{
    (void)state;
    enum { SLOTS = 8, N = 6 };
    const uint32_t tick_ms = 10;
    /* Same slot (tick 3 mod 8) in rounds 0, 1, 2, 5, plus two other slots. */
    const uint64_t dues[N] = {25, 25 + 80, 21 + 160, 30 + 400, 7, 79 + 240};
    ttimer tts[N];
    struct list_node expired;
    list_init(&expired);
    wheel *w = wheel_create(SLOTS, tick_ms, 0);
    for (size_t i = 0; i < N; i++)
        add_timer(w, &tts[i], dues[i], i);
    for (uint64_t now = 1; now <= 600; now++) {
        wheel_advance(w, now, &expired);
        ttimer *tt;
        while ((tt = pop_timer(&expired)) != NULL) {
            /* Expires when now reaches the tick boundary, not a turn early or late. */
            assert_int_equal(now, tick_of(tt->t.due_ms, tick_ms) * tick_ms);
            tt->fired++;
        }
    }
    for (size_t i = 0; i < N; i++)
        assert_int_equal(tts[i].fired, 1);
    assert_int_equal(wheel_count(w), 0);
    wheel_free(w);
}

static void test_wheel_keeps_fifo_order_within_a_tick(void **state)
{
    (void)state;
    enum { N = 10 };
    /* Dues 101..110 (descending) all fall in tick 11 of 10 ms; 95 (tick 10)
     * and 111 (tick 12) are interleaved with them. */
    ttimer tts[N], early, late;
    struct list_node expired;
    list_init(&expired);
    wheel *w = wheel_create(16, 10, 0);
    add_timer(w, &late, 111, 100);
    for (size_t i = 0; i < N; i++) {
        add_timer(w, &tts[i], 110 - i, i);
        if (i == N / 2)
            add_timer(w, &early, 95, 200);
    }
    assert_int_equal(wheel_advance(w, 120, &expired), N + 2);
    assert_ptr_equal(pop_timer(&expired), &early);
    for (size_t i = 0; i < N; i++)
        assert_ptr_equal(pop_timer(&expired), &tts[i]);
    assert_ptr_equal(pop_timer(&expired), &late);
    assert_null(pop_timer(&expired));
    wheel_free(w);
}

static void test_wheel_cancelled_timer_is_never_returned(void **state)
{
    (void)state;
    ttimer a, b, c, idle;
    struct list_node expired;
    list_init(&expired);
    wheel *w = wheel_create(32, 1, 1000);
    add_timer(w, &a, 1005, 0);
    add_timer(w, &b, 1005, 1);
    add_timer(w, &c, 1020, 2);
    assert_int_equal(wheel_count(w), 3);
    assert_int_equal(wheel_next_ms(w, 1000), 5);

    wheel_cancel(w, &a.t);
    assert_int_equal(wheel_count(w), 2);
    assert_int_equal(wheel_next_ms(w, 1000), 5); /* b still holds the slot */
    wheel_cancel(w, &b.t);
    assert_int_equal(wheel_count(w), 1);
    assert_int_equal(wheel_next_ms(w, 1000), 20); /* the slot's bit is cleared */

    wheel_cancel(w, &b.t); /* twice: a no-op */
    wtimer_init(&idle.t);
    wheel_cancel(w, &idle.t); /* never added: a no-op */
    assert_int_equal(wheel_count(w), 1);

    assert_int_equal(wheel_advance(w, 1030, &expired), 1);
    assert_ptr_equal(pop_timer(&expired), &c);
    assert_null(pop_timer(&expired));
    assert_int_equal(wheel_count(w), 0);
    assert_int_equal(wheel_next_ms(w, 1030), -1);

    add_timer(w, &a, 1040, 3);
    wheel_cancel(w, &a.t);
    assert_int_equal(wheel_count(w), 0);
    assert_int_equal(wheel_next_ms(w, 1030), -1);
    assert_int_equal(wheel_advance(w, 2000, &expired), 0);
    wheel_free(w);
}

static void test_wheel_cancel_after_expiry_only_unlinks_it_from_the_expired_list(void **state)
{
    (void)state;
    ttimer a, b, c;
    struct list_node expired;
    list_init(&expired);
    wheel *w = wheel_create(8, 1, 0);
    add_timer(w, &a, 3, 0);
    add_timer(w, &b, 3, 1);
    add_timer(w, &c, 11, 2); /* same slot, next round */
    assert_int_equal(wheel_advance(w, 3, &expired), 2);
    assert_int_equal(wheel_count(w), 1);
    wheel_cancel(w, &a.t);
    assert_int_equal(wheel_count(w), 1);
    assert_ptr_equal(pop_timer(&expired), &b);
    assert_null(pop_timer(&expired));
    assert_int_equal(wheel_next_ms(w, 3), 8);
    assert_int_equal(wheel_advance(w, 11, &expired), 1);
    assert_ptr_equal(pop_timer(&expired), &c);
    wheel_free(w);
}

/* An NTP step of the wall clock back by an hour: a timer added after the
 * step, due a few ticks later, expires at its due time, not an hour later;
 * a timer added before the step still expires at its own due time, and one
 * handed out before the step is still only unlinked by a cancel. */
static void test_wheel_follows_the_wall_clock_when_it_steps_back(void **state)
{
    (void)state;
    const uint64_t t0 = 1700000000000, step = 3600000;
    ttimer early, later, fresh;
    struct list_node expired;
    list_init(&expired);
    wheel *w = wheel_create(512, 1, t0);
    add_timer(w, &early, t0 + 5, 0);
    add_timer(w, &later, t0 + 20, 1);
    assert_int_equal(wheel_advance(w, t0 + 10, &expired), 1); /* early, still in the caller's list */
    uint64_t now = t0 + 10 - step;                            /* the clock steps back */
    assert_int_equal(wheel_advance(w, now, &expired), 0);
    add_timer(w, &fresh, now + 3, 2);
    assert_int_equal(wheel_count(w), 2);
    assert_true(wheel_next_ms(w, now) <= 3);
    wheel_cancel(w, &early.t); /* handed out before the step: not the wheel's */
    assert_int_equal(wheel_count(w), 2);
    assert_null(pop_timer(&expired));
    assert_int_equal(wheel_advance(w, now + 2, &expired), 0); /* never early */
    assert_int_equal(wheel_advance(w, now + 3, &expired), 1);
    assert_ptr_equal(pop_timer(&expired), &fresh);
    assert_int_equal(wheel_advance(w, t0 + 19, &expired), 0);
    assert_int_equal(wheel_advance(w, t0 + 20, &expired), 1);
    assert_ptr_equal(pop_timer(&expired), &later);
    assert_int_equal(wheel_count(w), 0);
    wheel_free(w);
}

/* Adds n random timers due over several turns, advances in random steps
 * (some longer than a turn) and checks the whole sequence. */
static void run_random_order(size_t n, uint32_t slots, uint32_t tick_ms, uint64_t spread_ms,
                             uint64_t max_step_ms, uint64_t seed)
{
    uint64_t now = 1700000000000 + seed;
    ttimer *tts = calloc(n, sizeof *tts);
    wheel *w = wheel_create(slots, tick_ms, now);
    struct list_node expired;
    ttimer *last = NULL;
    size_t total = 0;
    list_init(&expired);
    rng_state = seed;
    for (size_t i = 0; i < n; i++)
        add_timer(w, &tts[i], now + 1 + rnd_below(spread_ms), i);
    assert_int_equal(wheel_count(w), n);
    while (wheel_count(w) > 0) {
        int64_t next = wheel_next_ms(w, now);
        assert_true(next >= 0);
        now += 1 + rnd_below(max_step_ms);
        size_t got = wheel_advance(w, now, &expired);
        assert_int_equal(check_batch(&expired, tick_ms, now, &last), got);
        total += got;
    }
    assert_int_equal(total, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(tts[i].fired, 1);
    assert_int_equal(wheel_next_ms(w, now), -1);
    wheel_free(w);
    free(tts);
}

static void test_wheel_expires_100k_random_timers_once_in_tick_order(void **state)
{
    (void)state;
    /* 512 slots of 1 ms: timers spread over ~40 turns; steps up to 2 turns. */
    run_random_order(100000, 512, 1, 20000, 1024, 42);
    /* Coarser ticks, so many timers share a tick; small steps. */
    run_random_order(100000, 64, 7, 30000, 40, 7);
}

static void test_wheel_past_due_timer_expires_at_the_next_tick(void **state)
{
    (void)state;
    ttimer a, b;
    struct list_node expired;
    list_init(&expired);
    wheel *w = wheel_create(16, 10, 1000);
    assert_int_equal(wheel_advance(w, 1055, &expired), 0);
    add_timer(w, &a, 500, 0);   /* long past */
    add_timer(w, &b, 1055, 1);  /* now, but its tick (106) is still ahead */
    assert_int_equal(wheel_next_ms(w, 1055), 5);
    assert_int_equal(wheel_advance(w, 1060, &expired), 2);
    assert_ptr_equal(pop_timer(&expired), &a);
    assert_ptr_equal(pop_timer(&expired), &b);
    assert_int_equal(wheel_count(w), 0);

    /* A timer due exactly at a processed boundary goes to the next tick too. */
    add_timer(w, &a, 1060, 2);
    assert_int_equal(wheel_next_ms(w, 1060), 10);
    assert_int_equal(wheel_advance(w, 1069, &expired), 0);
    assert_int_equal(wheel_advance(w, 1070, &expired), 1);
    assert_ptr_equal(pop_timer(&expired), &a);
    wheel_free(w);
}

static void test_wheel_next_ms_is_minus_one_when_empty_and_the_distance_otherwise(void **state)
{
    (void)state;
    ttimer a, b, c;
    struct list_node expired;
    list_init(&expired);
    wheel *w = wheel_create(64, 10, 1000);
    assert_int_equal(wheel_next_ms(w, 1000), -1);
    add_timer(w, &a, 1037, 0); /* tick 104 */
    assert_int_equal(wheel_next_ms(w, 1000), 40);
    assert_int_equal(wheel_next_ms(w, 1013), 27);
    add_timer(w, &b, 1011, 1); /* tick 102 */
    assert_int_equal(wheel_next_ms(w, 1000), 20);
    assert_int_equal(wheel_next_ms(w, 1020), 0);
    assert_int_equal(wheel_next_ms(w, 1500), 0); /* overdue: 0 */
    /* 62 slots ahead of the cursor: the bitmap scan wraps around. */
    wheel_cancel(w, &a.t);
    wheel_cancel(w, &b.t);
    add_timer(w, &c, 1000 + 10 * 63, 2);
    assert_int_equal(wheel_next_ms(w, 1000), 630);
    assert_int_equal(wheel_advance(w, 1600, &expired), 0);
    assert_int_equal(wheel_next_ms(w, 1600), 30);
    wheel_cancel(w, &c.t);
    /* A timer of a later round may be reported early, never late. */
    add_timer(w, &a, 1600 + 10 * 64 * 3 + 50, 3);
    int64_t next = wheel_next_ms(w, 1600);
    assert_true(next >= 0 && next <= 10 * 64 * 3 + 50);
    wheel_free(w);
}

static void test_wheel_next_ms_scans_a_large_bitmap_with_wraparound(void **state)
{
    (void)state;
    ttimer a;
    struct list_node expired;
    list_init(&expired);
    wheel *w = wheel_create(4096, 1, 0);
    assert_int_equal(wheel_advance(w, 3000, &expired), 0);
    add_timer(w, &a, 3000 + 2000, 0); /* slot 904: behind the cursor in slot order */
    assert_int_equal(wheel_next_ms(w, 3000), 2000);
    assert_int_equal(wheel_advance(w, 4999, &expired), 0);
    assert_int_equal(wheel_next_ms(w, 4999), 1);
    assert_int_equal(wheel_advance(w, 5000, &expired), 1);
    wheel_free(w);
}

static void test_wheel_jump_across_several_turns_returns_everything_in_tick_order(void **state)
{
    (void)state;
    enum { N = 2000 };
    ttimer tts[N];
    struct list_node expired;
    ttimer *last = NULL;
    list_init(&expired);
    wheel *w = wheel_create(16, 1, 0);
    rng_state = 99;
    for (size_t i = 0; i < N; i++)
        add_timer(w, &tts[i], 1 + rnd_below(300), i);
    /* A jump of ~6 turns takes part of the timers, in order... */
    size_t got = wheel_advance(w, 100, &expired);
    assert_int_equal(check_batch(&expired, 1, 100, &last), got);
    /* ...the rest stay, and a second, longer jump takes them all. */
    assert_int_equal(wheel_count(w), N - got);
    assert_int_equal(wheel_next_ms(w, 100), 1);
    got += wheel_advance(w, 100000, &expired);
    check_batch(&expired, 1, 100000, &last);
    assert_int_equal(got, N);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(tts[i].fired, 1);
    assert_int_equal(wheel_count(w), 0);
    wheel_free(w);
}

static void test_wheel_expires_100k_timers_due_at_one_instant(void **state)
{
    (void)state;
    enum { N = 100000 };
    ttimer *tts = calloc(N, sizeof *tts);
    struct list_node expired;
    ttimer *last = NULL;
    list_init(&expired);
    wheel *w = wheel_create(1024, 1, 0);
    for (size_t i = 0; i < N; i++)
        add_timer(w, &tts[i], 500, i);
    assert_int_equal(wheel_advance(w, 499, &expired), 0);
    assert_int_equal(wheel_advance(w, 500, &expired), N);
    assert_int_equal(check_batch(&expired, 1, 500, &last), N);
    assert_int_equal(wheel_count(w), 0);
    wheel_free(w);
    free(tts);
}

/* wheel_advance_max hands a burst out a slice at a time, in the order
 * wheel_advance would, leaves the timers of later rounds in their slot,
 * and reports the rest as due (wheel_next_ms 0) until it is all out. */
static void test_wheel_advance_max_hands_a_burst_out_in_slices_in_order(void **state)
{
    (void)state;
    enum { N = 10000, LATER = 3, NEXT = 100, MAX = 4096 };
    ttimer *tts = calloc(N + LATER + NEXT, sizeof *tts);
    struct list_node expired;
    ttimer *last = NULL;
    list_init(&expired);
    wheel *w = wheel_create(1024, 1, 0);
    size_t seq = 0;
    for (size_t i = 0; i < N; i++) {
        if (i % 4000 == 0) /* a timer of the next round in the same slot, among them */
            add_timer(w, &tts[N + i / 4000], 500 + 1024, seq++);
        add_timer(w, &tts[i], 500, seq++);
    }
    for (size_t i = 0; i < NEXT; i++)
        add_timer(w, &tts[N + LATER + i], 501, seq++);
    assert_int_equal(wheel_advance_max(w, 501, &expired, 0), 0);
    size_t calls = 0, total = 0, got;
    while ((got = wheel_advance_max(w, 501, &expired, MAX)) > 0) {
        assert_true(got <= MAX);
        calls++;
        if (calls == 1) { /* one still in the wheel is cancelled: it never comes */
            assert_int_equal(tts[N - 1].fired, 0);
            wheel_cancel(w, &tts[N - 1].t);
            tts[N - 1].fired = -1;
        }
        assert_int_equal(check_batch(&expired, 1, 501, &last), got);
        total += got;
        if (total < N - 1 + NEXT)
            assert_int_equal(wheel_next_ms(w, 501), 0);
    }
    assert_int_equal(total, N - 1 + NEXT);
    assert_int_equal(calls, (N - 1 + NEXT + MAX - 1) / MAX);
    for (size_t i = 0; i < N + LATER + NEXT; i++)
        assert_int_equal(tts[i].fired, i >= N && i < N + LATER ? 0 : i == N - 1 ? -1 : 1);
    assert_int_equal(wheel_count(w), LATER);
    assert_int_equal(wheel_next_ms(w, 501), 1023); /* the next occupied slot: the later round's */
    assert_int_equal(wheel_advance_max(w, 500 + 1024, &expired, MAX), LATER);
    assert_int_equal(check_batch(&expired, 1, 500 + 1024, &last), LATER);
    wheel_free(w);
    free(tts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wheel_create_rejects_invalid_arguments),
        cmocka_unit_test(test_wheel_never_fires_early),
        cmocka_unit_test(test_wheel_timers_several_turns_ahead_expire_exactly_at_their_tick),
        cmocka_unit_test(test_wheel_keeps_fifo_order_within_a_tick),
        cmocka_unit_test(test_wheel_cancelled_timer_is_never_returned),
        cmocka_unit_test(test_wheel_cancel_after_expiry_only_unlinks_it_from_the_expired_list),
        cmocka_unit_test(test_wheel_follows_the_wall_clock_when_it_steps_back),
        cmocka_unit_test(test_wheel_expires_100k_random_timers_once_in_tick_order),
        cmocka_unit_test(test_wheel_past_due_timer_expires_at_the_next_tick),
        cmocka_unit_test(test_wheel_next_ms_is_minus_one_when_empty_and_the_distance_otherwise),
        cmocka_unit_test(test_wheel_next_ms_scans_a_large_bitmap_with_wraparound),
        cmocka_unit_test(test_wheel_jump_across_several_turns_returns_everything_in_tick_order),
        cmocka_unit_test(test_wheel_expires_100k_timers_due_at_one_instant),
        cmocka_unit_test(test_wheel_advance_max_hands_a_burst_out_in_slices_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
