"""The kernel every Gatehouse service is built from.

It holds what more than one service needs and nothing that belongs to one of them:

- config files: the strict ``Model`` base (``model``), durations (``durations``), YAML
  1.2 loading (``yaml_documents``), config-file loading with errors that name file, field
  and reason (``config_file``, ``errors``);
- audit events and their delivery: the event and sink protocol (``audit``), Kafka with an
  fsynced spool (``audit_kafka``, ``spool``, ``kafka``), chosen from config (``audit_output``);
- serving: gRPC health and reflection (``grpc_serving``), the admin HTTP server with
  /healthz, /readyz and /metrics (``admin_http``), logs (``logs``), the event-loop
  watchdog (``loop_watchdog``), child processes (``child_process``);
- API keys as stored, their Redis layout and writer (``api_key_store``: ext_authz reads
  them, the control plane and the CLI write them);
- the Python code generated from ``protos/`` (``protos``).

Layers (checked by tests/unit/test_layers.py), bottom up:

1. ``servicekit`` imports no other Gatehouse package;
2. libraries shared by services (``limiter``, the rate-limit engine) import only the kernel;
3. each service (``control_plane``, ``ext_authz``, ``ratelimit_svc``, ``telemetry``) imports
   the kernel and libraries, never another service;
4. the CLI (``gatehouse``) sits on top and wires services together.
"""
