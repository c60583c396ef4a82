"""What the benchmarks share, one module per job:

- ``run``: the scaffold around a run (progress lines, the work directory, the parts a run
  starts and stops, the ``Bench`` base with its gateways and stand-ins, scenarios, rounds);
- ``report``: the one result schema every benchmark prints;
- ``stats``: percentiles, medians, spreads and ratios;
- ``machine``: where a run ran (revision, machine, versions), the quiet-machine wait and the
  CPU speed probe;
- ``processes``: CPU, context switches and memory of processes, from /proc, and the CPU
  window around a measured run;
- ``profiler``: py-spy on a process and the summary of its stacks;
- ``wrk``: running wrk and reading its result, and the load options;
- ``metrics``: Prometheus samples and counter deltas;
- ``tokens``: the benchmark's issuers, token files and broken tokens;
- ``in_process``: ext_authz's parts built in the benchmark's process, to time a handler alone;
- ``envoy_config``, ``jwt_authn``: hand-written static Envoy configuration;
- ``ratelimit_peer``: envoyproxy/ratelimit as a child process (``ratelimit --peer``);
- ``mixed_commits``: the mixed commits of ``propagation --mixed``.
"""
