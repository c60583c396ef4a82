"""Envoy's ``RateLimitService`` over gRPC (``service.py``), on the shared rate-limit engine
in ``limiter``: policies from the control plane, one ``Limiter``, /metrics."""
