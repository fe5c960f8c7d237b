/* jsonesc.h - writing JSON strings by hand on hot paths.
 *
 * Any thread; pure. For text that is built once per request or attempt and
 * only ever spliced into a JSON document, where a jansson tree would cost
 * more than the text itself. */
#ifndef HW_JSONESC_H
#define HW_JSONESC_H

#include <stddef.h>

/* 1 when s[0..len) is valid UTF-8 (no overlong forms, no surrogates, at most
 * U+10FFFF), else 0. */
int utf8_valid(const unsigned char *s, size_t len);

/* Writes s[0..len) as the inside of a JSON string: quotes, backslashes and
 * control characters escaped; when s is not valid UTF-8, its bytes >= 0x80
 * become '?'. out must have room for 6 * len bytes. Returns the bytes
 * written (no NUL added). */
size_t json_escape(char *out, const char *s, size_t len);

/* Writes v in decimal at out (no NUL): at most 20 bytes. Returns the bytes
 * written. */
size_t json_int(char *out, long long v);

#endif
