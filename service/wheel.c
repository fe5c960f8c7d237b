/* wheel.c - hashed timing wheel (Netty's HashedWheelTimer, placed at insert).
 *
 * Design. Time is cut into ticks of tick_ms; tick k covers (k-1)*tick_ms ..
 * k*tick_ms, and a timer due at d carries the absolute tick ceil(d / tick_ms),
 * the first tick boundary at or after d. The wheel is a power-of-two ring of
 * slots, each an intrusive FIFO list with a sentinel; a timer lives in slot
 * (tick & mask). Timers of later rounds share the slot and simply keep their
 * absolute tick, so there is no per-turn "rounds" countdown to maintain:
 * expiring a slot for tick k takes the timers whose tick is <= k and leaves the
 * others where they are.
 *
 * Invariants.
 *  - `done` is the last tick processed: every linked timer has tick > done.
 *    A timer added with a tick <= done goes to done + 1 (the next advance).
 *    When the wall clock steps back, `done` follows it back (the invariant
 *    still holds), so a timer due now is not held for the length of the step.
 *  - A timer moved to a caller's `expired` list has tick HANDED_OUT (0),
 *    which no wheel timer has: wheel_cancel tells the two apart by it.
 *  - Bit s of `bits` is set exactly when slot s is non-empty. wheel_next_ms
 *    finds the next occupied slot with a word scan (ctz), and wheel_advance
 *    skips empty slots without touching their list heads.
 *  - Within a slot, timers are in insertion order, and all timers of one tick
 *    are in the same slot, so walking a slot front to back gives FIFO order
 *    within a tick.
 *
 * Advancing by fewer than `slots` ticks visits each tick's slot at most once,
 * in tick order, and each visited slot holds at most one expiring tick. A jump
 * of a full turn or more (a stalled loop, a clock step) visits every occupied
 * slot exactly once, collects all due timers into a local list and sorts that
 * list by tick with a stable merge sort (no allocation), so the output is
 * still in tick order and FIFO within a tick; the cost is O(k log k) in the
 * number of expired timers, paid only on such jumps.
 *
 * wheel_advance_max bounds the timers one call moves: it stops in the middle
 * of a slot, and `done` stays before that slot's tick (its due timers still
 * have tick > done), so the next call goes on from there. A slot of 100,000
 * timers due at one instant is then handed out a slice at a time, and the
 * first of them get going before the last are walked.
 *
 * Trade-off: a slot holding timers of later rounds is walked on every visit
 * (as in Netty), and wheel_next_ms may report such a slot's tick early. With
 * the claim window shorter than one turn, later rounds are rare.
 */
#include "wheel.h"

#include <stdlib.h>

#include "xalloc.h"

struct wheel {
    struct list_node *slots; /* nslots sentinels */
    uint64_t *bits;          /* occupancy, one bit per slot */
    uint32_t nslots;
    uint32_t mask;
    uint32_t nwords;
    uint32_t tick_ms;
    uint64_t done; /* last tick processed */
    size_t count;
};

#define NONE UINT32_MAX
/* The tick of a timer moved to a caller's `expired` list: no timer in the
 * wheel has it (wheel_add gives ticks >= done + 1 >= 1). */
#define HANDED_OUT 0

static uint64_t timer_tick(const struct list_node *n)
{
    return container_of(n, wtimer, node)->tick;
}

static void bit_set(wheel *w, uint32_t s) { w->bits[s >> 6] |= UINT64_C(1) << (s & 63); }

static void bit_clear(wheel *w, uint32_t s) { w->bits[s >> 6] &= ~(UINT64_C(1) << (s & 63)); }

/* Distance (0 .. nslots-1) from slot `from` to the first occupied slot at or
 * after it, wrapping around; NONE when every slot is empty. Bits past nslots
 * (when nslots < 64) are never set, so they need no masking. */
static uint32_t next_occupied(const wheel *w, uint32_t from)
{
    uint32_t i = from >> 6;
    uint64_t m = w->bits[i] & (~UINT64_C(0) << (from & 63));
    if (m)
        return ((i << 6) | (uint32_t)__builtin_ctzll(m)) - from;
    for (uint32_t j = 1; j <= w->nwords; j++) {
        uint32_t k = (i + j) & (w->nwords - 1);
        if (w->bits[k])
            return (((k << 6) | (uint32_t)__builtin_ctzll(w->bits[k])) - from) & w->mask;
    }
    return NONE;
}

wheel *wheel_create(uint32_t slots, uint32_t tick_ms, uint64_t now_ms)
{
    if (slots < 2 || (slots & (slots - 1)) != 0 || tick_ms < 1)
        return NULL;
    wheel *w = xcalloc(1, sizeof *w);
    w->nslots = slots;
    w->mask = slots - 1;
    w->nwords = (slots + 63) / 64; /* a power of two too, so it masks */
    w->tick_ms = tick_ms;
    w->done = now_ms / tick_ms;
    w->slots = xmalloc(sizeof *w->slots * slots);
    w->bits = xcalloc(w->nwords, sizeof *w->bits);
    for (uint32_t s = 0; s < slots; s++)
        list_init(&w->slots[s]);
    return w;
}

void wheel_free(wheel *w)
{
    if (!w)
        return;
    free(w->slots);
    free(w->bits);
    free(w);
}

void wtimer_init(wtimer *t)
{
    list_init(&t->node);
    t->tick = 0;
}

void wheel_add(wheel *w, wtimer *t)
{
    /* ceil without the overflow of (due + tick_ms - 1). */
    uint64_t tick = t->due_ms / w->tick_ms + (t->due_ms % w->tick_ms != 0);
    if (tick <= w->done)
        tick = w->done + 1;
    t->tick = tick;
    uint32_t s = (uint32_t)tick & w->mask;
    list_insert_tail(&w->slots[s], &t->node);
    bit_set(w, s);
    w->count++;
}

void wheel_cancel(wheel *w, wtimer *t)
{
    if (!list_linked(&t->node))
        return;
    if (t->tick == HANDED_OUT) {
        /* Already handed out in an `expired` list: unlink it from there, the
         * wheel no longer counts it. */
        list_remove(&t->node);
        return;
    }
    uint32_t s = (uint32_t)t->tick & w->mask;
    list_remove(&t->node);
    if (list_empty(&w->slots[s]))
        bit_clear(w, s);
    w->count--;
}

/* Moves the timers of slot s whose tick is <= upto to the tail of out, in
 * slot order, at most max of them, and keeps the occupancy bit right. Unless
 * `keep_tick` (a sort by tick follows), each moved timer is marked
 * HANDED_OUT at once. Returns the number moved; *rest is set when it stopped
 * at max before the end of the slot. */
static size_t expire_slot(wheel *w, uint32_t s, uint64_t upto, struct list_node *out, int keep_tick, size_t max,
                          int *rest)
{
    struct list_node *head = &w->slots[s], *n, *next;
    size_t moved = 0;
    *rest = 0;
    for (n = head->next; n != head; n = next) {
        if (moved == max) {
            *rest = 1;
            break;
        }
        next = n->next;
        if (timer_tick(n) > upto)
            continue;
        list_remove(n);
        list_insert_tail(out, n);
        if (!keep_tick)
            container_of(n, wtimer, node)->tick = HANDED_OUT;
        moved++;
    }
    if (list_empty(head))
        bit_clear(w, s);
    return moved;
}

/* Stable merge of two NULL-terminated chains (linked by next only) sorted by
 * tick; on equal ticks a's nodes come first. */
static struct list_node *merge(struct list_node *a, struct list_node *b)
{
    struct list_node head, *tail = &head;
    while (a && b) {
        if (timer_tick(b) < timer_tick(a)) {
            tail->next = b;
            b = b->next;
        } else {
            tail->next = a;
            a = a->next;
        }
        tail = tail->next;
    }
    tail->next = a ? a : b;
    return head.next;
}

/* Sorts list by tick, stably, without allocating: a bottom-up merge sort
 * where bin[i] holds a sorted run of 2^i nodes that precede every later run
 * (a binary counter, as in Linux's list_sort). Then relinks prev pointers. */
static void sort_by_tick(struct list_node *list)
{
    struct list_node *bin[64] = {0}, *n, *run, *prev;
    int i, top = 0;
    if (list_empty(list))
        return;
    list->prev->next = NULL;
    for (n = list->next; n;) {
        run = n;
        n = n->next;
        run->next = NULL;
        for (i = 0; bin[i]; i++) {
            run = merge(bin[i], run);
            bin[i] = NULL;
        }
        bin[i] = run;
        top = i > top ? i : top;
    }
    for (run = NULL, i = 0; i <= top; i++)
        if (bin[i])
            run = run ? merge(bin[i], run) : bin[i];
    for (prev = list, n = run; n; prev = n, n = n->next)
        n->prev = prev;
    prev->next = list;
    list->prev = prev;
    list->next = run;
}

/* Processes the `span` (< nslots) ticks after done, skipping empty slots,
 * until max timers are moved; *reached: the last tick processed whole (the
 * one before a slot left with due timers at max). */
static size_t advance_partial(wheel *w, uint64_t span, struct list_node *expired, size_t max, uint64_t *reached)
{
    uint32_t first = (uint32_t)(w->done + 1) & w->mask;
    size_t moved = 0;
    int rest;
    *reached = w->done + span;
    for (uint64_t off = 0; off < span; off++) {
        uint32_t d = next_occupied(w, (first + (uint32_t)off) & w->mask);
        if (d == NONE || d >= span - off)
            break;
        off += d;
        moved += expire_slot(w, (first + (uint32_t)off) & w->mask, w->done + 1 + off, expired, 0, max - moved, &rest);
        if (rest) {
            *reached = w->done + off;
            break;
        }
    }
    return moved;
}

/* Processes ticks up to target when that is a full turn or more away: every
 * occupied slot once, then a stable sort restores tick order. */
static size_t advance_full(wheel *w, uint64_t target, struct list_node *expired)
{
    struct list_node due;
    uint32_t first = (uint32_t)(w->done + 1) & w->mask;
    size_t moved = 0;
    list_init(&due);
    for (uint32_t off = 0; off < w->nslots; off++) {
        uint32_t d = next_occupied(w, (first + off) & w->mask);
        if (d == NONE || d >= w->nslots - off)
            break;
        off += d;
        int rest;
        moved += expire_slot(w, (first + off) & w->mask, target, &due, 1, SIZE_MAX, &rest);
    }
    sort_by_tick(&due);
    for (struct list_node *n = due.next; n != &due; n = n->next)
        container_of(n, wtimer, node)->tick = HANDED_OUT;
    list_splice_tail(expired, &due);
    return moved;
}

void wheel_rewind(wheel *w, uint64_t now_ms)
{
    /* Linked timers keep their absolute ticks, all > done > the new done, so
     * they still expire at their due time; but `done` must follow the clock
     * back, or a timer added now with a due time before the old `done` would
     * be put at done + 1 and wait out the whole step. */
    if (now_ms / w->tick_ms < w->done)
        w->done = now_ms / w->tick_ms;
}

size_t wheel_advance_max(wheel *w, uint64_t now_ms, struct list_node *expired, size_t max)
{
    uint64_t target = now_ms / w->tick_ms, reached = target;
    size_t moved = 0;
    if (target <= w->done) {
        wheel_rewind(w, now_ms);
        return 0;
    }
    if (w->count && max) {
        if (target - w->done < w->nslots)
            moved = advance_partial(w, target - w->done, expired, max, &reached);
        else
            moved = advance_full(w, target, expired);
    } else if (w->count)
        reached = w->done;
    w->done = reached;
    w->count -= moved;
    return moved;
}

size_t wheel_advance(wheel *w, uint64_t now_ms, struct list_node *expired)
{
    return wheel_advance_max(w, now_ms, expired, SIZE_MAX);
}

int64_t wheel_next_ms(const wheel *w, uint64_t now_ms)
{
    if (w->count == 0)
        return -1;
    uint32_t d = next_occupied(w, (uint32_t)(w->done + 1) & w->mask);
    uint64_t at = (w->done + 1 + d) * w->tick_ms;
    if (at <= now_ms)
        return 0;
    return at - now_ms > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(at - now_ms);
}

size_t wheel_count(const wheel *w) { return w->count; }
