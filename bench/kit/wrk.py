"""Running ``wrk`` and reading its result: the command line, the Lua ``done()`` that prints
one JSON line, the Lua that sends a new token per request, and the fields the benchmarks
report from a run."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

WRK_MARK = "WRKJSON "
"""The prefix of the line LUA_DONE prints."""

LUA_DONE = r"""
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '%s{"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"lat_min":%d,"lat_mean":%.1f,"lat_stdev":%.1f,"lat_max":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d}\n',
    "WRKJSON ", summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
"""

TOKENS_LUA = r"""
local next_id = 0
function setup(thread)
  thread:set("thread_id", next_id)
  next_id = next_id + 1
end

function init(args)
  local path, nthreads = args[1], tonumber(args[2])
  requests_list, count, index = {}, 0, 0
  local line_number = 0
  for line in io.lines(path) do
    if line ~= "" then
      if line_number % nthreads == thread_id then
        count = count + 1
        requests_list[count] = wrk.format(nil, nil, {["Authorization"] = "Bearer " .. line})
      end
      line_number = line_number + 1
    end
  end
end

function request()
  index = index + 1
  if index > count then
    wrk.thread:stop()
    return requests_list[count]
  end
  return requests_list[index]
end
"""
"""Dynamic requests: every request carries the next token of this thread's slice of a file
(script arguments: the tokens file, the number of threads), pre-formatted in init(). When
its slice is used up the thread stops, so no token is ever sent twice."""


def write_lua(workdir: Path) -> tuple[Path, Path]:
    """``report.lua`` (LUA_DONE) and ``tokens.lua`` (TOKENS_LUA + LUA_DONE) in ``workdir``."""
    static = workdir / "report.lua"
    static.write_text(LUA_DONE)
    tokens = workdir / "tokens.lua"
    tokens.write_text(TOKENS_LUA + LUA_DONE)
    return static, tokens


def wrk_command(url: str, *, threads: int, connections: int, duration: int, script: Path, headers: tuple[str, ...] = (),
                script_args: tuple[str, ...] = ()) -> list[str]:
    """``wrk -t -c -d --timeout 5s --latency [-H …] -s script url [-- args]``: every benchmark's load."""
    argv = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{duration}s", "--timeout", "5s", "--latency"]
    for header in headers:
        argv += ["-H", header]
    argv += ["-s", str(script), url]
    if script_args:
        argv += ["--", *script_args]
    return argv


_LATENCIES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99.9", "p999"), ("max", "lat_max"), ("mean", "lat_mean"))


def run_wrk(argv: list[str], duration: int, workdir: Path, log_name: str, *, stdev: bool = True) -> dict[str, Any]:
    """Run ``argv`` (a wrk command whose script ends with LUA_DONE), keep its output in
    ``<workdir>/<log_name>.wrk.txt`` and return requests, rps, latency (ms; ``stdev``: with
    the standard deviation), errors and the command (``$WORKDIR`` for ``workdir``)."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 120)
    (workdir / f"{log_name}.wrk.txt").write_text(" ".join(argv) + "\n" + result.stdout + result.stderr)
    line = next((l for l in result.stdout.splitlines() if l.startswith(WRK_MARK)), None)
    if result.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({result.returncode}): {(result.stdout + result.stderr)[-2000:]}")
    raw = json.loads(line[len(WRK_MARK):])
    seconds = raw["duration_us"] / 1e6
    latencies = _LATENCIES + ((("stdev", "lat_stdev"),) if stdev else ())
    return {
        "requests": raw["requests"],
        "duration_s": round(seconds, 3),
        "rps": round(raw["requests"] / seconds, 1),
        "latency_ms": {k: round(raw[src] / 1000, 3) for k, src in latencies},
        "status_errors": raw["status"],
        "socket_errors": {k: raw[k] for k in ("connect", "read", "write", "timeout") if raw[k]},
        "command": " ".join(argv).replace(str(workdir), "$WORKDIR"),
    }


def add_wrk_arguments(parser: argparse.ArgumentParser, *, duration: int, threads: int, connections: int = 32, warmup: int = 2,
                      warmup_help: str = "seconds of unmeasured load before each scenario (0: none; default: %(default)s)") -> None:
    """``--duration``, ``--connections``, ``--threads`` and ``--warmup``: the load every wrk benchmark takes."""
    parser.add_argument("--duration", type=int, default=duration, help="wrk -d: seconds per measured run (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=connections, help="wrk -c (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=threads, help="wrk -t (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=warmup, help=warmup_help)


def check_wrk_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.connections < args.threads:
        parser.error("--connections must be at least --threads")


def wrk_settings(args: argparse.Namespace) -> dict[str, int]:
    """The load part of a report's ``settings``."""
    return {"duration_s": args.duration, "connections": args.connections, "wrk_threads": args.threads, "warmup_s": args.warmup}


def require_wrk() -> None:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")
