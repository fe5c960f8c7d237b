/* log.h - structured logging: one JSON object per line on stderr.
 *
 * Any thread. LOG() checks the level before formatting anything, so a
 * disabled debug line costs one comparison. Extra fields are passed as a
 * preformatted JSON fragment (without braces), e.g.
 *   LOG(LOG_INFO, "\"timer\":\"%s\",\"attempt\":%u", "attempt started", id, n);
 * The fragment's values must already be JSON-escaped; log_json_escape helps. */
#ifndef HW_LOG_H
#define HW_LOG_H

#include <stddef.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

extern int log_min_level;

/* Parses "debug", "info", "warn" or "error". Returns the level, or -1. */
int log_level_parse(const char *name);

/* Writes one line: {"ts":...,"level":...,"msg":msg[,fields]}. */
void log_write(int level, const char *msg, const char *fields_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Escapes s for use inside a JSON string into buf; truncates to fit,
 * never inside a character. Bytes that are not UTF-8 become U+FFFD, so
 * the line stays UTF-8 and JSON. Returns buf. */
char *log_json_escape(const char *s, char *buf, size_t size);

#define LOG(level, msg, ...)                                   \
    do {                                                       \
        if ((level) >= log_min_level)                          \
            log_write((level), (msg), __VA_ARGS__);            \
    } while (0)

#endif
