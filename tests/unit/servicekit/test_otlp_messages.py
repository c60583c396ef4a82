"""The project's OTLP messages (protos/gatehouse/otlp/v1/trace.proto) are OTLP on the wire.

GOLDEN_REQUEST was serialized by opentelemetry-proto 1.45.2's own messages
(deterministic=True) from the request ``_request`` builds, with every field of every
message this project declares set to a non-default value; the same request built with
our messages must give the same bytes, so a wrong field number or type fails here.
"""

from __future__ import annotations

from servicekit.protos.gatehouse.otlp.v1 import trace_pb2 as t

GOLDEN_REQUEST = bytes.fromhex(
    "0a89030a290a250a0c736572766963652e6e616d6512150a1367617465686f7573652d6578742d617574687a100112b2020a1d0a09676174"
    "65686f7573651205302e312e301a070a016b120210012002128d020a10000102030405060708090a0b0c0d0e0f120800010203040506071a"
    "03613d62220808090a0b0c0d0e0f2a0f6578745f617574687a2e636865636b30023901002a36fe9c97174122a13136fe9c97174a080a0173"
    "12030a01764a100a0169120b18d3fcffffffffffffff014a0e0a0164120921000000000000d03f4a090a016212043a0200ff4a0b0a016112"
    "062a040a0218014a110a016c120c320a0a080a017812030a017950035a180907000000000000001201651a080a02656b1202180120016004"
    "6a320a1001010101010101010101010101010101120802020202020202021a0174220a0a026c6b12040a026c762801350100000070057a0a"
    "120664656e69656418028501010100001a01731a2768747470733a2f2f6f70656e74656c656d657472792e696f2f736368656d61732f312e"
    "32362e30"
)
GOLDEN_RESPONSE = bytes.fromhex("0a050803120178")


def _request() -> t.ExportTraceServiceRequest:
    request = t.ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add(schema_url="https://opentelemetry.io/schemas/1.26.0")
    resource_spans.resource.attributes.add(key="service.name", value=t.AnyValue(string_value="gatehouse-ext-authz"))
    resource_spans.resource.dropped_attributes_count = 1
    scope_spans = resource_spans.scope_spans.add(schema_url="s")
    scope_spans.scope.name = "gatehouse"
    scope_spans.scope.version = "0.1.0"
    scope_spans.scope.attributes.add(key="k", value=t.AnyValue(bool_value=True))
    scope_spans.scope.dropped_attributes_count = 2
    span = scope_spans.spans.add(
        trace_id=bytes(range(16)), span_id=bytes(range(8)), trace_state="a=b", parent_span_id=bytes(range(8, 16)),
        flags=0x101, name="ext_authz.check", kind=t.Span.SpanKind.SPAN_KIND_SERVER,
        start_time_unix_nano=1_700_000_000_000_000_001, end_time_unix_nano=1_700_000_000_000_500_002,
        dropped_attributes_count=3, dropped_events_count=4, dropped_links_count=5,
    )
    span.attributes.add(key="s", value=t.AnyValue(string_value="v"))
    span.attributes.add(key="i", value=t.AnyValue(int_value=-429))
    span.attributes.add(key="d", value=t.AnyValue(double_value=0.25))
    span.attributes.add(key="b", value=t.AnyValue(bytes_value=b"\x00\xff"))
    span.attributes.add(key="a", value=t.AnyValue(array_value=t.ArrayValue(values=[t.AnyValue(int_value=1)])))
    span.attributes.add(key="l", value=t.AnyValue(kvlist_value=t.KeyValueList(
        values=[t.KeyValue(key="x", value=t.AnyValue(string_value="y"))])))
    event = span.events.add(time_unix_nano=7, name="e", dropped_attributes_count=1)
    event.attributes.add(key="ek", value=t.AnyValue(int_value=1))
    link = span.links.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, trace_state="t", dropped_attributes_count=1, flags=1)
    link.attributes.add(key="lk", value=t.AnyValue(string_value="lv"))
    span.status.message = "denied"
    span.status.code = t.Status.StatusCode.STATUS_CODE_ERROR
    return request


def test_a_request_encodes_as_opentelemetry_proto_encodes_it() -> None:
    assert _request().SerializeToString(deterministic=True) == GOLDEN_REQUEST


def test_otlp_bytes_parse_into_the_same_fields() -> None:
    assert t.ExportTraceServiceRequest.FromString(GOLDEN_REQUEST) == _request()


def test_the_response_with_partial_success() -> None:
    response = t.ExportTraceServiceResponse(partial_success=t.ExportTracePartialSuccess(rejected_spans=3, error_message="x"))
    assert response.SerializeToString(deterministic=True) == GOLDEN_RESPONSE
    assert t.ExportTraceServiceResponse.FromString(GOLDEN_RESPONSE) == response


def test_the_messages_live_outside_the_opentelemetry_package() -> None:
    """Not OTLP's proto package: xds-protos's 2021 OTLP copy can be loaded beside them."""
    assert t.DESCRIPTOR.package == "gatehouse.otlp.v1"
    from opentelemetry.proto.trace.v1 import trace_pb2 as xds_protos_copy  # from xds-protos

    assert xds_protos_copy.DESCRIPTOR.package == "opentelemetry.proto.trace.v1"
