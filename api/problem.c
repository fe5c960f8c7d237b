/* problem.c - HTTP reason phrases and RFC 9457 problem documents.
 *
 * Pure functions, any thread. http.c turns the documents built here into
 * application/problem+json responses; nothing here knows libmicrohttpd or a
 * request. Reason phrases follow RFC 9110 (so 413 is "Content Too Large"),
 * and the table is ours rather than libmicrohttpd's so that problem titles do
 * not change with the library version. */
#include "http.h"

#include <stddef.h>

#include "problem.h"


static const struct reason {
    unsigned status;
    const char *phrase;
} reasons[] = {
    {100, "Continue"},
    {101, "Switching Protocols"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {204, "No Content"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {303, "See Other"},
    {304, "Not Modified"},
    {307, "Temporary Redirect"},
    {308, "Permanent Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {406, "Not Acceptable"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {411, "Length Required"},
    {412, "Precondition Failed"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {422, "Unprocessable Content"},
    {428, "Precondition Required"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
};

const char *http_reason(unsigned status)
{
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].status == status)
            return reasons[i].phrase;
    return "Unknown";
}

json_t *http_problem_doc(unsigned status, const char *detail, const char *field, json_t *extra)
{
    json_t *doc = json_object();
    /* json_object_set_new ignores a NULL value (e.g. detail that is not
     * UTF-8) and a NULL doc, so no member can make the document invalid. */
    json_object_set_new(doc, "type", json_string("about:blank"));
    json_object_set_new(doc, "title", json_string(http_reason(status)));
    json_object_set_new(doc, "status", json_integer(status));
    if (detail)
        json_object_set_new(doc, "detail", json_string(detail));
    if (field && field[0])
        json_object_set_new(doc, "field", json_string(field));
    if (doc && json_is_object(extra))
        json_object_update_missing(doc, extra);
    json_decref(extra);
    return doc;
}
