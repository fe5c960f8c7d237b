/* netpolicy.c - forbidden ranges, the allowlist, and IP literal parsing.
 *
 * A policy holds two prefix tables (the built-in forbidden ranges, each with
 * the reason it names, and the allowlisted CIDRs) and the allowlisted host
 * names. Both tables are short (a dozen or so entries), so a linear scan is
 * faster than anything cleverer and is done once per connection.
 *
 * IPv6 addresses that carry an IPv4 address (IPv4-mapped ::ffff:0:0/96,
 * IPv4-translated ::ffff:0:0:0/96, the deprecated IPv4-compatible ::/96,
 * NAT64 64:ff9b::/96, 6to4 2002::/16, Teredo 2001::/32, whose client
 * address is the last 32 bits inverted) are judged by the embedded IPv4
 * address too: [::ffff:127.0.0.1] reaches the loopback as surely as
 * 127.0.0.1 does, and a translator may make [::127.0.0.1] do so. The
 * local-use NAT64 prefix 64:ff9b:1::/48 places the IPv4 address by its
 * operator's prefix length, so it is forbidden whole. Documentation ranges (192.0.2.0/24, 2001:db8::/32, ...) are not
 * forbidden: nothing internal can live there, so blocking them protects
 * nothing. */
#include "netpolicy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "xalloc.h"

#define HOST_MAX 253

typedef struct ipaddr {
    int family;           /* AF_INET or AF_INET6 */
    unsigned char b[16];  /* network order; AF_INET uses b[0..3] */
} ipaddr;

typedef struct prefix {
    ipaddr a;
    unsigned bits;
    const char *reason;   /* forbidden table only */
} prefix;

struct netpolicy {
    prefix *forbidden;
    size_t nforbidden;
    prefix *allow;
    size_t nallow;
    char **hosts;         /* lower case, no trailing dot */
    size_t nhosts;
};

/* Listed most specific first where ranges nest, so the reason is apt. */
static const struct {
    const char *cidr, *reason;
} forbidden_ranges[] = {
    {"0.0.0.0/8", "this network"},
    {"10.0.0.0/8", "private"},
    {"100.64.0.0/10", "carrier-grade NAT"},
    {"127.0.0.0/8", "loopback"},
    {"169.254.0.0/16", "link-local"},
    {"172.16.0.0/12", "private"},
    {"192.0.0.0/24", "IETF protocol assignments"},
    {"192.168.0.0/16", "private"},
    {"198.18.0.0/15", "benchmarking"},
    {"224.0.0.0/4", "multicast"},
    {"255.255.255.255/32", "broadcast"},
    {"240.0.0.0/4", "reserved"},
    {"::/128", "unspecified"},
    {"::1/128", "loopback"},
    {"fc00::/7", "unique local"},
    {"fe80::/10", "link-local"},
    {"fec0::/10", "site-local"},
    {"64:ff9b:1::/48", "local-use NAT64"},
    {"ff00::/8", "multicast"},
};
#define NFORBIDDEN (sizeof forbidden_ranges / sizeof forbidden_ranges[0])

/* ---- prefixes ---------------------------------------------------------- */

static int parse_addr(const char *s, ipaddr *a)
{
    memset(a, 0, sizeof *a);
    if (inet_pton(AF_INET, s, a->b) == 1)
        a->family = AF_INET;
    else if (inet_pton(AF_INET6, s, a->b) == 1)
        a->family = AF_INET6;
    return a->family ? 0 : -1;
}

/* "addr" or "addr/bits" in the standard notations; host bits are cleared. */
static int parse_prefix(const char *s, prefix *p)
{
    char buf[INET6_ADDRSTRLEN + 8];
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    char *slash = strchr(buf, '/');
    if (slash)
        *slash = '\0';
    if (parse_addr(buf, &p->a) < 0)
        return -1;
    unsigned max = p->a.family == AF_INET ? 32 : 128;
    p->bits = max;
    if (slash) {
        char *end;
        if (!isdigit((unsigned char)slash[1]))
            return -1;
        unsigned long n = strtoul(slash + 1, &end, 10);
        if (*end || n > max)
            return -1;
        p->bits = (unsigned)n;
    }
    for (unsigned i = p->bits; i < max; i++)
        p->a.b[i / 8] &= (unsigned char)~(0x80u >> (i % 8));
    return 0;
}

static int in_prefix(const prefix *p, const ipaddr *a)
{
    if (p->a.family != a->family)
        return 0;
    unsigned whole = p->bits / 8, rest = p->bits % 8;
    if (memcmp(p->a.b, a->b, whole) != 0)
        return 0;
    if (!rest)
        return 1;
    unsigned char mask = (unsigned char)(0xFFu << (8 - rest));
    return (p->a.b[whole] & mask) == (a->b[whole] & mask);
}

static const prefix *find(const prefix *tab, size_t n, const ipaddr *a)
{
    for (size_t i = 0; i < n; i++)
        if (in_prefix(&tab[i], a))
            return &tab[i];
    return NULL;
}

/* The IPv4 address an IPv6 address carries (mapped, translated,
 * compatible, NAT64, 6to4, Teredo's client): 1 and *v4, or 0. */
static int embedded_v4(const ipaddr *a, ipaddr *v4)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char translated[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
    static const unsigned char compatible[12] = {0};
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
    const unsigned char *src = NULL;
    if (a->family != AF_INET6)
        return 0;
    if (memcmp(a->b, mapped, 12) == 0 || memcmp(a->b, translated, 12) == 0 ||
        memcmp(a->b, compatible, 12) == 0 || memcmp(a->b, nat64, 12) == 0)
        src = a->b + 12;
    else if (a->b[0] == 0x20 && a->b[1] == 0x02)
        src = a->b + 2;
    else if (a->b[0] == 0x20 && a->b[1] == 0x01 && a->b[2] == 0 && a->b[3] == 0) {
        /* Teredo (RFC 4380): traffic goes to the client, whose address is
         * the last 32 bits, inverted */
        memset(v4, 0, sizeof *v4);
        v4->family = AF_INET;
        for (int i = 0; i < 4; i++)
            v4->b[i] = (unsigned char)~a->b[12 + i];
        return 1;
    }
    if (!src)
        return 0;
    memset(v4, 0, sizeof *v4);
    v4->family = AF_INET;
    memcpy(v4->b, src, 4);
    return 1;
}

/* Why a is refused, or NULL: allowlisted (itself or its embedded IPv4)
 * wins over every forbidden range; else a forbidden range of a itself (::1
 * is loopback, not 0.0.0.1), then of its embedded IPv4. */
static const char *refusal(const netpolicy *p, const ipaddr *a)
{
    ipaddr v4;
    const ipaddr *judged = embedded_v4(a, &v4) ? &v4 : a;
    if (find(p->allow, p->nallow, a) || find(p->allow, p->nallow, judged))
        return NULL;
    const prefix *f = find(p->forbidden, p->nforbidden, a);
    if (!f && judged != a)
        f = find(p->forbidden, p->nforbidden, judged);
    return f ? f->reason : NULL;
}

/* ---- host names -------------------------------------------------------- */

/* host lower-cased without a trailing dot into out[HOST_MAX + 1]; -1 when
 * it is too long or empty. */
static int norm_host(const char *host, char *out)
{
    size_t n = strlen(host);
    if (n && host[n - 1] == '.')
        n--;
    if (n == 0 || n > HOST_MAX)
        return -1;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)host[i]);
    out[n] = '\0';
    return 0;
}

static int valid_host_name(const char *h)
{
    int letter = 0;
    for (const char *c = h; *c; c++) {
        if (isalpha((unsigned char)*c))
            letter = 1;
        else if (!isdigit((unsigned char)*c) && *c != '-' && *c != '.' && *c != '_')
            return 0;
    }
    return letter; /* all digits and dots: a mistyped address, not a name */
}

static int is_localhost(const char *h)
{
    size_t n = strlen(h);
    return strcmp(h, "localhost") == 0 || (n > 10 && strcmp(h + n - 10, ".localhost") == 0);
}

/* ---- creation ---------------------------------------------------------- */

static int add_item(netpolicy *p, const char *item, char *err, size_t errlen)
{
    char h[HOST_MAX + 1];
    if (parse_prefix(item, &p->allow[p->nallow]) == 0) {
        p->nallow++;
        return 0;
    }
    if (strchr(item, '/') || norm_host(item, h) < 0 || !valid_host_name(h)) {
        snprintf(err, errlen, "\"%.80s\" is not a CIDR, an IP address or a host name", item);
        return -1;
    }
    p->hosts[p->nhosts++] = xstrdup(h);
    return 0;
}

netpolicy *netpolicy_create(const char *allowlist, char *err, size_t errlen)
{
    netpolicy *p = xcalloc(1, sizeof *p);
    p->forbidden = xcalloc(NFORBIDDEN, sizeof *p->forbidden);
    for (size_t i = 0; i < NFORBIDDEN; i++) {
        if (parse_prefix(forbidden_ranges[i].cidr, &p->forbidden[i]) < 0)
            abort(); /* the table above is wrong */
        p->forbidden[i].reason = forbidden_ranges[i].reason;
    }
    p->nforbidden = NFORBIDDEN;
    const char *list = allowlist ? allowlist : "";
    size_t items = 1;
    for (const char *c = list; *c; c++)
        items += *c == ',';
    p->allow = xcalloc(items, sizeof *p->allow);
    p->hosts = xcalloc(items, sizeof *p->hosts);
    char *copy = xstrdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok))
            tok++;
        size_t n = strlen(tok);
        while (n && isspace((unsigned char)tok[n - 1]))
            tok[--n] = '\0';
        if (n && add_item(p, tok, err, errlen) < 0) {
            free(copy);
            netpolicy_free(p);
            return NULL;
        }
    }
    free(copy);
    return p;
}

void netpolicy_free(netpolicy *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->nhosts; i++)
        free(p->hosts[i]);
    free(p->hosts);
    free(p->allow);
    free(p->forbidden);
    free(p);
}

/* ---- checks ------------------------------------------------------------ */

int netpolicy_addr_allowed(const netpolicy *p, const struct sockaddr *sa)
{
    ipaddr a;
    memset(&a, 0, sizeof a);
    a.family = sa->sa_family;
    if (sa->sa_family == AF_INET)
        memcpy(a.b, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    else if (sa->sa_family == AF_INET6)
        memcpy(a.b, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    else
        return 0;
    return refusal(p, &a) == NULL;
}

int netpolicy_host_allowlisted(const netpolicy *p, const char *host)
{
    char h[HOST_MAX + 1];
    if (norm_host(host, h) < 0)
        return 0;
    for (size_t i = 0; i < p->nhosts; i++)
        if (strcmp(p->hosts[i], h) == 0)
            return 1;
    return 0;
}

/* host as an IP literal the way curl and getaddrinfo read it: "[v6%zone]",
 * or IPv4 in any inet_aton form (2130706433, 0177.0.0.1, 0x7f.1, 127.1).
 * 1 and *a, or 0 when host is not a literal. */
static int parse_literal(const char *host, ipaddr *a)
{
    char buf[INET6_ADDRSTRLEN + 64];
    size_t n = strlen(host);
    memset(a, 0, sizeof *a);
    if (host[0] == '[') {
        if (n < 3 || host[n - 1] != ']' || n - 2 >= sizeof buf)
            return 0;
        memcpy(buf, host + 1, n - 2);
        buf[n - 2] = '\0';
        buf[strcspn(buf, "%")] = '\0'; /* the zone does not change the address */
        a->family = AF_INET6;
        return inet_pton(AF_INET6, buf, a->b) == 1;
    }
    if (n && host[n - 1] == '.')
        n--;
    if (n == 0 || n >= sizeof buf || strspn(host, "0123456789abcdefABCDEFxX.") < n)
        return 0;
    memcpy(buf, host, n);
    buf[n] = '\0';
    struct in_addr in;
    if (inet_aton(buf, &in) == 0)
        return 0;
    a->family = AF_INET;
    memcpy(a->b, &in, 4);
    return 1;
}

const char *netpolicy_host_refusal(const netpolicy *p, const char *host)
{
    ipaddr a;
    char h[HOST_MAX + 1];
    if (parse_literal(host, &a))
        return refusal(p, &a);
    if (norm_host(host, h) == 0 && is_localhost(h) && !netpolicy_host_allowlisted(p, h))
        return "loopback";
    return NULL;
}

int netpolicy_literal_forbidden(const netpolicy *p, const char *host)
{
    return netpolicy_host_refusal(p, host) != NULL;
}

static int url_host_allowlisted(const netpolicy *p, const char *url)
{
    CURLU *u = curl_url();
    char *host = NULL;
    int ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && netpolicy_host_allowlisted(p, host);
    curl_free(host);
    curl_url_cleanup(u);
    return ok;
}

int netpolicy_connect_allowed(const netpolicy *p, const char *url, const struct sockaddr *sa, char *refused,
                              size_t size)
{
    if (netpolicy_addr_allowed(p, sa) || url_host_allowlisted(p, url))
        return 1;
    const void *bin = sa->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr
                                                : (const void *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    if (!inet_ntop(sa->sa_family, bin, refused, (socklen_t)size))
        snprintf(refused, size, "(family %d)", sa->sa_family);
    return 0;
}
