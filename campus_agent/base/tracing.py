"""Optional OpenTelemetry tracing: the switch, the exporter, and the headers of outbound hops.

Off unless the environment names an exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_TRACES_EXPORTER`; settings.TRACING_EXPORTERS).
Off means the project makes no span: every span helper first reads `tracer()`, which is None,
and does nothing else (docs/operations.md, "Tracing": the measured cost). The `mcp` SDK's own
calls into the OpenTelemetry API then reach its no-op default, as they always did.

The spans themselves (a run, a model round, a tool call) are the agent runtime's
(agents_app/runtime/tracing.py); this module knows nothing of agents.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

from opentelemetry import propagate, trace

from campus_agent.base.redaction import personal_numbers_mask
from campus_agent.base.request_id import HEADER, NO_REQUEST_ID, request_id_get

TRACER_NAME = "campus-agent"
DEFAULT_SERVICE_NAME = "campus-agent"
REQUEST_ID_ATTRIBUTE = "campus.request_id"
SUPPORTED_EXPORTERS = ("otlp", "console")
GRPC_NOT_INSTALLED = (
    "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: only the OTLP HTTP exporter (http/protobuf) is installed; "
    "point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318)"
)

_tracer: trace.Tracer | None = None  # None: tracing is off


def tracer() -> trace.Tracer | None:
    """The project's tracer while tracing is on, else None (the one check every span helper makes)."""
    return _tracer


def tracing_exporters(environ: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for; [] means tracing stays off.

    `OTEL_TRACES_EXPORTER` (comma-separated, `none` = off) wins; without it, an OTLP endpoint
    means `otlp`. `OTEL_SDK_DISABLED=true` turns everything off, as in the OpenTelemetry SDK."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if named:
        return [] if named == ["none"] else [name for name in named if name != "none"]
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return ["otlp"] if endpoint and endpoint.strip() else []


def request_id_span_processor():
    """A span processor that puts the running request's id on every span as it starts, also on
    spans the project does not make itself (the `mcp` SDK's client spans)."""
    from opentelemetry.sdk.trace import SpanProcessor

    class RequestIdStamp(SpanProcessor):
        def on_start(self, span, parent_context=None) -> None:
            request_id = request_id_get()
            if request_id != NO_REQUEST_ID:
                span.set_attribute(REQUEST_ID_ATTRIBUTE, request_id)

    return RequestIdStamp()


def _attributes_masked(attributes):
    """The attributes with personal numbers masked in their text (the same mapping when none has one)."""
    if not attributes:
        return attributes
    masked, changed = {}, False
    for key, value in attributes.items():
        if isinstance(value, str):
            clean = personal_numbers_mask(value)
        elif isinstance(value, tuple | list) and any(isinstance(v, str) for v in value):
            clean = tuple(personal_numbers_mask(v) if isinstance(v, str) else v for v in value)
            clean = clean if any(a is not b for a, b in zip(clean, value, strict=True)) else value
        else:
            clean = value
        changed = changed or clean is not value
        masked[key] = clean
    return masked if changed else attributes


def masking_exporter(inner):
    """`inner` (a SpanExporter) behind one that masks mobile and resident ID numbers in every text
    attribute of a span and of its events (an exception's message, a URL's query) before it leaves
    the process (docs/design.md#cross-cutting-rules): whatever made the span (the project, Django's or the `mcp` SDK's
    instrumentation). A span with nothing to mask is passed on as it is."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

    def masked(span: ReadableSpan) -> ReadableSpan:
        attributes = _attributes_masked(span.attributes)
        events = [Event(e.name, _attributes_masked(e.attributes), e.timestamp) for e in span.events]
        if attributes is span.attributes and all(
                new.attributes is old.attributes for new, old in zip(events, span.events, strict=True)):
            return span
        return ReadableSpan(
            name=personal_numbers_mask(span.name), context=span.context, parent=span.parent, resource=span.resource,
            attributes=attributes, events=events, links=span.links, kind=span.kind, status=span.status,
            start_time=span.start_time, end_time=span.end_time, instrumentation_scope=span.instrumentation_scope,
        )

    class Masking(SpanExporter):
        def export(self, spans):
            return inner.export([masked(span) for span in spans])

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return Masking()


def tracing_provider_build(exporters: list[str], environ: Mapping[str, str] = os.environ):
    """A TracerProvider exporting to `exporters` in batches (a background thread per process).

    The OTLP exporter, the sampler (`OTEL_TRACES_SAMPLER`) and the batching (`OTEL_BSP_*`) read
    their standard environment variables themselves. Raises ValueError for an exporter or a
    protocol that is not installed, so a typo fails at start-up instead of tracing nothing."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    unknown = [name for name in exporters if name not in SUPPORTED_EXPORTERS]
    if unknown:
        raise ValueError(f"OTEL_TRACES_EXPORTER: {', '.join(unknown)} not supported (use {', '.join(SUPPORTED_EXPORTERS)})")
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(request_id_span_processor())
    for name in exporters:
        if name == "otlp":
            protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            if protocol and protocol.strip() != "http/protobuf":
                raise ValueError(GRPC_NOT_INSTALLED if "grpc" in protocol else f"OTLP protocol {protocol!r} not supported")
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        else:
            exporter = ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(masking_exporter(exporter)))
    return provider


def tracing_start(provider) -> None:
    """Turns tracing on with `provider`, which also becomes the process's global provider, so
    the `mcp` SDK's own client spans (and its `_meta` traceparent) join the same traces."""
    global _tracer
    if trace.get_tracer_provider() is not provider:
        trace.set_tracer_provider(provider)  # once per process; the API ignores a second one
    _tracer = provider.get_tracer(TRACER_NAME)


def tracing_stop() -> None:
    """Turns the project's spans off again (tests)."""
    global _tracer
    _tracer = None


def trace_headers_add(headers: MutableMapping[str, str], *, request_id: str | None = None) -> MutableMapping[str, str]:
    """Adds what an outbound hop carries for tracing to `headers` and returns it: `X-Request-Id`
    (`request_id`, else the request id of the running turn's context) and, while tracing is on,
    the W3C `traceparent` (and `tracestate`) of the current span, so the callee's spans join the
    turn's trace. For any HTTP client (sub-agents, A2A agents, MCP over HTTP)."""
    request_id = request_id or request_id_get()
    if request_id and request_id != NO_REQUEST_ID:
        headers[HEADER] = request_id
    if _tracer is not None:
        propagate.inject(headers)
    return headers
