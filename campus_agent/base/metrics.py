"""Prometheus metrics (docs/design.md#cross-cutting-rules): what the project counts, and the `/metrics` text.

Counted where things happen — a run's end (chat_app.runs.engine), a tool call's end
(agents_app.runtime.tool_runs), a model round (agents_app.runtime.tracing), a moderation model's
verdict (safety_app.model_check) — with
`prometheus_client`, the maintained client. Several workers on one host report one sum: with
`PROMETHEUS_MULTIPROC_DIR` set (before the process starts; an empty directory, emptied when
the service starts, as prometheus_client's multiprocess mode asks) each worker writes its
figures there and a scrape of any worker reads them all. Without it, each process reports its
own (one worker: the same thing).

Figures read at scrape time (breaker states, approvals waiting) are not kept per process: the
apps register a function (`scrape_gauge`) that reads the shared state (cache, database) when
`/metrics` is asked for.

Label values are bounded: agents and tools are the catalog's (a tool the model made up is
`unknown`), outcomes a fixed set.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

RUN_OUTCOMES = ("completed", "interrupted", "stopped", "paused", "fallback")
TOOL_OUTCOMES = ("ok", "failed", "cancelled")

RUNS = Counter("campus_agent_runs", "Runs ended (or paused), by agent and outcome", ["agent", "outcome"])
TOOL_CALLS = Counter("campus_agent_tool_calls", "Tool calls ended, by tool, kind and outcome", ["tool", "kind", "outcome"])
ACTIVE_RUNS = Gauge("campus_agent_active_runs", "Runs running now", multiprocess_mode="livesum")
FIRST_CHUNK = Histogram(
    "campus_agent_first_chunk_seconds", "From a run's start to the first text or reasoning the student sees",
    buckets=(0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60),
)
TOOL_CALL_SECONDS = Histogram(
    "campus_agent_tool_call_seconds", "One tool call, from its start to its result, by tool and kind", ["tool", "kind"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60),
)
MODERATION_MODEL_OUTCOMES = ("pass", "flagged", "failed")
MODERATION_MODEL_VERDICTS = Counter(
    "campus_agent_moderation_model_verdicts", "The moderation model's verdicts, by stage and outcome", ["stage", "outcome"]
)
MODERATION_MODEL_SECONDS = Histogram(
    "campus_agent_moderation_model_seconds", "One moderation model call, from asking to its verdict, by stage", ["stage"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30),
)
LLM_REQUEST = Histogram(
    "campus_agent_llm_request_seconds", "One streamed model request, from asking to its last chunk",
    buckets=(0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120),
)

# name → (help, read): read() gives (labels dict, value) pairs at scrape time.
_scrape_gauges: dict[str, tuple[str, Callable[[], Iterable[tuple[dict, float]]]]] = {}


def scrape_gauge(name: str, help_text: str, read: Callable[[], Iterable[tuple[dict, float]]]) -> None:
    """Registers a gauge read when /metrics is scraped (from state every worker shares)."""
    _scrape_gauges[name] = (help_text, read)


class _ScrapeCollector:
    def collect(self):
        for name, (help_text, read) in _scrape_gauges.items():
            rows = list(read())
            labels = sorted({key for row_labels, _ in rows for key in row_labels})
            family = GaugeMetricFamily(name, help_text, labels=labels)
            for row_labels, value in rows:
                family.add_metric([str(row_labels.get(key, "")) for key in labels], value)
            yield family


def run_counted(*, agent: str, outcome: str) -> None:
    RUNS.labels(agent=agent, outcome=outcome).inc()


def tool_call_counted(*, tool: str, kind: str, outcome: str, seconds: float | None = None) -> None:
    TOOL_CALLS.labels(tool=tool, kind=kind, outcome=outcome).inc()
    if seconds is not None:
        TOOL_CALL_SECONDS.labels(tool=tool, kind=kind).observe(seconds)


def moderation_model_counted(*, stage: str, outcome: str, seconds: float) -> None:
    MODERATION_MODEL_VERDICTS.labels(stage=stage, outcome=outcome).inc()
    MODERATION_MODEL_SECONDS.labels(stage=stage).observe(seconds)


def metrics_text() -> bytes:
    """The Prometheus text of this host (every worker's figures with PROMETHEUS_MULTIPROC_DIR)."""
    if MULTIPROCESS:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        from prometheus_client import REGISTRY as registry
    scrape = CollectorRegistry()
    scrape.register(_ScrapeCollector())
    return generate_latest(registry) + generate_latest(scrape)


def worker_exited(pid: int) -> None:
    """For a process manager's exit hook (gunicorn `child_exit`): its live gauges stop counting."""
    if MULTIPROCESS:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
