"""Route breakers (``circuitBreaker.errorRate``): their state, kept by the control plane
and pushed to every Envoy as route changes, so no Python sits on the request path."""
