"""What the benchmarks share, one module per job:

- ``run``: the scaffold around a run (progress lines, the work directory, the parts a run
  starts and stops, scenarios, rounds);
- ``report``: the one result schema every benchmark prints;
- ``stats``: percentiles, medians, spreads and ratios;
- ``machine``: where a run ran (revision, machine, versions), the quiet-machine wait and the
  CPU speed probe;
- ``processes``: CPU, context switches and memory of processes, from /proc;
- ``profiler``: py-spy on a process and the summary of its stacks;
- ``wrk``: running wrk and reading its result;
- ``metrics``: Prometheus samples and counter deltas;
- ``tokens``: the benchmark's issuers, token files and broken tokens;
- ``envoy_config``, ``jwt_authn``: hand-written static Envoy configuration;
- ``ratelimit_peer``: envoyproxy/ratelimit as a child process (``ratelimit --peer``);
- ``mixed_commits``: the mixed commits of ``propagation --mixed``.
"""
