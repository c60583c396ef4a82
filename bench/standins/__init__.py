"""Stand-in servers the benchmarks start in place of a Gatehouse service, to measure what the
framework costs without our code: each is its own process, ``python -m bench.standins.<name>``
(``bench.kit.run.Bench.start_standin`` starts one).

- ``trivial``: grpc.aio Authorization and RateLimitService servicers that answer OK
  (``authz``, ``ratelimit``);
- ``authz_servers``: the HTTP and gRPC authorization servers ``authz_transports`` compares.
"""
