/* client.c - see client.h. libcurl does the HTTP (timeouts, connection
 * reuse, percent-encoding), jansson the JSON; this file only joins them and
 * maps an answer to an exit code. */
#include "cli/client.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cli/cli.h"
#include "service/xalloc.h"

/* An answer larger than this is cut off with an error: a listing page is at
 * most HOOKWHEEL_LIST_MAX_BYTES (4 MiB by default), so 64 MiB is far above
 * any honest answer and still bounds a misdirected one. */
#define CLIENT_MAX_ANSWER ((size_t)64 << 20)
#define CLIENT_CONNECT_MS 5000L

struct client {
    CURL *easy;
    char *base;   /* without a trailing slash */
    char *auth;   /* "Authorization: Bearer ..." or NULL */
    long max_ms;
};

typedef struct answer {
    char *data;
    size_t len;
    int too_big;
} answer;

client *client_create(const char *base_url, const char *token, long max_time_ms)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return NULL;
    CURL *easy = curl_easy_init();
    if (!easy)
        return NULL;
    client *c = xcalloc(1, sizeof *c);
    c->easy = easy;
    c->base = xstrdup(base_url);
    size_t n = strlen(c->base);
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    if (token && *token) {
        c->auth = xmalloc(strlen(token) + 32);
        sprintf(c->auth, "Authorization: Bearer %s", token);
    }
    c->max_ms = max_time_ms;
    return c;
}

void client_free(client *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->easy);
    free(c->base);
    free(c->auth);
    free(c);
    curl_global_cleanup();
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    answer *a = userdata;
    size_t n = size * nmemb;
    if (a->len + n > CLIENT_MAX_ANSWER) {
        a->too_big = 1;
        return 0; /* makes curl stop with CURLE_WRITE_ERROR */
    }
    a->data = xrealloc(a->data, a->len + n + 1);
    memcpy(a->data + a->len, ptr, n);
    a->len += n;
    a->data[a->len] = '\0';
    return n;
}

static struct curl_slist *request_headers(const client *c, int has_body)
{
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json, application/problem+json");
    if (has_body)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (c->auth)
        h = curl_slist_append(h, c->auth);
    return h;
}

/* Sets the options of one call on the reused handle. */
static void prepare(client *c, const char *method, const char *url, const char *payload, answer *a,
                    char *errbuf)
{
    CURL *e = c->easy;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     c->max_ms > 0 && c->max_ms < CLIENT_CONNECT_MS ? c->max_ms : CLIENT_CONNECT_MS);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->max_ms);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_USERAGENT, "hookwheelctl/" CLI_VERSION);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    /* A POST or PUT without a body still says Content-Length: 0; GET and
     * DELETE send none. */
    if (payload || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, payload ? payload : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, payload ? (long)strlen(payload) : 0L);
    }
}

int client_call(client *c, const char *method, const char *path, const json_t *body, client_reply *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->url, sizeof out->url, "%s%s", c->base, path);
    snprintf(out->method, sizeof out->method, "%s", method);
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    answer a = {0};
    struct curl_slist *hdrs = request_headers(c, payload != NULL);
    char *url = xmalloc(strlen(c->base) + strlen(path) + 1);
    sprintf(url, "%s%s", c->base, path);
    prepare(c, method, url, payload, &a, errbuf);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, hdrs);
    CURLcode rc = curl_easy_perform(c->easy);
    curl_slist_free_all(hdrs);
    free(payload);
    free(url);
    out->raw = a.data ? a.data : xstrdup("");
    if (rc != CURLE_OK) {
        snprintf(out->error, sizeof out->error, "%s",
                 a.too_big ? "the answer is larger than 64 MiB" : *errbuf ? errbuf : curl_easy_strerror(rc));
        return -EIO;
    }
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &out->status);
    if (a.len > 0)
        out->body = json_loadb(a.data, a.len, 0, NULL);
    return 0;
}

void client_reply_clear(client_reply *r)
{
    json_decref(r->body);
    free(r->raw);
    r->body = NULL;
    r->raw = NULL;
}

/* The exit code of an HTTP status (the table in cli.h). */
static int exit_code_of(long status)
{
    if (status >= 200 && status < 300)
        return CLI_OK;
    if (status == 401 || status == 403)
        return CLI_AUTH;
    if (status == 404)
        return CLI_NOT_FOUND;
    if (status == 409)
        return CLI_CONFLICT;
    if (status >= 500)
        return CLI_UNAVAILABLE;
    return CLI_REFUSED;
}

/* Prints s with every control character as a space, so a message stays on
 * one line whatever the server wrote. */
static void put_line_safe(const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max; i++)
        fputc(iscntrl((unsigned char)s[i]) ? ' ' : s[i], stderr);
}

static void put_member(const json_t *body, const char *name, const char *before)
{
    const json_t *v = json_object_get(body, name);
    if (json_is_string(v)) {
        fputs(before, stderr);
        put_line_safe(json_string_value(v), 1000);
    } else if (json_is_integer(v)) {
        fprintf(stderr, "%s%" JSON_INTEGER_FORMAT, before, json_integer_value(v));
    }
}

int client_report(const client_reply *r)
{
    if (r->status == 0) {
        fprintf(stderr, "hookwheelctl: cannot reach %s: ", r->url);
        put_line_safe(r->error, sizeof r->error);
        fputc('\n', stderr);
        return CLI_UNAVAILABLE;
    }
    int code = exit_code_of(r->status);
    if (code == CLI_OK)
        return CLI_OK;
    fputs("hookwheelctl: ", stderr);
    if (code == CLI_UNAVAILABLE || !json_is_object(r->body))
        fprintf(stderr, "%s %s: ", r->method, r->url);
    if (json_is_object(r->body) && json_is_string(json_object_get(r->body, "title"))) {
        put_member(r->body, "title", "");
        fprintf(stderr, " (%ld)", r->status);
        put_member(r->body, "detail", ": ");
        put_member(r->body, "field", " [field: ");
        if (json_object_get(r->body, "field"))
            fputc(']', stderr);
        put_member(r->body, "state", " [state: ");
        if (json_object_get(r->body, "state"))
            fputc(']', stderr);
        put_member(r->body, "owner", " [held by: ");
        if (json_object_get(r->body, "owner"))
            fputc(']', stderr);
    } else {
        fprintf(stderr, "HTTP %ld", r->status);
        if (r->raw && *r->raw) {
            fputs(": ", stderr);
            put_line_safe(r->raw, 200);
        }
    }
    fputc('\n', stderr);
    return code;
}

void client_path_add(char **buf, const char *text)
{
    size_t have = *buf ? strlen(*buf) : 0;
    *buf = xrealloc(*buf, have + strlen(text) + 1);
    strcpy(*buf + have, text);
}

/* curl_easy_escape ignores its handle since curl 7.82, so no handle is
 * needed to build a path before the call. */
void client_path_segment(char **buf, const char *s)
{
    /* "." and ".." are valid ids, queue names and lease keys, which
     * curl_easy_escape leaves as they are and curl then removes as dot
     * segments (RFC 3986): /timers/.. would become /. */
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
        client_path_add(buf, s[1] ? "%2E%2E" : "%2E");
        return;
    }
    char *e = curl_easy_escape(NULL, s, 0);
    if (!e) {
        fprintf(stderr, "hookwheelctl: out of memory\n");
        abort();
    }
    client_path_add(buf, e);
    curl_free(e);
}

void client_query_add(char **buf, const char *name, const char *value)
{
    client_path_add(buf, *buf && strchr(*buf, '?') ? "&" : "?");
    client_path_add(buf, name);
    client_path_add(buf, "=");
    client_path_segment(buf, value);
}
