"""Sample upstream service: answers any request with JSON describing what it received.

Used by the local dev stack and by integration tests to prove where Envoy sent
a request (the `x-upstream` header and the echoed path and headers). It logs
nothing per request because load tests run through it.

    python examples/upstream/echo.py --name order-service --port 18081 [--host 127.0.0.1]

Query parameters, for resilience tests:
    ?status=NNN   answer with that status (200-599)
    ?delay=0.5    sleep that many seconds (at most 60) before answering
    ?reset=1      close the connection without answering (after any delay)
    ?cacheControl=no-store   answer with that Cache-Control header (response cache tests)

and, to turn a whole host bad (outlier detection, health checks):
    POST   /admin/fail[?status=503]   from now on answer everything, /health too, with that status
           [&ratio=0.5]               ... or only that share of requests, spread evenly (every other one)
    DELETE /admin/fail                answer normally again
    GET    /admin/fail                {"failing": <status or null>, "served": <requests answered>}
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys

from aiohttp import web

MAX_DELAY = 60.0
NAME_KEY = web.AppKey("upstream_name", str)
STATE_KEY = web.AppKey("upstream_state", dict[str, int])
"""Per process: "failing" (0 = healthy, else the status failing answers get), "permille"
(the share of requests that fail while failing, in 1/1000), "seen" (requests since) and "served"."""
_NO_BODY_STATUSES = {204, 304}


def _echo_status(request: web.Request) -> int:
    raw = request.query.get("status")
    if raw is None:
        return 200
    try:
        status = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"status must be an integer, got {raw!r}\n") from None
    if not 200 <= status <= 599:
        raise web.HTTPBadRequest(text=f"status must be 200-599, got {status}\n")
    return status


def _echo_delay(request: web.Request) -> float:
    raw = request.query.get("delay")
    if raw is None:
        return 0.0
    try:
        delay = float(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"delay must be a number, got {raw!r}\n") from None
    if not 0.0 <= delay <= MAX_DELAY:
        raise web.HTTPBadRequest(text=f"delay must be 0-{MAX_DELAY}, got {delay}\n")
    return delay


def _fails_now(state: dict[str, int]) -> bool:
    """With a ratio, the n-th request fails when n × ratio crosses a whole number."""
    state["seen"] += 1
    seen, permille = state["seen"], state["permille"]
    return (seen * permille) // 1000 > ((seen - 1) * permille) // 1000


def _fail_ratio(request: web.Request) -> int:
    raw = request.query.get("ratio", "1")
    try:
        ratio = float(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"ratio must be a number, got {raw!r}\n") from None
    if not 0.0 < ratio <= 1.0:
        raise web.HTTPBadRequest(text=f"ratio must be above 0 and at most 1, got {ratio}\n")
    return round(ratio * 1000)


async def echo(request: web.Request) -> web.StreamResponse:
    """Describe the request: upstream name, method, raw path with query, headers, and a
    body's length and sha256 when it has one."""
    name = request.app[NAME_KEY]
    state = request.app[STATE_KEY]
    state["served"] += 1
    if state["failing"] and _fails_now(state):
        return web.json_response(
            {"upstream": name, "failing": True}, status=state["failing"], headers={"x-upstream": name}
        )
    if request.method == "GET" and request.path == "/health":
        return web.Response(text="ok", headers={"x-upstream": name})
    status = _echo_status(request)
    delay = _echo_delay(request)
    if delay:
        await asyncio.sleep(delay)
    if request.query.get("reset") == "1" and request.transport is not None:
        request.transport.abort()  # the peer sees the connection drop before any response
        raise asyncio.CancelledError
    headers: dict[str, str] = {}
    for key, value in request.headers.items():
        lowered = key.lower()
        headers[lowered] = f"{headers[lowered]}, {value}" if lowered in headers else value
    response_headers = {"x-upstream": name}
    cache_control = request.query.get("cacheControl")
    if cache_control is not None:
        response_headers["cache-control"] = cache_control
    if status in _NO_BODY_STATUSES:
        return web.Response(status=status, headers=response_headers)
    body = {
        "upstream": name,
        "method": request.method,
        "path": request.raw_path,
        "headers": headers,
    }
    if request.can_read_body:
        # What arrived, without echoing it: a test compares it with what the client sent.
        received = await request.read()
        body["bodyBytes"] = len(received)
        body["bodySha256"] = hashlib.sha256(received).hexdigest()
    return web.json_response(body, status=status, headers=response_headers)


async def admin_fail(request: web.Request) -> web.StreamResponse:
    """Turn this whole process into a failing host, or back, and report what it served."""
    state = request.app[STATE_KEY]
    if request.method == "POST":
        status = _echo_status(request) if "status" in request.query else 503
        if status < 500:
            raise web.HTTPBadRequest(text=f"a failing host answers 5xx, got {status}\n")
        state["permille"] = _fail_ratio(request)
        state["seen"] = 0
        state["failing"] = status
    elif request.method == "DELETE":
        state["failing"] = 0
    return web.json_response({"failing": state["failing"] or None, "served": state["served"]})


def build_app(name: str) -> web.Application:
    app = web.Application()
    app[NAME_KEY] = name
    app[STATE_KEY] = {"failing": 0, "served": 0, "permille": 1000, "seen": 0}
    app.router.add_route("GET", "/admin/fail", admin_fail)
    app.router.add_route("POST", "/admin/fail", admin_fail)
    app.router.add_route("DELETE", "/admin/fail", admin_fail)
    # (?s): a path with an escaped line break (%0A) is echoed too, not a 404 of the router.
    app.router.add_route("*", "/{tail:(?s:.*)}", echo)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--name", required=True, help="service name, echoed as x-upstream")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    print(f"echo upstream {args.name} listening on {args.host}:{args.port}", file=sys.stderr, flush=True)
    # run_app turns SIGTERM/SIGINT into a graceful shutdown; keep it short so
    # that stopping a service with open keep-alive connections is quick.
    web.run_app(
        build_app(args.name),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        shutdown_timeout=2.0,
    )


if __name__ == "__main__":
    main()
