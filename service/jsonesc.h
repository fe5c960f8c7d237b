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

/* len, less the bytes of a UTF-8 sequence cut short at the end of
 * s[0..len) (a lead byte and fewer continuation bytes than it announces:
 * at most 3 bytes), so text cut at a byte count stays valid UTF-8 when it
 * was valid before the cut. */
size_t utf8_whole_prefix(const unsigned char *s, size_t len);

/* How many bytes at the start of s[0..len) a JSON string holds as they are:
 * the length of the prefix without '"', '\\' or a control character (and,
 * when ascii is 1, without a byte >= 0x80). Eight bytes a step. */
size_t json_plain_prefix(const unsigned char *s, size_t len, int ascii);

/* Writes s[0..len) as the inside of a JSON string: quotes, backslashes and
 * control characters escaped; when s is not valid UTF-8, its bytes >= 0x80
 * become '?'. out must have room for 6 * len bytes. Returns the bytes
 * written (no NUL added). */
size_t json_escape(char *out, const char *s, size_t len);

/* Writes v in decimal at out (no NUL): at most 20 bytes. Returns the bytes
 * written. */
size_t json_int(char *out, long long v);

/* A growing buffer of JSON text (jb_*): zero-initialise it ({0}); p is
 * xmalloc'd, not NUL-terminated, and the caller frees it. */
typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

/* Makes room for k more bytes. */
void jb_room(jbuf *b, size_t k);

/* Appends s[0..k) as it is. */
void jb_put(jbuf *b, const char *s, size_t k);

/* Appends a string literal as it is. */
#define JB_LIT(b, lit) jb_put((b), (lit), sizeof(lit) - 1)

/* Appends s[0..len) as a JSON string, quoted: quotes, backslashes and
 * control characters escaped, other bytes as they are (s is valid UTF-8). */
void jb_str(jbuf *b, const char *s, size_t len);

/* Appends s[0..len) as a JSON string, quoted, escaped as json_escape does
 * (for text that may not be valid UTF-8, such as a truncated message). */
void jb_text(jbuf *b, const char *s, size_t len);

/* Appends v in decimal. */
void jb_int(jbuf *b, long long v);

/* For a body written in pieces (http_respond_stream's fill): copies up to
 * max bytes into buf, first what b holds from *taken on, then what each
 * call of next(arg) appends to b (b is emptied first; next returns 0 when
 * there is nothing more). What does not fit stays in b for the next call.
 * Returns the bytes copied: 0 only at the end. */
size_t jb_fill(jbuf *b, size_t *taken, char *buf, size_t max, int (*next)(void *arg), void *arg);

#endif
