/* tzfile.h - time zones from the system's tz database.
 *
 * Any thread. Zones are read from the TZif files (RFC 8536, versions 1-4;
 * the 64-bit data of version 2 and later) under $TZDIR, or
 * /usr/share/zoneinfo (Debian's tzdata), including the footer's POSIX TZ
 * string, which gives the rule after the last listed transition (Debian's
 * files list transitions up to 2037; later instants follow the footer).
 * Nothing here switches the process-wide TZ or calls localtime. A zone is
 * loaded once per name and kept for the life of the process (a mutex
 * guards the cache), so a tz pointer never dangles. Leap-second ("right/")
 * zones are refused. "UTC", "Etc/UTC", "GMT" and "Etc/GMT" work without
 * tzdata. */
#ifndef HW_TZFILE_H
#define HW_TZFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tz tz;

/* The zone named `name` (an IANA name such as "Europe/Berlin"), or NULL
 * with err (errlen bytes) saying why in one sentence. Names are checked
 * before any file is opened: 1-64 bytes of [A-Za-z0-9/_+-.], no leading
 * '/', no "." or ".." component. */
const tz *tz_get(const char *name, char *err, size_t errlen);

const char *tz_name(const tz *z);

/* The UTC offset in seconds in effect at UTC instant t (seconds since the
 * epoch), and whether it is daylight time (is_dst may be NULL). Any t. */
int32_t tz_offset_at(const tz *z, int64_t t, int *is_dst);

/* The abbreviation in effect at t ("CET", "+0545"). */
const char *tz_abbrev_at(const tz *z, int64_t t);

#endif
