/* leases.c - the lease worker: renewals, probes and on_expire.
 *
 * Relation to the watchdog. service/watchdog.c renews hookwheel's own
 * instance lease: one key per process, whose whole point is to lapse when
 * that process dies, so the process keeps its own schedule in memory. A
 * user's lease must do the opposite: outlive the instance that happened to
 * renew it. Its schedule therefore lives in Redis (hw:lease:schedule), shared
 * by every instance, and the renewal is the watchdog's rule run by whichever
 * instance looks first: every ttl/3, renew.lua's compare-and-extend (the key
 * is extended only while it still holds the owner, and never recreated),
 * and only while the holder is alive. The script that extends a lease also
 * moves its schedule entry to the next period in the same atomic call, so
 * two instances never renew one lease twice in a period, and when one dies
 * the others' next looks simply find its leases due: there is no takeover
 * step and no lease to hand over, so a lease outlives any instance with
 * ttl/3 to spare (a period plus a tick against the remaining 2/3).
 *
 * The loop. One thread per instance looks at the schedule (leases_look)
 * whenever its earliest entry falls due and at least every
 * lease-tick-ms (entries other instances added may be earlier than the
 * earliest we know). The look answers with actions for this worker:
 *   probe   GET probe_url (curl multi on this thread, so a slow probe holds
 *           up nothing); a 2xx counts as a heartbeat (leases_heartbeat);
 *   expire  create the on_expire timer lease:<key>:<token> (oneshot.h), then
 *           confirm (leases_confirm_expiry). Until confirmed, the expiry is
 *           offered again every retry period, to any instance; the
 *           deterministic id makes a repeated create find the first one, so
 *           the timer exists once;
 *   gone    a lease without on_expire expired: logged.
 * The worker has a store (connection and writer thread) of its own, so its
 * looks never share a pipeline with API requests (leases.h says why). Its
 * replies arrive on that store's writer thread, which queues the actions
 * and wakes the loop (curl_multi_wakeup). */
#include "leases.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "clock.h"
#include "lease_spec.h"
#include "log.h"
#include "oneshot.h"
#include "spec.h"
#include "xalloc.h"

#define LOOK_BATCH 256          /* entries one look handles; more: look again at once */
#define MAX_PROBES 256          /* probes in flight per instance; beyond, the next period retries */
#define MAX_NS_PROBES 64        /* of them, one namespace's (with API tokens); beyond, likewise */
#define PROBE_TIMEOUT_MAX_MS 2000
#define PROBE_BODY_MAX 65536    /* response bytes read from a probe before it ends */

/* A look's action (persistence/leases.h: lease_action), copied for the
 * worker. A lid is a lease id (lease_spec.h): the key, in its namespace
 * when the API has tokens. Strings are "" when the action has none. */
typedef struct action {
    struct action *next;
    enum lease_action_kind kind;
    char *member, *lid, *owner, *url, *spec, *when;
    uint64_t token;
    int64_t ttl_ms;
} action;

typedef struct probe {
    struct probe *next;
    const leases *l;
    CURL *easy;
    struct curl_slist *hdrs;
    char *url;
    char lid[LEASE_ID_MAX], owner[LEASE_OWNER_MAX + 1];
    uint64_t token;
    char refused[64]; /* the address the policy refused, if any */
    size_t body;
} probe;

struct leases {
    const config *cfg;
    store *st;
    engine *eng;
    const netpolicy *policy;
    CURLM *multi;
    pthread_t thread;
    int started;
    uint64_t retry_ms;            /* an unconfirmed expiry is offered again after this */
    atomic_int stop;
    atomic_int looking;           /* a look waits for its reply */
    atomic_uint_fast64_t next_look_ms;
    uint64_t last_now_ms;         /* worker thread: the wall clock at the last turn of the loop */
    atomic_uint_fast64_t back_ms; /* the clock's steps back not yet sent with a look that answered */
    uint64_t back_sent_ms;        /* what the look in flight sent of it */
    atomic_int warned;            /* the last look failed and it was logged */
    pthread_mutex_t mu;           /* guards the action queue */
    action *queue, **queue_tail;
    probe *probes;                /* worker thread only */
    uint32_t nprobes;             /* worker thread only */
};

/* ---- actions (queued by the writer thread, run by the worker) ---- */

static void action_free(action *a)
{
    free(a->member);
    free(a->lid);
    free(a->owner);
    free(a->url);
    free(a->spec);
    free(a->when);
    free(a);
}

static action *action_copy(const lease_action *la)
{
    action *a = xcalloc(1, sizeof *a);
    a->kind = la->kind;
    a->member = xstrdup(la->member);
    a->lid = xstrdup(la->lid);
    a->owner = xstrdup(la->owner);
    a->url = xstrdup(la->url);
    a->spec = xstrndup(la->on_expire, la->on_expire_len);
    a->when = xstrdup(la->when);
    a->token = la->token;
    a->ttl_ms = la->ttl_ms;
    return a;
}

static void queue_take(leases *l, action *first, action **tail)
{
    pthread_mutex_lock(&l->mu);
    *l->queue_tail = first;
    l->queue_tail = tail;
    pthread_mutex_unlock(&l->mu);
}

/* Writer thread: the reply to a look. Schedules the next look at the
 * earliest entry left (at once when a full batch was due), at most a tick
 * away, and queues the actions for the worker. */
static void look_cb(void *arg, const lease_look_reply *r)
{
    leases *l = arg;
    uint64_t now = clock_now_ms(), next = now + l->cfg->lease_tick_ms;
    if (r->outcome == LEASE_LOOKED) {
        atomic_fetch_sub(&l->back_ms, l->back_sent_ms);
        if (r->next_ms >= 0 && (uint64_t)r->next_ms < next)
            next = (uint64_t)r->next_ms;
        if (r->renewed > 0)
            LOG(LOG_DEBUG, "leases renewed", "\"count\":%" PRIu64, r->renewed);
        action *head = NULL, **tail = &head;
        for (size_t i = 0; i < r->nactions; i++) {
            action *a = action_copy(&r->actions[i]);
            *tail = a;
            tail = &a->next;
        }
        if (head)
            queue_take(l, head, tail);
        atomic_store(&l->warned, 0);
    } else if (r->outcome == LEASE_FAILED && !atomic_exchange(&l->warned, 1)) {
        char eb[256];
        LOG(LOG_ERROR, "lease renewal failed", "\"error\":\"%s\"", log_json_escape(r->error, eb, sizeof eb));
    }
    atomic_store(&l->next_look_ms, next);
    atomic_store(&l->looking, 0);
    curl_multi_wakeup(l->multi);
}

static void look(leases *l, uint64_t now)
{
    l->back_sent_ms = atomic_load(&l->back_ms);
    lease_look_req q = {.now_ms = now, .limit = LOOK_BATCH, .prefix = l->cfg->lease_prefix, .retry_ms = l->retry_ms,
                        .back_ms = l->back_sent_ms};
    atomic_store(&l->looking, 1);
    if (leases_look(l->st, &q, look_cb, l) < 0) {
        atomic_store(&l->next_look_ms, now + l->cfg->lease_tick_ms);
        atomic_store(&l->looking, 0);
    }
}

/* ---- expiry ---- */

typedef struct expiry {
    leases *l;
    char member[LEASE_ID_MAX + 24];
    char lid[LEASE_ID_MAX], token[24];
    char id[LEASE_TIMER_ID_MAX];
} expiry;

/* Forgets a pending expiry. Any thread. */
static void confirm(leases *l, const char *member)
{
    if (leases_confirm_expiry(l->st, l->cfg->lease_prefix, member, NULL, NULL) < 0)
        LOG(LOG_DEBUG, "lease expiry not confirmed; it is offered again", "\"lease\":\"%s\"", member);
}

/* Writer thread: the on_expire timer's create. Unreachable: the expiry is
 * offered again later (to any instance), and create is idempotent by id. */
static void expired_cb(void *arg, enum oneshot_outcome o)
{
    expiry *x = arg;
    if (o == ONESHOT_CREATED)
        LOG(LOG_DEBUG, "lease expired", "\"lease\":\"%s\",\"token\":%s,\"on_expire\":\"%s\"", x->lid, x->token,
            x->id);
    else if (o == ONESHOT_CONFLICT)
        LOG(LOG_ERROR, "lease expired, but another timer holds its on_expire id; on_expire dropped",
            "\"lease\":\"%s\",\"token\":%s,\"timer\":\"%s\"", x->lid, x->token, x->id);
    if (o != ONESHOT_UNREACHABLE)
        confirm(x->l, x->member);
    free(x);
}

static void expire(leases *l, const action *a)
{
    const char *member = a->member, *lid = a->lid, *stored = a->spec, *when = a->when;
    char token[24];
    snprintf(token, sizeof token, "%" PRIu64, a->token);
    uint64_t now = clock_now_ms();
    timer_spec *spec = NULL;
    spec_error err;
    if (!lease_key_valid(lease_id_key(lid)) || strlen(lid) >= LEASE_ID_MAX || spec_parse(stored, strlen(stored), NULL, now, &spec, &err) < 0) {
        LOG(LOG_ERROR, "stored on_expire unreadable; dropped", "\"lease\":\"%.200s\"", member);
        confirm(l, member);
        return;
    }
    spec->fire_at_ms = (int64_t)(now + lease_when_delay(when));
    expiry *x = xcalloc(1, sizeof *x);
    x->l = l;
    snprintf(x->member, sizeof x->member, "%s", member);
    snprintf(x->lid, sizeof x->lid, "%s", lid);
    snprintf(x->token, sizeof x->token, "%s", token);
    lease_timer_id(x->id, lid, token);
    if (oneshot_create_take(l->cfg, l->st, l->eng, xstrdup(x->id), spec, when, now, expired_cb, x) < 0)
        free(x); /* offered again after retry_ms */
}

/* ---- probes (worker thread) ---- */

static size_t discard_cb(char *data, size_t size, size_t n, void *userp)
{
    probe *p = userp;
    (void)data;
    p->body += size * n;
    return p->body > PROBE_BODY_MAX ? 0 : size * n; /* the status is what counts */
}

/* The destination policy on the address curl is about to connect to, as
 * the dispatcher applies it to timers (service/dispatch.c). */
static curl_socket_t opensocket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    probe *p = clientp;
    (void)purpose;
    if (p->l->policy && !netpolicy_connect_allowed(p->l->policy, p->url, &a->addr, p->refused, sizeof p->refused))
        return CURL_SOCKET_BAD;
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static void probe_free(leases *l, probe *p)
{
    curl_multi_remove_handle(l->multi, p->easy);
    curl_easy_cleanup(p->easy);
    curl_slist_free_all(p->hdrs);
    free(p->url);
    free(p);
    l->nprobes--;
}

/* Whether a probe of lid's lease number token may start: none of it is in
 * flight, fewer than MAX_PROBES are, and fewer than MAX_NS_PROBES of lid's
 * namespace. Why a share per namespace: a tenant whose many probe_urls
 * answer late would otherwise hold every slot, every period, and another
 * tenant's holders, alive and answering at once, would go silent for want
 * of a probe and lose their leases. */
static int probe_room(const leases *l, const char *lid, uint64_t token)
{
    size_t ns = (size_t)(lease_id_key(lid) - lid); /* "<ns>/", 0 without tokens */
    uint32_t same = 0;
    if (l->nprobes >= MAX_PROBES)
        return 0;
    for (const probe *p = l->probes; p; p = p->next) {
        if (p->token == token && strcmp(p->lid, lid) == 0)
            return 0;
        if (ns && strncmp(p->lid, lid, ns) == 0 && ++same >= MAX_NS_PROBES)
            return 0;
    }
    return 1;
}

static struct curl_slist *probe_headers(const probe *p)
{
    char line[LEASE_OWNER_MAX + 64];
    struct curl_slist *h = curl_slist_append(NULL, "Accept:");
    snprintf(line, sizeof line, "Hookwheel-Lease-Key: %s", lease_id_key(p->lid));
    h = curl_slist_append(h, line);
    snprintf(line, sizeof line, "Hookwheel-Lease-Owner: %s", p->owner);
    h = curl_slist_append(h, line);
    snprintf(line, sizeof line, "Hookwheel-Lease-Token: %" PRIu64, p->token);
    return curl_slist_append(h, line);
}

/* GET probe_url, with a timeout of a third of the ttl (at most 2 s), so an
 * answer arrives before the next period; no redirects, no proxy. */
static void start_probe(leases *l, const action *a)
{
    const char *lid = a->lid, *owner = a->owner, *url = a->url;
    uint64_t token = a->token;
    long timeout = (long)(a->ttl_ms / 3);
    if (timeout > PROBE_TIMEOUT_MAX_MS)
        timeout = PROBE_TIMEOUT_MAX_MS;
    if (strlen(lid) >= LEASE_ID_MAX || !probe_room(l, lid, token) ||
        !lease_key_valid(lease_id_key(lid)) || !lease_owner_valid(owner) ||
        timeout < 1)
        return;
    probe *p = xcalloc(1, sizeof *p);
    p->l = l;
    p->url = xstrdup(url);
    snprintf(p->lid, sizeof p->lid, "%s", lid);
    p->token = token;
    snprintf(p->owner, sizeof p->owner, "%s", owner);
    p->hdrs = probe_headers(p);
    CURL *e = p->easy = curl_easy_init();
    if (!e || !p->hdrs)
        abort(); /* out of memory, as xalloc */
    curl_easy_setopt(e, CURLOPT_URL, p->url);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, ""); /* never a proxy from the environment */
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, opensocket_cb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, p);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, p);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, p->hdrs);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "hookwheel/" HOOKWHEEL_VERSION);
    curl_easy_setopt(e, CURLOPT_PRIVATE, p);
    p->next = l->probes;
    l->probes = p;
    l->nprobes++;
    curl_multi_add_handle(l->multi, e);
}

/* A 2xx: a sign of life, noted as the holder's heartbeat is. */
static void probe_ok(leases *l, const probe *p)
{
    if (leases_heartbeat(l->st, l->cfg->lease_prefix, p->lid, p->owner, p->token, clock_now_ms(),
                         LEASE_SIGN_PROBE_OK, NULL, NULL) < 0)
        LOG(LOG_DEBUG, "lease probe answer not recorded", "\"lease\":\"%s\"", p->lid);
}

static void finish_probes(leases *l)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(l->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        probe *p = NULL, **pp;
        long code = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&p);
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200 && code < 300)
            probe_ok(l, p);
        else
            LOG(LOG_DEBUG, "lease probe failed", "\"lease\":\"%s\",\"status\":%ld,\"error\":\"%s%s\"", p->lid, code,
                p->refused[0] && msg->data.result == CURLE_COULDNT_CONNECT ? "destination not allowed (policy): "
                                                                           : curl_easy_strerror(msg->data.result),
                p->refused[0] && msg->data.result == CURLE_COULDNT_CONNECT ? p->refused : "");
        for (pp = &l->probes; *pp != p; pp = &(*pp)->next)
            ;
        *pp = p->next;
        probe_free(l, p);
    }
}

/* ---- the loop ---- */

/* A lease without on_expire expired. */
static void log_gone(const action *a)
{
    char token[24] = "null";
    if (a->token)
        snprintf(token, sizeof token, "%" PRIu64, a->token);
    LOG(LOG_DEBUG, "lease expired", "\"lease\":\"%.200s\",\"token\":%s,\"on_expire\":null", a->lid, token);
}

static void run_actions(leases *l)
{
    pthread_mutex_lock(&l->mu);
    action *a = l->queue;
    l->queue = NULL;
    l->queue_tail = &l->queue;
    pthread_mutex_unlock(&l->mu);
    while (a) {
        action *next = a->next;
        if (a->kind == LEASE_ACTION_PROBE)
            start_probe(l, a);
        else if (a->kind == LEASE_ACTION_EXPIRE)
            expire(l, a);
        else
            log_gone(a);
        action_free(a);
        a = next;
    }
}

/* How long the loop may sleep: until the next look, at most a tick (a look
 * in flight wakes it with its reply). */
static int wait_ms(const leases *l)
{
    uint64_t now = clock_now_ms(), tick = l->cfg->lease_tick_ms, next = atomic_load(&l->next_look_ms);
    if (atomic_load(&l->looking) || next > now + tick)
        return (int)tick;
    return next > now ? (int)(next - now) : 0;
}

/* The wall clock stepped back (NTP, an operator's date): the schedule in
 * Redis and the holders' signs of life were written on the clock before the
 * step, so the next look moves them back by as much (lease.lua "renew"),
 * and it goes out at once rather than when the clock catches up with the
 * time it was due at: until then no renewal would go out while the keys'
 * PX, which does not follow the wall clock, ran out under live holders. */
static void follow_clock(leases *l, uint64_t now)
{
    uint64_t last = l->last_now_ms;
    l->last_now_ms = now;
    if (last == 0 || now >= last)
        return;
    atomic_fetch_add(&l->back_ms, last - now);
    atomic_store(&l->next_look_ms, now);
}

static void *worker_main(void *arg)
{
    leases *l = arg;
    pthread_setname_np(pthread_self(), "hw-leases");
    while (!atomic_load(&l->stop)) {
        uint64_t now = clock_now_ms();
        follow_clock(l, now);
        if (!atomic_load(&l->looking) && now >= atomic_load(&l->next_look_ms))
            look(l, now);
        run_actions(l);
        int running = 0;
        curl_multi_perform(l->multi, &running);
        finish_probes(l);
        curl_multi_poll(l->multi, NULL, 0, wait_ms(l), NULL);
    }
    while (l->probes) {
        probe *p = l->probes;
        l->probes = p->next;
        probe_free(l, p);
    }
    return NULL;
}

leases *leases_create(const config *cfg, const char *redis_url, engine *eng, const netpolicy *policy)
{
    leases *l = xcalloc(1, sizeof *l);
    l->cfg = cfg;
    l->eng = eng;
    l->policy = policy;
    l->retry_ms = 2 * cfg->redis_timeout_ms + 1000;
    l->queue_tail = &l->queue;
    atomic_init(&l->stop, 0);
    atomic_init(&l->looking, 0);
    atomic_init(&l->next_look_ms, 0);
    atomic_init(&l->back_ms, 0);
    atomic_init(&l->warned, 0);
    pthread_mutex_init(&l->mu, NULL);
    l->multi = curl_multi_init();
    l->st = store_create(redis_url, (uint32_t)cfg->redis_timeout_ms, (uint32_t)cfg->max_queued_writes);
    if (!l->multi || !l->st) {
        if (!l->multi)
            LOG(LOG_ERROR, "lease worker set-up failed", "\"what\":\"%s\"", "curl_multi_init");
        leases_free(l);
        return NULL;
    }
    return l;
}

int leases_start(leases *l)
{
    int rc = store_start(l->st);
    if (rc < 0)
        return rc;
    rc = pthread_create(&l->thread, NULL, worker_main, l);
    if (rc)
        return -rc;
    l->started = 1;
    return 0;
}

void leases_stop(leases *l)
{
    if (!l)
        return;
    if (l->started) {
        atomic_store(&l->stop, 1);
        curl_multi_wakeup(l->multi);
        pthread_join(l->thread, NULL);
        l->started = 0;
    }
    store_free(l->st); /* its last callbacks run here, on its writer thread */
    l->st = NULL;
}

void leases_free(leases *l)
{
    if (!l)
        return;
    leases_stop(l);
    while (l->queue) {
        action *a = l->queue;
        l->queue = a->next;
        action_free(a);
    }
    if (l->multi)
        curl_multi_cleanup(l->multi);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
