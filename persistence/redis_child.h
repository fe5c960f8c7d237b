/* redis_child.h - the embedded redis-server, started when no Redis URL is set.
 *
 * Main thread only. The child listens on a unix socket in the data directory
 * (no TCP port, so nothing to collide with), appends every write to its AOF
 * (appendfsync always unless asked for everysec), is started again when it
 * exits while hookwheel runs (redis_child_watch) and dies with hookwheel (PR_SET_PDEATHSIG), so a
 * kill -9 of hookwheel leaves no orphan behind. */
#ifndef HW_REDIS_CHILD_H
#define HW_REDIS_CHILD_H

#include <sys/types.h>

typedef struct redis_child redis_child; /* opaque */

/* Creates data_dir if needed, starts `server` (a path or a name looked up in
 * PATH, normally "redis-server") on data_dir/redis.sock and waits up to
 * timeout_ms until it answers PING. Returns the child, or NULL after logging
 * one error line (binary missing, socket path too long, did not come up). */
redis_child *redis_child_start(const char *data_dir, const char *server, int timeout_ms);

/* The same with the AOF's fsync policy given: "always" (every write is on
 * disk before Redis answers it; redis_child_start's) or "everysec" (a crash
 * of the machine can lose the last second). NULL for any other value. */
redis_child *redis_child_start_fsync(const char *data_dir, const char *server, const char *appendfsync,
                                     int timeout_ms);

/* The unix socket path the child listens on; owned by the child. */
const char *redis_child_socket(const redis_child *c);

pid_t redis_child_pid(const redis_child *c);

/* Called now and then by the main thread. When the child has exited (a
 * crash, the OOM killer, a kill by hand), reaps it, logs its status and the
 * tail of its log, and starts it again on the same socket and data directory,
 * waiting up to the start's timeout for PING. A child that had run 30 s is
 * started again at once; one that died sooner, or a restart that failed, is
 * started again on a later call, 1 s later at first, then 2, 4, ... up to
 * 30 s (a full disk makes redis exit at its first write). Returns 0 when
 * nothing was done (yet), 1 after a restart, -1 after a failed one. NULL is
 * a no-op. */
int redis_child_watch(redis_child *c);

/* Sends SIGTERM (redis then flushes its AOF), waits up to 10 s, then SIGKILL;
 * reaps the child and frees c. NULL is a no-op. */
void redis_child_stop(redis_child *c);

#endif
