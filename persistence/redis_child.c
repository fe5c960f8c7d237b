/* redis_child.c - start, watch and stop the embedded redis-server.
 *
 * Start-up is a fixed sequence: make the data directory, refuse it if a live
 * redis still answers on its socket after 3 s (that of a hookwheel killed a
 * moment ago goes sooner), remove a stale socket, fork, exec,
 * then poll the socket until PING answers PONG. A redis still loading its
 * AOF answers -LOADING, so PONG means the data is in memory.
 *
 * Everything the child needs (argv, the log and /dev/null descriptors) is
 * prepared before fork(): hookwheel may already run threads, so between fork
 * and exec the child makes only async-signal-safe calls. A failed exec is
 * reported through a close-on-exec pipe, so "binary missing" is an immediate,
 * precise error instead of a start-up timeout.
 *
 * The child's stdout and stderr go to redis.log, next to --logfile, because
 * redis prints configuration errors there before it opens its log file, and
 * hookwheel's stderr carries only JSON lines. The child also gets its own
 * process group: a Ctrl-C in a terminal then reaches hookwheel alone, whose
 * graceful shutdown still needs Redis to hand its claims back; Redis goes
 * last, through redis_child_stop(). */
#include "redis_child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "log.h"
#include "xalloc.h"

#define SOCKET_NAME    "redis.sock"
#define LOG_NAME       "redis.log"
#define POLL_MS        20
#define PROBE_MS       200   /* connect + PING timeout of one probe */
#define STOP_GRACE_MS  10000 /* SIGTERM to SIGKILL */
#define OWNER_WAIT_MS  3000  /* how long a redis answering on the socket may take to go */
#define TAIL_BYTES     1024  /* of redis.log, quoted in start-up errors */
#define RETRY_MIN_MS   1000  /* after a failed restart, doubling ... */
#define RETRY_MAX_MS   30000 /* ... up to this */
#define STABLE_MS      30000 /* a child that ran this long is restarted at once */
#define SUN_PATH_MAX   (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

struct redis_child {
    pid_t pid;     /* 0 once reaped */
    char *dir;     /* absolute data directory */
    char *sock;    /* dir/redis.sock */
    char *logfile; /* dir/redis.log */
    const char *appendfsync; /* "always" or "everysec" (static) */
    const char *server;      /* the binary; the caller's, outlives c */
    int start_timeout_ms;    /* of a start and of a restart */
    int64_t started_ms;      /* when the running child answered PING first */
    int64_t retry_at_ms;     /* pid 0: when redis_child_watch starts it again */
    int retry_ms;            /* the wait before the next restart, doubling */
};

enum probe { PROBE_NONE, PROBE_BUSY, PROBE_PONG };

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Escapes s for a log field; a macro so each field gets its own buffer. */
#define ESC(s, buf) log_json_escape((s), (buf), sizeof(buf))

/* mkdir -p; directories it creates get mode 0700, because the AOF holds
 * every timer's URL, headers and body. Returns 0 or a negative errno. */
static int make_dir(const char *path)
{
    if (path[0] == '\0')
        return -EINVAL;
    char *p = xstrdup(path);
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            rc = -errno;
            break;
        }
        *s = saved;
        if (saved == '\0')
            break;
    }
    free(p);
    struct stat st;
    if (rc == 0 && stat(path, &st) != 0)
        rc = -errno;
    if (rc == 0 && !S_ISDIR(st.st_mode))
        rc = -ENOTDIR;
    return rc;
}

/* 1 when a listener holds sock: a connect that is not refused (a full
 * backlog answers EAGAIN on a Unix socket, a live listener's too). */
static int listened(const char *sock)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(sock) > SUN_PATH_MAX)
        return 1; /* (the caller's path was checked; never taken for stale) */
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 1;
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa), err = errno;
    close(fd);
    return rc == 0 || (err != ECONNREFUSED && err != ENOENT);
}

/* Connects to sock and sends PING. PROBE_NONE: nobody is listening (a
 * stale socket refuses the connection); PROBE_BUSY: something listens but
 * did not answer PONG in time (-LOADING, a busy server, one shutting down,
 * or a backlog full: still alive, so its socket must not be taken away). */
static enum probe probe(const char *sock, int timeout_ms)
{
    if (!listened(sock))
        return PROBE_NONE;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *ctx = redisConnectUnixWithTimeout(sock, tv);
    enum probe result = PROBE_BUSY;
    if (ctx && !ctx->err) {
        redisReply *r = redisSetTimeout(ctx, tv) == REDIS_OK ? redisCommand(ctx, "PING") : NULL;
        if (r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)
            result = PROBE_PONG;
        if (r)
            freeReplyObject(r);
    }
    if (ctx)
        redisFree(ctx);
    return result;
}

/* A socket left behind by a killed redis is removed; a socket some live
 * redis answers on means another hookwheel owns this data directory. */
static int clear_stale_socket(const redis_child *c)
{
    char e1[512], e2[512];
    struct stat st;
    if (lstat(c->sock, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) {
        LOG(LOG_ERROR, "embedded redis socket path is not a socket", "\"socket\":\"%s\"",
            ESC(c->sock, e1));
        return -EEXIST;
    }
    /* A redis that answers on the socket may be the child of a hookwheel
     * just killed: it got SIGTERM with its parent's death and goes within
     * milliseconds, or, busy with its shutdown (the last AOF writes), no
     * longer answers meanwhile; so a start made at once (a supervisor's
     * restart) waits for it a while before it takes the data dir for
     * another hookwheel's. A busy one is probed every PROBE_MS only: each
     * probe it never accepted stays in its backlog (a few, of hundreds), and
     * a full backlog still counts as a listener (listened). */
    int64_t deadline = mono_ms() + OWNER_WAIT_MS;
    for (enum probe p = probe(c->sock, PROBE_MS); p != PROBE_NONE; p = probe(c->sock, PROBE_MS)) {
        if (mono_ms() >= deadline) {
            LOG(LOG_ERROR, "data dir already in use", "\"data_dir\":\"%s\",\"socket\":\"%s\"",
                ESC(c->dir, e1), ESC(c->sock, e2));
            return -EBUSY;
        }
        sleep_ms(p == PROBE_BUSY ? PROBE_MS : POLL_MS);
    }
    if (unlink(c->sock) != 0 && errno != ENOENT) {
        int err = errno;
        LOG(LOG_ERROR, "cannot remove stale redis socket", "\"socket\":\"%s\",\"error\":\"%s\"",
            ESC(c->sock, e1), strerror(err));
        return -err;
    }
    return 0;
}

/* Runs in the forked child; never returns. Only async-signal-safe calls. */
__attribute__((noreturn)) static void child_exec(char *const argv[], int null_fd, int log_fd,
                                                 int err_fd, pid_t parent)
{
    setpgid(0, 0);
    /* Die with hookwheel, even after kill -9. If hookwheel died before
     * prctl() took effect, the signal will never come: give up now. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(127);
    /* Dispositions first, then the mask: a signal pending in the mask
     * (hookwheel blocks them for sigwait) must not run a parent handler. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL); /* fails harmlessly for SIGKILL, SIGSTOP */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    /* Keep hookwheel's listening socket and Redis connections out of redis. */
    close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    execvp(argv[0], argv);
    int err = errno;
    ssize_t w = write(err_fd, &err, sizeof err);
    (void)w;
    _exit(127);
}

/* Returns 1 and fills *status once pid has exited (and is reaped), else 0.
 * A pid someone else reaped counts as exited, with status -1. */
static int reap(pid_t pid, int *status)
{
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 1;
        if (r == 0)
            return 0;
        if (errno != EINTR) {
            *status = -1;
            return 1;
        }
    }
}

static void describe_status(int status, char *buf, size_t size)
{
    if (status != -1 && WIFEXITED(status))
        snprintf(buf, size, "exit %d", WEXITSTATUS(status));
    else if (status != -1 && WIFSIGNALED(status))
        snprintf(buf, size, "signal %d", WTERMSIG(status));
    else
        snprintf(buf, size, "unknown");
}

/* SIGTERM, up to STOP_GRACE_MS for redis to flush and exit, then SIGKILL. */
static void terminate(pid_t pid)
{
    int status;
    kill(pid, SIGTERM);
    for (int64_t deadline = mono_ms() + STOP_GRACE_MS; mono_ms() < deadline; sleep_ms(POLL_MS))
        if (reap(pid, &status))
            return;
    LOG(LOG_WARN, "embedded redis ignored SIGTERM, killing it", "\"pid\":%d,\"grace_ms\":%d",
        (int)pid, STOP_GRACE_MS);
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
}

/* Reads what this start-up added to redis.log (from offset `from`), at most
 * its last TAIL_BYTES from a line start, trimmed and JSON-escaped into buf.
 * buf must leave room in the 4 KiB log line: log_write truncates silently. */
static char *read_log_tail(const char *logfile, off_t from, char *buf, size_t size)
{
    char raw[TAIL_BYTES + 1];
    ssize_t n = 0;
    int cut = 0;
    struct stat st;
    int fd = open(logfile, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &st) == 0) {
        cut = st.st_size - TAIL_BYTES > from;
        n = pread(fd, raw, TAIL_BYTES, cut ? st.st_size - TAIL_BYTES : from);
    }
    if (fd >= 0)
        close(fd);
    if (n < 0)
        n = 0;
    while (n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == '\r' || raw[n - 1] == ' '))
        n--;
    raw[n] = '\0';
    char *text = raw;
    char *nl = cut ? strchr(raw, '\n') : NULL;
    if (nl) /* drop the partial first line */
        text = nl + 1;
    return log_json_escape(text, buf, size);
}

static char **build_argv(const redis_child *c, const char *server)
{
    const char *args[] = {
        server,           "--port",          "0",
        "--unixsocket",   c->sock,           "--unixsocketperm", "700",
        "--dir",          c->dir,            "--appendonly",     "yes",
        "--appendfsync",  c->appendfsync,    "--save",           "",
        "--daemonize",    "no",              "--loglevel",       "warning",
        "--logfile",      c->logfile,        NULL,
    };
    size_t n = sizeof args / sizeof args[0];
    char **argv = xcalloc(n, sizeof *argv);
    for (size_t i = 0; i + 1 < n; i++)
        argv[i] = (char *)args[i]; /* exec's prototype is not const-correct */
    return argv;
}

/* Forks and execs the server. Returns 0, or a negative errno after logging:
 * on failure no child is left running or unreaped. */
static int spawn(redis_child *c, const char *server)
{
    char e1[512];
    char **argv = build_argv(c, server);
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    int log_fd = open(c->logfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int pipe_fd[2] = {-1, -1};
    int rc = 0, err = 0;
    if (null_fd < 0 || log_fd < 0 || pipe2(pipe_fd, O_CLOEXEC) != 0) {
        err = errno;
        LOG(LOG_ERROR, "cannot prepare embedded redis", "\"log\":\"%s\",\"error\":\"%s\"",
            ESC(c->logfile, e1), strerror(err));
        rc = -err;
        goto done;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(argv, null_fd, log_fd, pipe_fd[1], parent);
    if (pid < 0) {
        err = errno;
        LOG(LOG_ERROR, "cannot fork embedded redis", "\"error\":\"%s\"", strerror(err));
        rc = -err;
        goto done;
    }
    setpgid(pid, pid); /* also in the child: whichever runs first wins */
    close(pipe_fd[1]);
    pipe_fd[1] = -1;
    ssize_t n;
    while ((n = read(pipe_fd[0], &err, sizeof err)) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof err) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        LOG(LOG_ERROR, "cannot run embedded redis-server", "\"server\":\"%s\",\"error\":\"%s\"",
            ESC(server, e1), strerror(err));
        rc = -err;
        goto done;
    }
    c->pid = pid;
done:
    if (null_fd >= 0)
        close(null_fd);
    if (log_fd >= 0)
        close(log_fd);
    if (pipe_fd[0] >= 0)
        close(pipe_fd[0]);
    if (pipe_fd[1] >= 0)
        close(pipe_fd[1]);
    free(argv);
    return rc;
}

/* Polls until PONG. On failure logs one error; the child is reaped if it
 * exited (c->pid becomes 0) and still running on a timeout. */
static int wait_ready(redis_child *c, int timeout_ms, off_t log_from)
{
    char e1[512], tail[2048], how[32];
    int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        int status;
        if (reap(c->pid, &status)) {
            c->pid = 0;
            describe_status(status, how, sizeof how);
            LOG(LOG_ERROR, "embedded redis exited during start-up",
                "\"data_dir\":\"%s\",\"status\":\"%s\",\"log_tail\":\"%s\"", ESC(c->dir, e1), how,
                read_log_tail(c->logfile, log_from, tail, sizeof tail));
            return -ECHILD;
        }
        int64_t left = deadline - mono_ms();
        if (probe(c->sock, left < PROBE_MS ? (left > 1 ? (int)left : 1) : PROBE_MS) == PROBE_PONG)
            return 0;
        if (mono_ms() >= deadline) {
            LOG(LOG_ERROR, "embedded redis did not answer PING in time",
                "\"data_dir\":\"%s\",\"timeout_ms\":%d,\"log_tail\":\"%s\"", ESC(c->dir, e1),
                timeout_ms, read_log_tail(c->logfile, log_from, tail, sizeof tail));
            return -ETIMEDOUT;
        }
        sleep_ms(POLL_MS);
    }
}

static void child_free(redis_child *c)
{
    free(c->dir);
    free(c->sock);
    free(c->logfile);
    free(c);
}

/* Makes data_dir, resolves it and derives the socket and log paths. */
static redis_child *child_prepare(const char *data_dir)
{
    char e1[512];
    int rc = make_dir(data_dir);
    char *abs = rc == 0 ? realpath(data_dir, NULL) : NULL;
    if (!abs) {
        LOG(LOG_ERROR, "cannot create data dir", "\"data_dir\":\"%s\",\"error\":\"%s\"",
            ESC(data_dir, e1), strerror(rc ? -rc : errno));
        return NULL;
    }
    redis_child *c = xcalloc(1, sizeof *c);
    c->dir = xstrdup(abs);
    free(abs); /* realpath's buffer comes from malloc, not xmalloc */
    c->sock = path_join(c->dir, SOCKET_NAME);
    c->logfile = path_join(c->dir, LOG_NAME);
    if (strlen(c->sock) > SUN_PATH_MAX) {
        LOG(LOG_ERROR, "embedded redis socket path too long",
            "\"socket\":\"%s\",\"length\":%zu,\"max\":%zu", ESC(c->sock, e1), strlen(c->sock),
            (size_t)SUN_PATH_MAX);
        child_free(c);
        return NULL;
    }
    return c;
}

redis_child *redis_child_start(const char *data_dir, const char *server, int timeout_ms)
{
    return redis_child_start_fsync(data_dir, server, "always", timeout_ms);
}

redis_child *redis_child_start_fsync(const char *data_dir, const char *server, const char *appendfsync,
                                     int timeout_ms)
{
    char e1[512], e2[512];
    if (strcmp(appendfsync, "always") != 0 && strcmp(appendfsync, "everysec") != 0)
        return NULL;
    redis_child *c = child_prepare(data_dir);
    if (!c)
        return NULL;
    c->appendfsync = strcmp(appendfsync, "always") == 0 ? "always" : "everysec";
    c->server = server;
    c->start_timeout_ms = timeout_ms;
    struct stat st;
    off_t log_from = stat(c->logfile, &st) == 0 ? st.st_size : 0;
    if (clear_stale_socket(c) != 0 || spawn(c, server) != 0)
        goto fail;
    if (wait_ready(c, timeout_ms, log_from) != 0)
        goto fail;
    c->started_ms = mono_ms();
    LOG(LOG_INFO, "embedded redis started", "\"pid\":%d,\"socket\":\"%s\",\"data_dir\":\"%s\",\"appendfsync\":\"%s\"",
        (int)c->pid, ESC(c->sock, e1), ESC(c->dir, e2), c->appendfsync);
    return c;
fail:
    if (c->pid > 0)
        terminate(c->pid);
    child_free(c);
    return NULL;
}

/* The next restart waits 1 s, then twice as long as the one before, up to
 * RETRY_MAX_MS: a redis that cannot start, or dies at once again (a full
 * disk, with appendfsync always, makes it exit at its first write), is not
 * restarted in a tight loop. */
static void back_off(redis_child *c)
{
    c->retry_ms = c->retry_ms ? (c->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : c->retry_ms * 2) : RETRY_MIN_MS;
    c->retry_at_ms = mono_ms() + c->retry_ms;
}

/* Starts the server again in place of one that exited: the same socket, the
 * same data directory, so the store's connections find it where they left
 * it and the AOF brings back every acknowledged write. */
static int restart(redis_child *c)
{
    char e1[512];
    struct stat st;
    off_t log_from = stat(c->logfile, &st) == 0 ? st.st_size : 0;
    if (clear_stale_socket(c) != 0 || spawn(c, c->server) != 0 ||
        wait_ready(c, c->start_timeout_ms, log_from) != 0) {
        if (c->pid > 0)
            terminate(c->pid);
        c->pid = 0;
        back_off(c);
        LOG(LOG_ERROR, "embedded redis could not be restarted", "\"data_dir\":\"%s\",\"retry_in_ms\":%d",
            ESC(c->dir, e1), c->retry_ms);
        return -1;
    }
    c->started_ms = mono_ms();
    LOG(LOG_WARN, "embedded redis restarted", "\"pid\":%d,\"data_dir\":\"%s\"", (int)c->pid, ESC(c->dir, e1));
    return 0;
}

int redis_child_watch(redis_child *c)
{
    char e1[512], tail[2048], how[32];
    if (!c)
        return 0;
    if (c->pid > 0) {
        int status;
        if (!reap(c->pid, &status))
            return 0;
        if (mono_ms() - c->started_ms >= STABLE_MS) {
            c->retry_ms = 0;
            c->retry_at_ms = 0;
        } else {
            back_off(c);
        }
        describe_status(status, how, sizeof how);
        /* the whole tail: what the server wrote before it died is what says why */
        LOG(LOG_ERROR, "embedded redis exited; starting it again",
            "\"pid\":%d,\"status\":\"%s\",\"ran_ms\":%lld,\"retry_in_ms\":%d,\"data_dir\":\"%s\",\"log_tail\":\"%s\"",
            (int)c->pid, how, (long long)(mono_ms() - c->started_ms), c->retry_at_ms ? c->retry_ms : 0,
            ESC(c->dir, e1), read_log_tail(c->logfile, 0, tail, sizeof tail));
        c->pid = 0;
    }
    if (mono_ms() < c->retry_at_ms)
        return 0;
    return restart(c) == 0 ? 1 : -1;
}

const char *redis_child_socket(const redis_child *c) { return c->sock; }

pid_t redis_child_pid(const redis_child *c) { return c->pid; }

void redis_child_stop(redis_child *c)
{
    if (!c)
        return;
    if (c->pid > 0) {
        terminate(c->pid);
        LOG(LOG_INFO, "embedded redis stopped", "\"pid\":%d", (int)c->pid);
    }
    child_free(c);
}
