"""Benchmark: the CPU a turn spends on its log lines at INFO, the six lines a text turn wrote
before issue 46 against what it writes now (the same calls at DEBUG, and the turn line).

    .venv/bin/python bench/turn_log_cost.py [-n 5000]

The sinks are production's (campus_agent.base.logging: stdout, here /dev/null, and the rotating
file in a temporary folder), the level INFO. Both ways are timed in this process in turns (6
rounds of `-n` turns, alternating which goes first); the medians of the CPU per turn are printed
side by side with their ratio. In a whole turn (bench/stream_overhead.py, 13–20 ms of a worker's
CPU on this machine) the difference is well below that benchmark's noise, hence this one.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

USAGE = {"prompt_tokens": 22, "completion_tokens": 28, "total_tokens": 50}
RUN, CONVERSATION = "62480d00-d1ce-4fec-b7a7-81d57e247076", "68ef19cf-993a-467d-afa1-6575156a2188"


def _steps(log) -> None:
    """The six calls of a text turn (as campus_agent.base.request_id, chat_app.runs.engine,
    agents_app.runtime.providers and .loop make them), through `log` (logger.info before, logger.debug now)."""
    log("→ {} {}", "POST", "/api/v1/chat")
    log("chat turn start user={} conversation={} run={} agent={} history={} message={!r}", 1, CONVERSATION, RUN,
        "xiaozhi", 1, "今天吃啥")
    log("← {} {} status={} cost_ms={:.1f}", "POST", "/api/v1/chat", 200, 17.5)
    log("model attempt answered provider={!r} model={!r} attempt={} cost_ms={:.0f}", "default", "fake-model", 1, 50.0)
    log("turn done agent={} tools={} interrupted={} usage={} cost_ms={:.0f}", "xiaozhi", 1, False, USAGE, 172.0)
    log("run end tools={} interrupted={} chars={} cost_ms={:.0f}", 0, False, 8, 176.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="turns per round and way")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-turn-log-")
    out = sys.stdout
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the stdout sink writes here for the whole run
    from loguru import logger

    from campus_agent.base.logging import logging_configure
    from campus_agent.base.request_id import request_id_set
    from chat_app.runs.turn_log import TurnEnd, turn_end_log

    logging_configure(level="INFO", log_dir=Path(tmp.name))
    request_id_set("0123456789abcdef")
    end = TurnEnd(outcome="ok", reason=None, user=1, agent="xiaozhi", run=RUN, conversation=CONVERSATION, tools=[],
                  tools_failed=[], prompt_tokens=22, completion_tokens=28, provider="default", model="fake-model",
                  first_chunk_ms=63, total_ms=176, admit_ms=14, chars=8, history=1, resumed=False, errors=[],
                  moderation=[], question="今天吃啥")

    def now() -> None:
        _steps(logger.debug)
        turn_end_log(end)

    ways = {"six lines (before)": lambda: _steps(logger.info), "one line (now)": now}
    cpu_us: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(6):
        for name in list(ways)[:: 1 if round_ % 2 == 0 else -1]:
            way = ways[name]
            way()
            started = time.process_time()
            for _ in range(args.n):
                way()
            cpu_us[name].append((time.process_time() - started) / args.n * 1e6)
    sys.stdout = out
    before, after = (statistics.median(cpu_us[name]) for name in ways)
    print(f"log lines of a text turn at INFO, CPU per turn (median of 6 rounds of {args.n}):")
    for name in ways:
        print(f"  {name:<20} {statistics.median(cpu_us[name]):8.1f} µs")
    print(f"  now / before         {after / before:8.2f}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
