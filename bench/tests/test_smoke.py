"""Every benchmark script runs, at a tiny size, and prints its figures (issue 42; docs/testing.md).

No figure is judged: a smoke run holds that a script still starts, drives the code it measures
and reports, so that a change which breaks one (bench/mcp_pool.py read a field its hand-built
McpService lacked) fails the suite instead of the next person who measures. Each script runs as
an operator runs it, in a child with only the environment the test sets (no DATABASE_URL of the
suite: the scripts that need a database make a throw-away SQLite file).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.processes import BASE_DIR, project_env

BENCH = BASE_DIR / "bench"
# py-spy's raw collapsed stacks (`--format raw`), as bench/stream_overhead.py --profile writes them.
RAW_STACKS = """\
<module> (uvicorn:1);run (asyncio/base_events.py:640);Handle._run (asyncio/events.py:80);turn_admit (chat_app/runs/admission.py:40);execute (django/db/backends/utils.py:100) 7
<module> (uvicorn:1);run (asyncio/base_events.py:640);Handle._run (asyncio/events.py:80);llm_stream (agents_app/runtime/llm.py:200) 5
<module> (uvicorn:1);_find_and_load (<frozen importlib._bootstrap>:1);import_from_string (uvicorn/importer.py:10) 3
"""


def _stacks(tmp_path: Path) -> str:
    path = tmp_path / "profile.txt"
    path.write_text(RAW_STACKS, encoding="utf-8")
    return str(path)


# Each script: (its arguments at a tiny size, a line its figures print). A new script needs one.
SMOKE = {
    "audit_volume.py": (lambda tmp: ["--smoke"], r"search by actor and date range: \d+\.\d\d ms median"),
    "catalog_stamp.py": (lambda tmp: ["-n", "20"], r"now / before +\d+\.\d\d"),
    "flamegraph.py": (lambda tmp: [_stacks(tmp), str(tmp / "profile.svg"), "--title", "smoke"], None),
    "knowledge_indexing.py": (
        lambda tmp: ["--pages", "4", "--idle", "0.5", "--rate", "2", "--rounds", "1", "--ways", "worker"],
        r"indexing pages/s +\d+ +\d+ +goal",
    ),
    "knowledge_search.py": (
        lambda tmp: ["-n", "300", "--queries", "20"], r"keyword_search: p50 \d+\.\d\d ms, p99 \d+\.\d\d ms"
    ),
    # Without LiteLLM (no install in the suite): our side against the floor, the same table.
    "litellm_peer.py": (
        lambda tmp: ["--ours-only", "--rounds", "1", "--runs", "1", "--concurrency", "2", "--chunks", "2",
                     "--pace", "0.001"],
        r"^ours +2 +\d+\.\d +-?\d+\.\d .* +\d+\.\d$",
    ),
    "llm_read.py": (
        lambda tmp: ["--chunks", "2", "--pace", "0.001", "--concurrency", "1,2", "--streams", "2", "--rounds", "1"],
        r"^ +2 +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d×$",
    ),
    "llm_request.py": (
        lambda tmp: ["-n", "2", "--messages", "1", "--tools", "1"],
        r"^ +1 +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d×$",
    ),
    "mcp_pool.py": (lambda tmp: ["-n", "1"], r"^ +\d+\.\d\d ms +\d+\.\d\d ms +\d+×$"),
    "moderation.py": (
        lambda tmp: ["--words", "300", "--chunks", "20"], r"check per chunk .*added \d+\.\d+ ms"
    ),
    "openai_overhead.py": (
        lambda tmp: ["--rounds", "1", "--turns", "4", "--chunks", "2", "--pace", "0.001"],
        r"ratio openai / chat: (\d+\.\d\d|n/a)",  # n/a: no 10 ms tick of the CPU clock fell in the round
    ),
    "profile_shares.py": (lambda tmp: [_stacks(tmp)], r"^ +\d+\.\d %  admission on the database threads$"),
    "turn_log_cost.py": (lambda tmp: ["-n", "20"], r"now / before +\d+\.\d\d"),
    "stream_overhead.py": (
        lambda tmp: ["--runs", "2", "--concurrency", "2", "--chunks", "2", "--pace", "0.001", "--hold", "0"],
        r"gateway CPU per stream: \d+\.\d ms sequential",
    ),
    # The word lists side by side (issue 44): a second run of the same script.
    "stream_overhead.py --moderation": (
        lambda tmp: ["--moderation", "off,30", "--runs", "1", "--concurrency", "1", "--chunks", "2", "--pace", "0.001",
                     "--hold", "0", "--saturate", "1"],
        r"CPU per turn words30:embedded / nowords:embedded: \d+\.\d+×",
    ),
    "tracing_overhead.py": (lambda tmp: ["-n", "50"], r"tracing on \d+\.\d\d µs"),
    # Every mark reached (a wrapped function renamed would leave its mark out).
    "turn_timeline.py": (
        lambda tmp: ["--runs", "2", "--chunks", "2", "--pace", "0.001"], r"^marks not reached in every turn: none$",
    ),
}
SCRIPTS = sorted(path.name for path in BENCH.glob("*.py") if not path.name.startswith("_"))
RUNS = sorted(SMOKE)


@pytest.mark.parametrize("run", RUNS)
def test_the_script_runs_at_its_smoke_size_and_prints_its_figures(run, tmp_path):
    arguments, figures = SMOKE[run]
    script = run.split()[0]

    done = subprocess.run(  # noqa: PLW1510 (the return code is asserted)
        [sys.executable, str(BENCH / script), *arguments(tmp_path)],
        cwd=BASE_DIR,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    if figures is None:  # the flame graph: a file, not a print
        assert "(12 samples;" in (tmp_path / "profile.svg").read_text(encoding="utf-8")  # start-up's 3 left out
    else:
        assert re.search(figures, done.stdout, flags=re.MULTILINE), done.stdout + done.stderr


def test_every_script_has_a_smoke_run_and_every_run_a_script():
    assert sorted({run.split()[0] for run in SMOKE}) == SCRIPTS, "a script in bench/ needs its tiny arguments in SMOKE"
