"""Stand-in servers the benchmarks start in place of a Gatehouse service, to measure what the
framework costs without our code: each is its own process, ``python -m bench.standins.<name>``.

- ``trivial_authz``: a grpc.aio Authorization servicer that answers OK (``authz``);
- ``trivial_ratelimit``: a grpc.aio RateLimitService that answers OK (``ratelimit``);
- ``authz_servers``: the HTTP and gRPC authorization servers ``authz_transports`` compares.
"""
