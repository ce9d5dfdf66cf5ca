"""What a worker's CPU went to, by kind of work, from py-spy's raw stacks (`--profile file.txt`).

    .venv/bin/python bench/profile_shares.py before.txt after.txt

Each stack (from the callback the event loop or a database thread ran, bench/flamegraph.py's
`stacks`) counts for the first kind below whose marker is in one of its frames; the order
settles the overlaps (the model's stream read inside a turn is the stream, not the turn).
docs/log.md ("4 December 2026 — benchmarks: issue 24 at its close") gives the figures of the burst of 1,000 students.
"""
import argparse
from collections import Counter

from flamegraph import stacks

KINDS = (
    ("start-up imports", ("import_from_string", "_find_and_load")),
    ("uvicorn (HTTP parsing in, writes out)", ("uvicorn/protocols",)),
    # The group commits' functions too (turns_admit, runs_finish, turns_store: chat_app.runs).
    ("admission on the database threads", ("turn_admit", "turns_admit", "turn_begin", "auth_session_get_valid",
                                           "chat_caller_resolve", "user_token_quota_check", "wait_decide", "wait_claim")),
    ("storing (reply, checkpoints, usage)", ("run_finish", "runs_finish", "run_rows_store", "turn_store", "turns_store",
                                             "checkpoint", "usage_turn_add", "runs_heartbeat")),
    ("opening the model request (the SDK, httpx2's send)", ("AsyncCompletions.create", "_base_client.py",
                                                            "model_transport", "_send_single_request")),
    ("reading the model's stream", ("runtime/llm.py", "httpx_sse", "httpcore2", "h11/_connection.py", "h11/_readers.py",
                                    "aiohttp/", "httpx_aiohttp")),
    ("Django's request cycle (handler, middleware, view)", ("django/", "csp/", "stream_handler.py", "middleware.py")),
    ("the event loop's own work", ("base_events.py", "selector_events.py", "selectors.py")),
    ("the run, its relay and frames", ("chat_app/runs", "agents_app/runtime", "campus_agent/base/sse", "chat_app/gateways")),
)


def shares(path: str) -> tuple[Counter, int]:
    kinds, total = Counter(), 0
    for frames, count in stacks(path):
        total += count
        kind = next((name for name, marks in KINDS if any(mark in frame for frame in frames for mark in marks)),
                    "the rest (tasks, garbage collection)")
        kinds[kind] += count
    return kinds, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", nargs="+", help="py-spy raw profiles (bench/stream_overhead.py --profile)")
    args = parser.parse_args()
    for path in args.raw:
        kinds, total = shares(path)
        print(f"{path}: {total} samples")
        for name, count in kinds.most_common():
            print(f"  {100 * count / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
