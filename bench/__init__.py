"""Gatehouse's benchmarks. Run each one from the repository root as ``python -m bench.<name>``.

``bench/<name>.py`` is one benchmark: it starts what it measures (real Envoy, Redis, Kafka,
the Gatehouse services, through ``tests/harness``), measures a baseline in the same run and
prints one JSON document (``bench.kit.report``) to stdout, progress to stderr.
``bench/kit/`` is what they share; ``bench/standins/`` holds the stand-in servers some of
them start in place of a Gatehouse service; ``bench/results/`` the committed results the
docs cite. ``bench/README.md`` says what each benchmark prints and its current figures.
"""
