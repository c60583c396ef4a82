"""Token swap for legacy upstreams (a route's auth.upstreamToken): signed internal tokens,
RFC 8693 exchange, their config and JWKS serving."""
