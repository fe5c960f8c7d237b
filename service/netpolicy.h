/* netpolicy.h - the destination policy (SSRF protection): which addresses a
 * timer's URL may reach.
 *
 * By default a timer may call public addresses only: loopback, private,
 * link-local (incl. the 169.254.169.254 metadata service), CGNAT,
 * multicast, reserved and the like are forbidden, in IPv4 and IPv6 (with
 * IPv4-mapped, NAT64 and 6to4 addresses judged by their embedded IPv4), and
 * so are the names "localhost" and "*.localhost". The allowlist
 * (HOOKWHEEL_DESTINATION_ALLOWLIST) opens CIDRs, single addresses and host
 * names again.
 *
 * The policy is checked twice: when a timer is created, against the URL's
 * host if it is an IP literal (any spelling curl accepts) or localhost, so
 * the client gets a 400; and when the dispatcher opens a socket, against
 * the address curl actually connects to, which no DNS trick can change.
 *
 * Created once by main before any thread starts; read-only afterwards, so
 * any thread may use it. */
#ifndef HW_NETPOLICY_H
#define HW_NETPOLICY_H

#include <stddef.h>
#include <sys/socket.h>

typedef struct netpolicy netpolicy; /* opaque */

/* Parses allowlist, a comma-separated list of IPv4/IPv6 CIDRs
 * ("10.0.0.0/8", "::1/128"), plain addresses and host names (NULL or "":
 * nothing allowlisted). Returns the policy (free with netpolicy_free), or
 * NULL with a one-line reason in err. */
netpolicy *netpolicy_create(const char *allowlist, char *err, size_t errlen);

/* Frees p. NULL is a no-op. */
void netpolicy_free(netpolicy *p);

/* 1 when sa (AF_INET or AF_INET6) may be connected to: it is in no
 * forbidden range, or it is inside an allowlisted CIDR; else 0. Other
 * address families are not allowed. */
int netpolicy_addr_allowed(const netpolicy *p, const struct sockaddr *sa);

/* 1 when host (a URL host; case-insensitive, a trailing dot ignored) is
 * allowlisted by name, else 0. */
int netpolicy_host_allowlisted(const netpolicy *p, const char *host);

/* The check at connect time (curl's open-socket callback, for timers and
 * lease probes): 1 when a request to url may connect to sa, because the
 * address is allowed or url's host is allowlisted by name (the operator
 * trusts the name whatever it resolves to; parsed only for a refused
 * address). Else 0, with the address as text in refused[size]. */
int netpolicy_connect_allowed(const netpolicy *p, const char *url, const struct sockaddr *sa, char *refused,
                              size_t size);

/* Why a URL host is refused at creation time, or NULL when it is not: the
 * host is an IP literal (dotted, decimal, octal, hex, short forms, bracketed
 * IPv6 with an optional zone) in a forbidden range and not allowlisted, or
 * localhost / *.localhost not allowlisted by name. The reason is a static
 * string such as "loopback". Host names are not resolved here. */
const char *netpolicy_host_refusal(const netpolicy *p, const char *host);

/* 1 when netpolicy_host_refusal(p, host) gives a reason, else 0. */
int netpolicy_literal_forbidden(const netpolicy *p, const char *host);

#endif
