"""Every gateway feature, in the order of the listener's HTTP filter chain.

Envoy runs request filters top to bottom and response filters bottom to top, so a filter
early in this list sees a request first and a response last (local replies included).
The listener, the route entries and the pipeline loop over this list; the order of the
clusters the features bring follows it too. Why each feature sits where it does:

(Not here: ``backPressure``, Envoy's admission control, runs in each backend cluster's
upstream filter chain, one success-rate history per service port; ``back_pressure``
says why.)
"""

from __future__ import annotations

from control_plane.translator.access_log import AccessLog
from control_plane.translator.api_keys import ApiKeysFeature
from control_plane.translator.breaker_fallback import BreakerReroute
from control_plane.translator.ext_authz import ExtAuthz, PublicRouteLimits
from control_plane.translator.upstream_token import UpstreamTokenCheck
from control_plane.translator.feature import HttpFeature
from control_plane.translator.identity_headers import IdentityHeaders
from control_plane.translator.latency_stamps import AuthStamp, RateLimitStamp
from control_plane.translator.load_shedding import LoadShedding
from control_plane.translator.ratelimit import GlobalRateLimit
from control_plane.translator.request_limits import RequestLimits
from control_plane.translator.response_cache import CacheKey, CacheRequest, CacheUserGuard, ResponseCache
from control_plane.translator.response_headers import ResponseHeaders
from control_plane.translator.route_identity import RouteIdentity
from control_plane.translator.router import Router
from control_plane.translator.shields import AccessList, RouteShield
from control_plane.translator.tls import Hsts
from control_plane.translator.token_age import TokenAge
from control_plane.translator.tracing import Tracing
from control_plane.translator.waiting_room import WaitingRoomFeature
from control_plane.translator.validation import RequestValidation

HTTP_FEATURES: tuple[HttpFeature, ...] = (
    # HSTS first, on a TLS listener: the last filter to see a response, so every local
    # reply (413, 403, 429, 503, 401, ...) carries it too.
    Hsts(),
    # Internal response headers (x-envoy-*, an upstream's server) are removed by the first
    # of the rest: the last to see a response, local replies included.
    ResponseHeaders(),
    # Client-sent identity headers are stripped next, always: before any filter reads them
    # (ext_authz sets them from the token; the global rate limit may key on them).
    IdentityHeaders(),
    # An oversized body is refused (413) before anyone spends work on it.
    RequestLimits(),
    # A route's IP access list (RBAC, 403) and its local rate-limit shield (429), both inert
    # unless the route configures them, then the low-priority concurrency limit (503, only
    # on `low` routes): a flood is cut before the calls out to ext_authz and ratelimit_svc.
    AccessList(),
    RouteShield(),
    # A HALF_OPEN breaker's non-probe, marked by the shield's filter (its probe bucket), is
    # matched again here, to the route's fallback: before every filter that reads the route.
    BreakerReroute(),
    LoadShedding(),
    # Authentication, then the global rate limit, which may key on the identity it set.
    # Over HTTP, the route's name for the check is set just before it (and one call
    # decides the route's limits, so the ratelimit filter is not called for it; a public
    # route's limits too, by default).
    RouteIdentity(),
    ExtAuthz(),
    # Token swap has no filter: it refuses a swap route the check cannot honour.
    UpstreamTokenCheck(),
    # A route's `validate:` rides on that call (its body too, per route); this only
    # refuses a route whose rules could not be delivered.
    RequestValidation(),
    # A public route's limits over HTTP: a second ext_authz filter, off but on that route.
    PublicRouteLimits(),
    # Not a filter: a route's waiting room is decided in those checks; this refuses a
    # room no check would decide, and keeps the ticket header from the upstream.
    WaitingRoomFeature(),
    # Not a filter either: refuses API keys no check would read; keeps the key from the upstream.
    ApiKeysFeature(),
    # Not a filter: a token's maximum age, decided in the HTTP check.
    TokenAge(),
    # With the access log on, the checks' latencies for its event (latency_stamps): one
    # stamp after the ext_authz filters, one after the ratelimit filter.
    AuthStamp(),
    GlobalRateLimit(),
    RateLimitStamp(),
    # The response cache, on only for routes with `cache`: after authentication and the
    # rate limits (a cached answer is still authenticated and counted), and the only
    # filter before the router, as Envoy recommends; just before it, what the cache needs
    # from the route, as request headers, and for varyByUser routes the entry's key (the
    # verified caller, on the host) and the guard that refuses a request without a
    # verified caller (response_cache says why).
    CacheRequest(),
    CacheKey(),
    CacheUserGuard(),
    ResponseCache(),
    # The router ends the chain: it sends the request upstream.
    Router(),
    # Not a filter: the connection manager's access logger. Last, so its cluster comes
    # after the ext_authz and ratelimit ones.
    AccessLog(),
    # Not a filter either: the connection manager's tracer and the collector's cluster.
    Tracing(),
)
