"""Back pressure: Envoy's admission control as an upstream filter on the route's clusters.

Envoy's admission control filter (client-side throttling by success rate) has no per-route
configuration, and one instance keeps one success-rate history (per worker) for every
request it sees. In the listener's chain, every route with ``backPressure`` would share
one history and one set of parameters: a failing service would throttle the routes of a
healthy one. So the filter runs in the cluster's *upstream* HTTP filter chain instead
(``HttpProtocolOptions.http_filters``): one instance, one history and one parameter set
per backend service port, which is what back pressure is about (an upstream that answers
429/503). Routes to the same service port must agree on ``backPressure`` (``clusters``);
changing it is a CDS update, never a listener change.

In the upstream chain the filter sees each attempt: a retry is one more request, counted
and throttled like the first. A refused attempt ends the request at once with a local
reply (details ``denied_by_admission_control``, no response flag; it is not retried),
which ``local_replies`` turns into the JSON 503 ``back_pressure``. Resets and timeouts
count as failures (the filter records a failure for an attempt that gets no response).
The runtime key ``gatehouse.back_pressure.enabled`` (default on) switches every
cluster's throttling off at once, an operator's escape hatch.
"""

from __future__ import annotations

from typing import Any

from control_plane.model.back_pressure import BackPressure
from servicekit.durations import format_duration_ms

ADMISSION_CONTROL_FILTER = "envoy.filters.http.admission_control"
ADMISSION_CONTROL_TYPE = "type.googleapis.com/envoy.extensions.filters.http.admission_control.v3.AdmissionControl"
UPSTREAM_CODEC_FILTER = "envoy.filters.http.upstream_codec"
UPSTREAM_CODEC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"
ENABLED_RUNTIME_KEY = "gatehouse.back_pressure.enabled"
REJECTED_DETAILS = "denied_by_admission_control"
"""Envoy's response code details on a refused request (matched by ``local_replies``)."""


def failing_statuses(fail_on: list[str]) -> set[int]:
    statuses: set[int] = set()
    for item in fail_on:
        statuses |= set(range(500, 600)) if item == "5xx" else {int(item)}
    return statuses


def success_ranges(fail_on: list[str]) -> list[dict[str, int]]:
    """Envoy's success criteria are half-open status ranges [start, end): the complement,
    within 100-599, of the statuses ``failOn`` names."""
    failing = failing_statuses(fail_on)
    ranges: list[dict[str, int]] = []
    start: int | None = None
    for status in range(100, 601):
        ok = status < 600 and status not in failing
        if ok and start is None:
            start = status
        elif not ok and start is not None:
            ranges.append({"start": start, "end": status})
            start = None
    return ranges


def admission_control_filter(back_pressure: BackPressure) -> dict[str, Any]:
    return {
        "name": ADMISSION_CONTROL_FILTER,
        "typed_config": {
            "@type": ADMISSION_CONTROL_TYPE,
            "enabled": {"default_value": True, "runtime_key": ENABLED_RUNTIME_KEY},
            "success_criteria": {"http_criteria": {"http_success_status": success_ranges(back_pressure.fail_on)}},
            "sampling_window": format_duration_ms(back_pressure.window),
            "aggression": {"default_value": back_pressure.aggression},
            "sr_threshold": {
                "default_value": {"value": float(back_pressure.success_rate_threshold)}
            },
            "rps_threshold": {"default_value": back_pressure.min_requests_per_second},
            "max_rejection_probability": {
                "default_value": {"value": float(back_pressure.max_rejection_probability)}
            },
        },
    }


def upstream_http_filters(back_pressure: BackPressure) -> list[dict[str, Any]]:
    """The cluster's upstream filter chain: admission control, then the codec that ends it."""
    return [
        admission_control_filter(back_pressure),
        {"name": UPSTREAM_CODEC_FILTER, "typed_config": {"@type": UPSTREAM_CODEC_TYPE}},
    ]
