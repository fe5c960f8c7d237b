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

/* The length of the well-formed UTF-8 sequence at s (1 to 4), or 0 when the
 * bytes there are not one (a stray continuation byte, an overlong form, a
 * surrogate, past U+10FFFF, or cut short by the end of the string). */
static size_t utf8_len(const unsigned char *s)
{
    size_t n;
    unsigned min;
    unsigned cp;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        n = 2, min = 0x80, cp = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        n = 3, min = 0x800, cp = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        n = 4, min = 0x10000, cp = s[0] & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* Bytes that are not UTF-8 (a raw request path, say) become U+FFFD: a line
 * is JSON only when it is UTF-8 (RFC 8259 section 8.1), and a parser that
 * reads bytes rejects it otherwise. A cut keeps multibyte characters whole. */
char *log_json_escape(const char *s, char *buf, size_t size)
{
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p && o + 7 < size) {
        unsigned char c = *p;
        size_t n = utf8_len(p);
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(buf + o, size - o, "\\u%04x", c);
        } else if (n == 0) {
            o += (size_t)snprintf(buf + o, size - o, "\\ufffd");
            n = 1;
        } else {
            memcpy(buf + o, p, n); /* n <= 4 < 7: it fits */
            o += n;
        }
        p += n ? n : 1;
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
