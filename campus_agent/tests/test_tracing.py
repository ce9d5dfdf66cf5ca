"""The tracing switch (campus_agent/base/tracing.py): which environment turns it on, the OTLP HTTP
exporter sending to a collector on loopback, and the headers of outbound hops."""
import threading

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from campus_agent.apps import CampusAgentConfig
from campus_agent.base.request_id import request_id_set
from campus_agent.base.tracing import GRPC_NOT_INSTALLED, trace_headers_add, tracing_exporters, tracing_provider_build
from testkit.servers import ThreadedAsgiServer


@pytest.mark.parametrize(("environ", "exporters"), [
    ({}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": " OTLP , console "}, ["otlp", "console"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, []),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, []),
])
def test_tracing_is_off_unless_an_exporter_is_named(environ, exporters):
    assert tracing_exporters(environ) == exporters


@pytest.mark.parametrize(("exporters", "environ", "message"), [
    (["jaeger"], {}, "jaeger not supported"),
    (["otlp"], {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, GRPC_NOT_INSTALLED),
])
def test_an_exporter_that_is_not_installed_fails_at_start(exporters, environ, message):
    with pytest.raises(ValueError) as failed:
        tracing_provider_build(exporters, environ)
    assert message in str(failed.value)


def test_start_up_with_an_unknown_exporter_is_a_configuration_error(settings):
    from django.apps import apps
    from django.core.exceptions import ImproperlyConfigured

    settings.TRACING_EXPORTERS = ["jaeger"]
    config = CampusAgentConfig("campus_agent", apps.get_app_config("campus_agent").module)
    with pytest.raises(ImproperlyConfigured, match="tracing: OTEL_TRACES_EXPORTER: jaeger not supported"):
        config.ready()


class _Collector:
    """An OTLP/HTTP trace receiver on loopback: keeps each request's body."""

    def __init__(self):
        self.bodies: list[bytes] = []
        self.received = threading.Event()
        self.app = Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])])

    async def _traces(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        self.received.set()
        return Response(b"", media_type="application/x-protobuf")


def test_otlp_exporter_sends_spans_to_the_collector(monkeypatch):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    collector = _Collector()
    with ThreadedAsgiServer(collector.app) as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
        provider = tracing_provider_build(tracing_exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": server.url}))
        try:
            with provider.get_tracer("test").start_as_current_span("invoke_agent 校园小智"):
                pass
            assert provider.force_flush(10_000)
            assert collector.received.wait(10)
        finally:
            provider.shutdown()
    request = ExportTraceServiceRequest.FromString(collector.bodies[0])
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    assert service == "campus-agent"
    assert [s.name for s in resource_spans.scope_spans[0].spans] == ["invoke_agent 校园小智"]


def test_trace_headers_carry_the_request_id_and_no_traceparent_while_off():
    assert trace_headers_add({}, request_id="abc12345") == {"X-Request-Id": "abc12345"}
    request_id_set("fedcba9876543210")
    assert trace_headers_add({"Accept": "text/event-stream"}) == {
        "Accept": "text/event-stream", "X-Request-Id": "fedcba9876543210",
    }
    request_id_set("-")  # outside a request: nothing to send
    assert trace_headers_add({}) == {}


def test_trace_headers_carry_the_current_span_while_on(spans):
    from campus_agent.base.tracing import tracer

    with tracer().start_as_current_span("execute_tool call_canteen") as span:
        headers = trace_headers_add({}, request_id="abc12345")
    context = span.get_span_context()
    assert headers == {
        "X-Request-Id": "abc12345",
        "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}",
    }
