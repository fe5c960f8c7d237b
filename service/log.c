#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"

int log_min_level = LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int log_level_parse(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

char *log_json_escape(const char *s, char *buf, size_t size)
{
    size_t o = 0;
    for (; *s && o + 7 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(buf + o, size - o, "\\u%04x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o] = '\0';
    return buf;
}

void log_write(int level, const char *msg, const char *fields_fmt, ...)
{
    char line[4096], ts[32];
    clock_format_rfc3339(clock_now_ms(), ts, sizeof ts);
    int n = snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"", ts,
                     level_names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
    if (fields_fmt && fields_fmt[0] && n > 0 && (size_t)n < sizeof line - 64) {
        size_t room = sizeof line - (size_t)n - 3;
        va_list ap;
        va_start(ap, fields_fmt);
        int m = vsnprintf(line + n + 1, room, fields_fmt, ap);
        va_end(ap);
        if (m > 0 && (size_t)m < room) {
            line[n] = ',';
            n += 1 + m;
        } else if (m > 0) { /* too long: a cut fragment would not be JSON */
            n += snprintf(line + n, room, ",\"fields_truncated\":true");
        }
    }
    line[n++] = '}';
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stderr);
}
