/* ui.c - the dashboard: GET /ui, /ui/ and /ui/<file>, the files of ui/
 * (index.html, app.js, app.css) embedded into the binary at build time.
 *
 * The Makefile writes $(BUILD)/ui_assets.h: for each file its name, its
 * Content-Type, its bytes and a strong ETag (the first 16 hex digits of
 * the file's SHA-256), so an answer is a pointer to static data and
 * nothing is read from disk. The files hold no data: the page calls the
 * API with the operator's bearer token, so these routes are open (routes.c).
 * Every answer forbids what the page does not need (Content-Security-
 * Policy: its own origin only, no inline script or style, no framing) and
 * is revalidated before each use (Cache-Control: no-cache), which costs a
 * 304 when the file did not change. Any libmicrohttpd thread; no state. */
#include "api.h"

#include <string.h>

struct ui_asset {
    const char *name;  /* as in the path: "app.js" */
    const char *ctype; /* its Content-Type */
    const unsigned char *data;
    size_t len;
    const char *etag;  /* quoted: "\"0123456789abcdef\"" */
};

#include "ui_assets.h"

#define UI_CSP "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " \
               "connect-src 'self'; frame-ancestors 'none'"

static const struct ui_asset *asset_find(const char *name)
{
    for (size_t i = 0; i < sizeof ui_assets / sizeof ui_assets[0]; i++)
        if (strcmp(ui_assets[i].name, name) == 0)
            return &ui_assets[i];
    return NULL;
}

/* True when an If-None-Match value names etag (weak comparison, as RFC 9110
 * §13.1.2 asks of If-None-Match: a W/ prefix is ignored), or is "*". */
static int etag_matches(const char *inm, const char *etag)
{
    size_t elen = strlen(etag);
    const char *p = inm;
    while (*p) {
        p += strspn(p, " \t,");
        if (*p == '*')
            return 1;
        if (strncmp(p, "W/", 2) == 0)
            p += 2;
        size_t n = strcspn(p, ",");
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n == elen && memcmp(p, etag, elen) == 0)
            return 1;
        p += strcspn(p, ",");
    }
    return 0;
}

/* Answers f, or 304 when the request's If-None-Match names its ETag. The
 * headers are the same either way, as a 304 must carry what the 200 would. */
static void respond_asset(http_req *r, const struct ui_asset *f)
{
    const http_header h[] = {
        {"ETag", f->etag},
        {"Cache-Control", "no-cache"},
        {"Content-Security-Policy", UI_CSP},
        {"X-Content-Type-Options", "nosniff"},
        {"Referrer-Policy", "no-referrer"},
    };
    const char *inm = http_req_header(r, "If-None-Match");
    if (inm && etag_matches(inm, f->etag))
        http_respond_static(r, 304, NULL, "", 0, h, sizeof h / sizeof h[0]);
    else
        http_respond_static(r, 200, f->ctype, f->data, f->len, h, sizeof h / sizeof h[0]);
}

/* GET /ui: 308 to /ui/. */
void api_ui_redirect(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    /* 308 keeps the method (a HEAD stays a HEAD); relative URLs of the page
     * (app.js) resolve against /ui/, not against /. */
    const http_header h[] = {{"Location", "/ui/"}, {"Referrer-Policy", "no-referrer"}};
    http_respond_static(r, 308, NULL, "", 0, h, sizeof h / sizeof h[0]);
}

/* Answers the embedded file name, or 404. Names are compared whole, so no
 * path can reach anything but the embedded files. */
static void serve(http_req *r, const char *name)
{
    const struct ui_asset *f = asset_find(name);
    if (!f) {
        http_respond_problem(r, 404, "no such file of the dashboard", NULL, NULL, 0);
        return;
    }
    respond_asset(r, f);
}

/* GET /ui/: the page, index.html. */
void api_ui_index(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    serve(r, "index.html");
}

/* GET /ui/{file}: a file of the dashboard by name. */
void api_ui_file(http_req *r, const char *const *params, void *app)
{
    (void)app;
    serve(r, params[0]);
}
