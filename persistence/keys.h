/* keys.h - names of hookwheel's Redis keys.
 *
 * Any thread; pure. Every key of a timer carries the hash tag {P} of its
 * partition P = fnv1a(id) mod partitions, so all the keys one script touches
 * live in one Redis Cluster slot (DESIGN §3):
 *   hw:{P}:t:<id>              string: the timer's record (timers.h, _record.lua)
 *   hw:{P}:h:<id>              string: its attempt history, newest first
 *   hw:{P}:ix:<ns>:<state>     zset: a namespace's timers in a state no instance
 *                              holds: waiting ones (scheduled, retrying) by fire
 *                              time (ms), which sweeps claim; others by when they
 *                              got there (the listing index; _record.lua)
 *   hw:{P}:nss                 set: namespaces with waiting timers in an index
 *   hw:{P}:cl:<tag>            zset: timers an instance holds in memory or is firing
 *                              (tag: keys_owner_tag of the instance id)
 *   hw:{P}:holders             set: tags of instances with a claimed zset here
 *   hw:{P}:failed              zset: dead letters by failure time, of earlier
 *                              layouts (never read; migrate.lua deletes it)
 *   hw:{P}:lc:<tag>            list: ids of the instance's last claim, replayed
 *                              when that reply was lost
 *   hw:{P}:rv:<tag>            list: "<version> <id>" of timers the instance holds
 *                              waiting that an instruction took away, handed over
 *                              by its next claim (_record.lua: revoke)
 * The partition count must be the same for every instance and must never
 * change while data exists: it decides where a timer's keys are. */
#ifndef HW_KEYS_H
#define HW_KEYS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KEYS_MAX 320 /* room for any key: ids are <= 128 bytes, instance ids <= 128 */

uint32_t keys_partition(const char *id, uint32_t partitions);

/* The length of the namespace of a key id "<namespace>/<id>" (and of a
 * queue's "<namespace>/<queue>"): the part before the first '/', 0 when
 * there is none (the namespace "" of a deployment without tokens), as
 * _record.lua's id_ns. */
static inline size_t keys_ns_len(const char *key_id)
{
    const char *slash = strchr(key_id, '/');
    return slash ? (size_t)(slash - key_id) : 0;
}

/* Each writes a NUL-terminated key into buf (KEYS_MAX bytes) and returns its length. */
size_t keys_timer(char *buf, uint32_t p, const char *id);
size_t keys_timer_prefix(char *buf, uint32_t p);
size_t keys_namespaces(char *buf, uint32_t p); /* hw:{P}:nss */
/* The instance's owner tag: 16 hex digits of a 64-bit FNV-1a of its id, never
 * all zeros (the record's "no owner"). */
void keys_owner_tag(char tag[17], const char *instance);
size_t keys_claimed(char *buf, uint32_t p, const char *tag);
size_t keys_failed(char *buf, uint32_t p);
size_t keys_lastclaim(char *buf, uint32_t p, const char *tag); /* ids of the last claim reply */
size_t keys_index(char *buf, uint32_t p, const char *ns, const char *state); /* listing index (list.lua) */
/* The answer a selector call gave under an Idempotency-Key (select.lua),
 * by where the call started (chunk, and a hash of the id after which). */
size_t keys_select_receipt(char *buf, uint32_t p, const char *ns, const char *idem, uint32_t chunk,
                           const char *after);

#endif
