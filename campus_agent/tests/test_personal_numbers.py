"""Issue 25 point 4 (docs/design.md#cross-cutting-rules Logging): mainland mobile numbers and resident ID numbers are
masked in every log line, whoever logs them, and in trace attributes. A real turn whose
question carries both is chat_app/tests/gateways/test_stream_privacy.py."""
import logging

import pytest
from django.conf import settings
from loguru import logger

from campus_agent.base.redaction import personal_numbers_mask

MOBILE, MOBILE_MASKED = "13812345678", "138****5678"
RESIDENT_ID, RESIDENT_ID_MASKED = "11010519491231002X", "110105********002X"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"手机{MOBILE}，身份证{RESIDENT_ID}。", f"手机{MOBILE_MASKED}，身份证{RESIDENT_ID_MASKED}。"),
        ("+86 138-1234-5678", "+86 138****5678"),
        ("8613812345678", "86138****5678"),
        ("138 1234 5678", "138****5678"),
        ("110105194912310021", "110105********0021"),
        ("11010519491231002x", "110105********002x"),
    ],
)
def test_numbers_are_masked(text, masked):
    assert personal_numbers_mask(text) == masked


@pytest.mark.parametrize(
    "text",
    ["订单 2023013812345678901", "138123456789", "12812345678", "a13812345678", "110105194913310021",
     "sha 3f8a13812345678b", "今天 2026-12-01 12:00", ""],
)
def test_other_numbers_are_left_alone(text):
    assert personal_numbers_mask(text) is text


def _log_tail(start: int) -> str:
    with open(settings.LOG_DIR / "campus_agent.log", encoding="utf-8") as log:
        log.seek(start)
        return log.read()


def _log_size() -> int:
    path = settings.LOG_DIR / "campus_agent.log"
    return path.stat().st_size if path.exists() else 0


def test_every_logger_masks_them_in_the_project_log():
    start = _log_size()
    logger.info("user said {}", f"我的电话是 {MOBILE}")
    logging.getLogger("django").warning("bridged: id %s", RESIDENT_ID)
    logger.bind(who=MOBILE).info("extra field")
    try:
        raise ValueError(f"upstream echoed {MOBILE}")
    except ValueError:
        logger.exception("failed")
    logged = _log_tail(start)
    assert MOBILE not in logged and RESIDENT_ID not in logged
    assert logged.count(MOBILE_MASKED) >= 2 and RESIDENT_ID_MASKED in logged


def test_exported_spans_carry_them_masked():
    """Whatever made the span (an instrumentation's URL, an exception's message): the exporter
    behind campus_agent.base.tracing.masking_exporter gets them masked."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from campus_agent.base.tracing import masking_exporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(masking_exporter(memory)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("GET /api/v1/conversations") as span:
        span.set_attribute("http.target", f"/api/v1/conversations?q={MOBILE}")
        span.set_attribute("campus.tags", ["a", RESIDENT_ID])
        span.set_attribute("campus.round", 1)
        span.record_exception(ValueError(f"echoed {RESIDENT_ID}"))
    with tracer.start_as_current_span("plain") as span:
        span.set_attribute("campus.round", 2)
    masked, plain = memory.get_finished_spans()
    assert masked.attributes["http.target"] == f"/api/v1/conversations?q={MOBILE_MASKED}"
    assert masked.attributes["campus.tags"] == ("a", RESIDENT_ID_MASKED) and masked.attributes["campus.round"] == 1
    assert masked.events[0].attributes["exception.message"] == f"echoed {RESIDENT_ID_MASKED}"
    assert MOBILE not in repr(masked.to_json()) and RESIDENT_ID not in masked.to_json()
    assert plain.attributes["campus.round"] == 2
