/* client.h - hookwheelctl's HTTP client for the hookwheel API.
 *
 * One libcurl easy handle, reused for every call of one command (so paging
 * keeps its connection). A call sends an optional JSON body and decodes a
 * JSON answer with jansson; it never prints. client_report() turns a failed
 * call into one line on stderr and the exit code scripts rely on (cli.h).
 * Single-threaded: the CLI is one short process. */
#ifndef HW_CLI_CLIENT_H
#define HW_CLI_CLIENT_H

#include <jansson.h>

typedef struct client client; /* opaque */

/* One call's outcome. status is the HTTP status, or 0 when no answer came
 * (error then says why: connection refused, timeout, ...). body is the
 * decoded JSON answer (NULL when empty or not JSON); raw is the answer's
 * text, NUL-terminated. Owned by the reply: free with client_reply_clear. */
typedef struct client_reply {
    long status;
    json_t *body;
    char *raw;
    char error[256];
    char url[512]; /* what was called, for messages */
    char method[8];
} client_reply;

/* base_url is the API's root ("http://127.0.0.1:8080", a trailing slash is
 * dropped); token may be NULL (no Authorization header); max_time_ms bounds
 * a whole call (the connect alone gets at most 5 s of it). Returns NULL when
 * libcurl cannot start. */
client *client_create(const char *base_url, const char *token, long max_time_ms);
void client_free(client *c); /* NULL is a no-op */

/* Calls method on path (already escaped; may carry a query) with body (NULL:
 * none; not taken). Fills *out, which the caller clears. Returns 0 when an
 * HTTP answer came (any status), -EIO when none did. */
int client_call(client *c, const char *method, const char *path, const json_t *body, client_reply *out)
    __attribute__((warn_unused_result));

void client_reply_clear(client_reply *r);

/* The exit code for r (cli.h): 0 for a 2xx; otherwise prints one line on
 * stderr (the problem's title, status, detail, field and state; the URL for
 * a server error or no answer) and returns 1, 3, 4, 5 or 6. */
int client_report(const client_reply *r);

/* path segment s percent-encoded (curl_easy_escape; "." and ".." as %2E),
 * appended to *buf; the others append text verbatim or a query parameter
 * (name=escaped value, with ? or & before it). *buf is a malloc'd string
 * or NULL. */
void client_path_add(char **buf, const char *text);
void client_path_segment(char **buf, const char *s);
void client_query_add(char **buf, const char *name, const char *value);

#endif
