"""Benchmark: what the chat gateway adds over calling the model directly, and how many slow
streams one gateway worker holds.

    .venv/bin/python bench/stream_overhead.py                 # modest defaults, about a minute
    .venv/bin/python bench/stream_overhead.py --hold 1000     # the 1,000-stream goal
    .venv/bin/python bench/stream_overhead.py --backends embedded,redis --hold 0 --saturate 15
        # runs (issue #10): the embedded backend (one worker) against Redis with two workers
        # (clients alternate between them), side by side in one run; with --saturate, turns per
        # second at saturation and server CPU per turn for one and two workers (issue #11)
    .venv/bin/python bench/stream_overhead.py --backends embedded,redis --trees before=/tmp/base,after=. \
        --database-url postgres://postgres@127.0.0.1:5432/campus_bench --gc-log
        # the same from two source trees (e.g. `git archive` of the commit before a change), on a
        # throw-away PostgreSQL database, with the worker's garbage collections timed
    .venv/bin/python bench/stream_overhead.py --moderation off,100000 --hold 0 --saturate 20
        # issue 44: no word list beside a list of 100,000 words (question and streamed answer
        # checked): server CPU per turn side by side
    .venv/bin/python bench/stream_overhead.py --burst 1000 --backends embedded,redis
        # issue 24: 1,000 streams opened in the same instant against a slow model, the direct
        # floor beside one worker and two (Redis): first chunk p50/p99/max, how many were open
        # together, RSS and CPU per stream
    BENCH_GATEWAY_CPUS=2-3 taskset -c 0,1 .venv/bin/python bench/stream_overhead.py --backends embedded,redis …
        # a machine with ≥ 4 cores: the workers on cores 2-3, the model and the clients on 0-1

Three processes, so the client's own work does not share a GIL with what it measures:

- the scripted model (testkit.model.fake_llm) paced at --pace seconds per chunk;
- one gateway worker (uvicorn, campus_agent.asgi) against a throw-away SQLite file;
- this script: the clients.

"direct" is the openai SDK streaming from the fake model; "gateway" is POST /api/v1/chat with a
JWT, read as SSE. Time to first chunk (TTFC) and total time are measured at 1 stream (sequential
runs) and at --concurrency streams at once; "added" is gateway minus direct at the same
percentile. Then --hold streams are opened against a very slow model and kept open; the gateway
process's RSS before and while holding them gives the memory per stream.

Goals (issue #4): added TTFC p50 ≤ 5 ms and p99 ≤ 15 ms at 1 stream, p99 ≤ 50 ms at 64;
≥ 1,000 streams per worker.
"""
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench._django_setup, when run as a script
PY = sys.executable
# Issue 11's TTFC goals and issue 24's: the end of the answer (`done`) at most 10 ms after the
# floor's at one stream, the first chunk of N at once at most 3× the floor's.
GOALS = {"ttfc_p50_1": 5.0, "ttfc_p99_1": 15.0, "ttfc_p99_n": 50.0, "hold": 1000, "total_p50_1": 10.0,
         "ttfc_ratio_n": 3.0}


# --- the processes ----------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_llm(port: int, pace: float, chunks: int) -> None:
    """Child process: the fake model answering every request with `chunks` paced chunks."""
    sys.path.insert(0, str(ROOT))
    import uvicorn

    from testkit.model.fake_llm import FakeLlm, Reply

    llm = FakeLlm()
    text = "".join(f"第{i}段。" for i in range(chunks))
    llm.responder = lambda request: Reply(text=text, chunk_size=len(text) // chunks, chunk_delay=pace)
    uvicorn.run(llm.app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                limit_concurrency=None, backlog=4096)


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def _cpu_sec(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(kid) for kid in children.read_text().split()] if children.exists() else []


def _process_tree(pid: int) -> list[int]:
    return [pid, *(descendant for kid in _children(pid) for descendant in _process_tree(kid))]


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Stack:
    """Starts the fake model and one gateway worker; prepares the database and a JWT."""

    def __init__(self, *, pace: float, chunks: int, redis_url: str = "", workers: int = 1,
                 extra_env: dict | None = None, database_url: str = "", profile: str = "", root: Path = ROOT,
                 server_args: tuple[str, ...] = (), users: int = 1):
        self.root = root
        self.users = users  # students with a JWT each (--burst-users); the streams take them in turn
        self.server_args = server_args  # uvicorn options of the gateway workers (--servers)
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-stream-")
        # A PostgreSQL URL names a throw-away database: it is dropped and made again here.
        self.database_url = database_url or f"sqlite:///{self.tmp.name}/bench.sqlite3"
        # py-spy output path for the (first) gateway worker: raw collapsed stacks, or an SVG
        # flame graph when the path ends in .svg.
        self.profile = profile
        self.llm_port = _free_port()
        self.gw_ports = [_free_port() for _ in range(workers)]
        self.gw_port = self.gw_ports[0]
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "campus_agent.settings",
            "DATABASE_URL": self.database_url,
            "LOG_DIR": f"{self.tmp.name}/logs",
            "LLM_BASE_URL": f"http://127.0.0.1:{self.llm_port}/v1",
            "LLM_API_KEY": "sk-bench",
            "LLM_MODEL": "fake-model",
            "CHAT_MAX_CONCURRENT_STREAMS": "100000",
            "CHAT_RATE_PER_MINUTE": "1000000",
            "TURN_BUDGET_SEC": "600",
            "KEYWORD_FALLBACK_ENABLED": "false",
            "REDIS_URL": redis_url,
            **(extra_env or {}),
        }
        self.procs: list[subprocess.Popen] = []
        self.pace, self.chunks = pace, chunks

    def _database_fresh(self) -> None:
        if self.database_url.startswith("sqlite:///"):  # the cached migrated file (bench/_django_setup.py)
            from bench._django_setup import sqlite_migrated

            sqlite_migrated(self.database_url.removeprefix("sqlite:///"), root=self.root)
            return
        import psycopg

        base, _, name = self.database_url.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')

    def _gateway_cmd(self, port: int, first: bool) -> list[str]:
        launched = self.env.get("BENCH_TRACEMALLOC") or self.env.get("BENCH_GC_LOG") or self.env.get("BENCH_TIMELINE")
        if self.server_args[:1] == ("granian",):  # --servers 'g=granian --loop asyncio': granian, not uvicorn
            cmd = [PY, "-m", "granian", "--interface", "asginl", "campus_agent.asgi:application",
                   "--host", "127.0.0.1", "--port", str(port), "--no-ws", "--log-level", "warning",
                   "--backlog", "4096", *self.server_args[1:]]
        else:
            launcher = [PY, "-c", _LAUNCHER] if launched and first else [PY, "-m", "uvicorn"]
            cmd = [*launcher, "campus_agent.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                   "--lifespan", "off", "--no-access-log", "--log-level", "warning", "--backlog", "4096",
                   *self.server_args]
        if os.environ.get("BENCH_GATEWAY_CPUS"):  # e.g. "2-3": the workers on cores of their own
            cmd = ["taskset", "-c", os.environ["BENCH_GATEWAY_CPUS"], *cmd]
        if self.profile and first:
            fmt = "flamegraph" if self.profile.endswith(".svg") else "raw"
            spy = str(Path(PY).parent / "py-spy")
            cmd = [spy, "record", "--gil", "--rate", "250", "--format", fmt, "-o", self.profile, "--", *cmd]
        return cmd

    def start(self) -> "Stack":
        self._database_fresh()
        if self.env["REDIS_URL"]:  # no slot leases or run logs left by an earlier run
            import redis

            redis.Redis.from_url(self.env["REDIS_URL"]).flushdb()
        seeded = subprocess.run(  # migrates (what a copied file lacks), then seeds: one Django start-up
            [PY, "manage.py", "shell", "-c", _SEED], cwd=self.root, env={**self.env, "BENCH_USERS": str(self.users)},
            check=True, stdout=subprocess.PIPE, text=True,  # a failure's traceback on stderr, shown
        ).stdout.strip().splitlines()
        self.tokens = [line for line in seeded if line.startswith("eyJ") and line.count(".") == 2]  # not the logs
        assert len(self.tokens) == self.users, seeded[-3:]
        self.token = self.tokens[0]
        self.procs.append(subprocess.Popen(
            [PY, __file__, "--serve-llm", str(self.llm_port), "--pace", str(self.pace), "--chunks", str(self.chunks)],
            cwd=ROOT, env=self.env,
        ))
        log = os.environ.get("BENCH_GATEWAY_LOG")  # --gateway-log: the workers' own log lines, for a failure's cause
        self.gateways = [
            subprocess.Popen(self._gateway_cmd(port, i == 0), cwd=self.root, env=self.env,
                             stdout=open(log, "ab") if log else subprocess.DEVNULL)  # noqa: SIM115 - the child's
            for i, port in enumerate(self.gw_ports)
        ]
        self.gateway = self.gateways[0]
        self.procs.extend(self.gateways)
        _wait_port(self.llm_port)
        for port in self.gw_ports:
            _wait_port(port, timeout=180 if self.env.get("BENCH_TRACEMALLOC") else 30)
        return self

    def gateway_pids(self) -> list[int]:
        """The gateway servers' processes, each with its children (granian's worker is its
        child); under py-spy the profiled server is py-spy's child and py-spy is not counted."""
        pids = []
        for proc in self.gateways:
            kids = _children(proc.pid) if self.profile else []
            pids.extend(_process_tree(kids[0] if kids else proc.pid))
        return pids

    def cpu_sec(self) -> float:
        return sum(_cpu_sec(pid) for pid in self.gateway_pids())

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(2 if self.profile and proc in self.gateways else 15)  # py-spy writes on SIGINT
        for proc in self.procs:
            try:
                proc.wait(timeout=60 if self.profile else 10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.tmp.cleanup()


# The worker under a launcher (--tracemalloc, --gc-log, bench/turn_timeline.py): BENCH_TRACEMALLOC=dir
# traces allocations and writes a snapshot to the next numbered file on SIGUSR1; BENCH_GC_LOG=path
# times every garbage collection and on SIGUSR2 writes those so far (generation, ms) as JSON, then
# forgets them; BENCH_TIMELINE=path notes where each turn's time goes (bench/_timeline.py).
_LAUNCHER = """
import json, os, signal, sys, time, gc
if os.environ.get("BENCH_TRACEMALLOC"):
    import tracemalloc
    tracemalloc.start(8)
    taken = []
    def snapshot(signum, frame):
        gc.collect()  # what is held, not the cyclic garbage a collection has not reached yet
        path = f"{os.environ['BENCH_TRACEMALLOC']}/snapshot-{len(taken)}.pickle"
        tracemalloc.take_snapshot().dump(path)
        taken.append(path)
    signal.signal(signal.SIGUSR1, snapshot)
if os.environ.get("BENCH_GC_LOG"):
    pauses, started = [], [0.0]
    def timed(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], (time.perf_counter() - started[0]) * 1000))
    gc.callbacks.append(timed)
    def write(signum, frame):
        with open(os.environ["BENCH_GC_LOG"] + ".part", "w") as out:
            json.dump(pauses, out)
        os.rename(os.environ["BENCH_GC_LOG"] + ".part", os.environ["BENCH_GC_LOG"])
        pauses.clear()
    signal.signal(signal.SIGUSR2, write)
if os.environ.get("BENCH_TIMELINE"):
    import bench._timeline
sys.argv = ["uvicorn", *sys.argv[1:]]
from uvicorn.main import main
main()
"""


_SEED = """
import os
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from agents_app.models import Agent
try:
    from chat_app.accounts.sessions import auth_session_create
except ImportError:  # a tree from before chat_app's rooms (--trees)
    from chat_app.services.auth import auth_session_create
Agent.objects.get_or_create(slug="bench", defaults={"name": "bench", "is_default": True, "system_prompt": "bench"})
for i in range(int(os.environ.get("BENCH_USERS", "1"))):
    user, _ = get_user_model().objects.get_or_create(username="bench" if i == 0 else f"bench-{i}")
    print(auth_session_create(user=user, via="password", roles=["student"]).access_token)
if int(os.environ.get("BENCH_MODERATION_WORDS") or 0):  # --moderation: a mask list read by every stage
    from bench.moderation import word_list
    from safety_app.models import ListWord, WordList
    listed = WordList.objects.create(name="bench", category="bench", action="mask")
    ListWord.objects.bulk_create([ListWord(word_list=listed, word=w)
                                  for w in word_list(int(os.environ["BENCH_MODERATION_WORDS"]))], batch_size=5000)
"""


# --- the clients ------------------------------------------------------------------------------
def direct_create(client, question: str):
    """The floor's request: what the gateway asks the model for, usage included (the gateway
    needs it for the daily token quota, as any client that counts tokens does), so that both
    read the same stream; the scripted model paces every chunk, the usage chunk too."""
    return client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": question}], stream=True, max_tokens=256,
        stream_options={"include_usage": True},
    )


async def direct_stream(client, question: str) -> tuple[float, float]:
    started = time.perf_counter()
    first = None
    stream = await direct_create(client, question)
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
    end = time.perf_counter()
    return (first - started) * 1000, (end - started) * 1000


async def gateway_stream(http, token: str, question: str, *, on_first=None) -> tuple[float, float]:
    started = time.perf_counter()
    first = None
    buffer = ""
    async with http.stream("POST", "/api/v1/chat", json={"message": question},
                           headers={"Authorization": f"Bearer {token}"}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for text in response.aiter_text():
            buffer += text
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                if "data: " not in block:  # `: ping`; frames after `session` start with their `id:` line
                    continue
                frame = json.loads(block.partition("data: ")[2])
                if frame["type"] == "chunk" and first is None:
                    first = time.perf_counter()
                    if on_first:
                        on_first()
                elif frame["type"] == "error":
                    raise RuntimeError(f"error frame: {frame}")
                elif frame["type"] == "done":
                    end = time.perf_counter()
                    return (first - started) * 1000, (end - started) * 1000
    raise RuntimeError("stream ended without done")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


async def measure(stack: Stack, *, runs: int, concurrency: int) -> dict:
    import httpx
    import openai

    direct_client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{stack.llm_port}/v1", api_key="sk", max_retries=0,
                                       http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=60))
    gws = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60,
                             limits=httpx.Limits(max_connections=None, max_keepalive_connections=concurrency))
           for port in stack.gw_ports]
    results = {}
    try:
        for _ in range(3):  # warm-up, every worker: connection pools, code paths, database pages
            await direct_stream(direct_client, "热身")
            for client in gws:
                await gateway_stream(client, stack.token, "热身")
        for label, width, total_runs in (("1", 1, runs), (str(concurrency), concurrency, concurrency * 2)):
            for mode in ("direct", "gateway"):
                samples: list[tuple[float, float]] = []
                semaphore = asyncio.Semaphore(width)

                async def one(i: int, mode=mode, samples=samples, semaphore=semaphore):
                    async with semaphore:
                        if mode == "direct":
                            samples.append(await direct_stream(direct_client, f"问题{i}"))
                        else:  # several workers: the clients alternate between them
                            samples.append(await gateway_stream(gws[i % len(gws)], stack.token, f"问题{i}"))

                cpu_before = stack.cpu_sec()
                await asyncio.gather(*(one(i) for i in range(total_runs)))
                results[(label, mode)] = samples
                if mode == "gateway":
                    results[(label, "cpu_ms")] = (stack.cpu_sec() - cpu_before) * 1000 / total_runs
    finally:
        for client in gws:
            await client.aclose()
        await direct_client.close()
    return results


async def _snapshot(stack: Stack, number: int) -> None:
    """Asks the worker for tracemalloc snapshot `number` and waits until it is written."""
    path = Path(stack.env["BENCH_TRACEMALLOC"]) / f"snapshot-{number}.pickle"
    os.kill(stack.gateway.pid, 10)  # SIGUSR1
    while not path.exists() or path.stat().st_size == 0:
        await asyncio.sleep(0.5)
    await asyncio.sleep(2.0)  # the dump finishes writing


# A held stream's allocations by owner: the nearest frame (from the allocation outwards) whose
# file holds one of these marks names it (docs/benchmarks.md, issue 46's step 1).
TRACE_OWNERS = (
    ("the model request and its stream", ("httpx2", "httpcore", "aiohttp", "openai/", "httpx_sse", "multidict",
                                          "yarl", "runtime/llm", "runtime/model_transport", "runtime/providers")),
    ("Django's request and response, the middleware", ("django/", "asgiref/", "csp/", "campus_agent/")),
    ("the run and the turn", ("chat_app/", "agents_app/")),
    ("uvicorn's connection", ("uvicorn/", "h11/")),
    ("imports (once per worker)", ("importlib",)),
)


def _trace_owner(traceback) -> str:
    for frame in reversed(traceback):  # the allocation's own frame first
        for owner, marks in TRACE_OWNERS:
            if any(mark in frame.filename for mark in marks):
                return owner
    return "the rest"


def tracemalloc_report(directory: str, streams: int) -> None:
    """What the held streams allocated: snapshot 1 (holding) minus snapshot 0 (idle)."""
    import tracemalloc

    before = tracemalloc.Snapshot.load(f"{directory}/snapshot-0.pickle")
    holding = tracemalloc.Snapshot.load(f"{directory}/snapshot-1.pickle")
    owners: dict[str, int] = {}
    for stat in holding.compare_to(before, "traceback"):
        owner = _trace_owner(stat.traceback)
        owners[owner] = owners.get(owner, 0) + stat.size_diff
    print(f"\ntracemalloc, by owner: {sum(owners.values()) / 1024 / streams:.1f} KiB traced per held stream")
    for owner, size in sorted(owners.items(), key=lambda item: -item[1]):
        print(f"  {size / 1024 / streams:6.1f} KiB/stream  {owner}")
    for key in ("filename", "lineno"):
        diff = holding.compare_to(before, key)
        total = sum(d.size_diff for d in diff)
        print(f"\ntracemalloc, by {key}: {total / 1024 / streams:.1f} KiB traced per held stream; the largest:")
        for stat in diff[:25]:
            frame = stat.traceback[0]
            print(f"  {stat.size_diff / streams:8.0f} B/stream {stat.count_diff / streams:6.1f} blocks/stream  "
                  f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno if key == 'lineno' else ''}")


async def hold(stack: Stack, *, streams: int, ramp: int) -> dict:
    """Opens `streams` gateway streams on a slow model and keeps them open; returns RSS figures."""
    import httpx

    gw = httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.gw_port}", timeout=httpx.Timeout(600, connect=60),
                           limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))
    rss_before = _rss_kb(stack.gateway.pid)
    if stack.env.get("BENCH_TRACEMALLOC"):
        await _snapshot(stack, 0)
    started_streams = 0
    errors: list[str] = []
    all_open = asyncio.Event()

    def seen_first():
        nonlocal started_streams
        started_streams += 1
        if started_streams == streams:
            all_open.set()

    async def one(i: int):
        try:
            await gateway_stream(gw, stack.token, f"慢问题{i}", on_first=seen_first)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(exc).__name__}: {exc}"[:160])
            if len(errors) + started_streams >= streams:
                all_open.set()

    t0 = time.perf_counter()
    tasks = []
    for i in range(streams):
        tasks.append(asyncio.create_task(one(i)))
        if (i + 1) % ramp == 0:
            await asyncio.sleep(0.25)  # ramp up: the streams' first DB writes queue on SQLite
    await asyncio.wait_for(all_open.wait(), timeout=180)
    open_sec = time.perf_counter() - t0
    await asyncio.sleep(1.0)
    rss_holding = _rss_kb(stack.gateway.pid)
    if stack.env.get("BENCH_TRACEMALLOC"):
        await _snapshot(stack, 1)
    # What holding costs the worker while nothing else happens: the slow model sends a chunk per
    # stream every few seconds, and the run supervisor heart-beats and checkpoints every run
    # every RUN_HEARTBEAT_SEC (one transaction for all of them).
    cpu_before, window = _cpu_sec(stack.gateway.pid), 10.0
    await asyncio.sleep(window)
    holding_cpu_pct = (_cpu_sec(stack.gateway.pid) - cpu_before) / window * 100
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await gw.aclose()
    return {"streams": streams, "open": started_streams, "errors": errors, "open_sec": open_sec,
            "rss_before_mb": rss_before / 1024, "rss_holding_mb": rss_holding / 1024,
            "kb_per_stream": (rss_holding - rss_before) / max(started_streams, 1),
            "holding_cpu_pct": holding_cpu_pct}


async def burst(stack: Stack, *, streams: int, side: str) -> dict:
    """Opens `streams` streams in the same instant against the slow model (issue 24's course-selection
    morning) and waits for them all to end: per stream the first chunk's time from the start, and
    how many were open together (first chunk seen, `done` not yet). `side` is "gateway" (POST
    /api/v1/chat) or "direct" (the openai SDK to the same model: the floor). For the gateway, the
    workers' RSS is sampled while they run (under --profile, py-spy's child)."""
    import httpx
    import openai

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(600, connect=120, pool=120)
    # Several workers (--backends redis): the clients alternate between them.
    https = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout, limits=limits)
             for port in stack.gw_ports]
    direct = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{stack.llm_port}/v1", api_key="sk", max_retries=0,
                                http_client=httpx.AsyncClient(timeout=timeout, limits=limits))
    firsts: list[float] = []
    errors: list[str] = []
    open_now = open_max = 0
    pids = stack.gateway_pids()
    rss_before, rss_max = sum(_rss_kb(pid) for pid in pids), 0
    t0 = time.perf_counter()

    async def one(i: int):
        nonlocal open_now, open_max
        opened = False

        def seen_first():
            nonlocal open_now, open_max, opened
            firsts.append(time.perf_counter() - t0)
            opened, open_now = True, open_now + 1
            open_max = max(open_max, open_now)

        try:
            if side == "gateway":
                await gateway_stream(https[i % len(https)], stack.tokens[i % len(stack.tokens)], f"选课{i}",
                                     on_first=seen_first)
            else:
                stream = await direct_create(direct, f"选课{i}")
                async for chunk in stream:
                    if not opened and chunk.choices and chunk.choices[0].delta.content:
                        seen_first()
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(exc).__name__}: {exc}"[:160])
        finally:
            open_now -= opened  # ended, or failed after its first chunk

    async def sample_rss():
        nonlocal rss_max
        while True:
            rss_max = max(rss_max, sum(_rss_kb(pid) for pid in pids))
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample_rss())
    cpu_before = stack.cpu_sec()
    await asyncio.gather(*(one(i) for i in range(streams)))
    cpu_ms = (stack.cpu_sec() - cpu_before) * 1000
    sampler.cancel()
    for http in https:
        await http.aclose()
    await direct.close()
    return {"streams": streams, "served": len(firsts), "open_max": open_max, "errors": errors,
            "first_p10": _pct(firsts, 10) if firsts else float("nan"),
            "first_p50": _pct(firsts, 50) if firsts else float("nan"),
            "first_p99": _pct(firsts, 99) if firsts else float("nan"),
            "first_max": max(firsts, default=float("nan")),
            "kib_per_stream": (rss_max - rss_before) / streams if side == "gateway" else float("nan"),
            "cpu_ms_per_turn": cpu_ms / streams if side == "gateway" else float("nan")}


def burst_report(rows: dict, *, streams: int, pace: float, chunks: int, users: int = 1) -> None:
    print(f"\nBurst: {streams} streams of {users} student(s) opened in the same instant, the model sending a "
          f"delta every {pace:g} s ({chunks} deltas); seconds from the start")
    header = (f"{'side':<22} {'served':>7} {'open together':>14} {'first p10':>10} {'first p50':>10} {'first p99':>10} "
              f"{'first max':>10} {'KiB/stream':>11} {'cpu ms/turn':>12} {'errors':>7}")
    print(header)
    print("-" * len(header))
    for label, row in rows.items():
        print(f"{label:<22} {row['served']:>7} {row['open_max']:>14} {row['first_p10']:10.2f} {row['first_p50']:10.2f} {row['first_p99']:10.2f} "
              f"{row['first_max']:10.2f} {row['kib_per_stream']:11.1f} {row['cpu_ms_per_turn']:12.1f} "
              f"{len(row['errors']):>7}")
        for err in row["errors"][:3]:
            print("   ", err)
    print("goal (issue 24): all open together; first chunk p50 ≤ 3 s, max ≤ 6 s; ≤ 64 KiB per held stream")


def compare_bursts(args) -> None:
    """--burst N: the direct floor, then each gateway variant (--trees, --servers, --backends), all
    against the same slow model set-up, in one run."""
    rows = {}
    for label, root, backend, server_args, words in _variants(args):
        stack = Stack(pace=args.burst_pace, chunks=args.burst_chunks, database_url=args.database_url, root=root,
                      redis_url=args.redis_url if backend.startswith("redis") else "", workers=_workers(backend),
                      server_args=server_args, users=args.burst_users, extra_env=_moderation_env(words),
                      profile=args.profile.replace("{label}", (label or "gateway").replace(":", "-"))).start()
        try:
            asyncio.run(gateway_stream_warm(stack))
            if not rows:
                rows["direct (floor)"] = asyncio.run(burst(stack, streams=args.burst, side="direct"))
            rows[f"gateway {label}".strip()] = asyncio.run(burst(stack, streams=args.burst, side="gateway"))
        finally:
            stack.stop()
    burst_report(rows, streams=args.burst, pace=args.burst_pace, chunks=args.burst_chunks, users=args.burst_users)


async def gateway_stream_warm(stack: Stack) -> None:
    """One turn through each worker before a burst (its code paths, pools and database pages)."""
    import httpx

    for port in stack.gw_ports:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            await gateway_stream(http, stack.token, "热身")


def report(results: dict, held: dict | None, concurrency: int, args_chunks: int) -> None:
    print("\nTime to first chunk (TTFC) and total, milliseconds (gateway vs direct to the same paced model)")
    header = f"{'streams':>7} {'metric':<6} {'pct':<4} {'direct':>9} {'gateway':>9} {'added':>8} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    verdicts = []
    for label in ("1", str(concurrency)):
        direct, gateway = results[(label, "direct")], results[(label, "gateway")]
        for metric, index in (("ttfc", 0), ("total", 1)):
            for p in (50, 99):
                d = _pct([s[index] for s in direct], p)
                g = _pct([s[index] for s in gateway], p)
                print(f"{label:>7} {metric:<6} p{p:<3} {d:9.1f} {g:9.1f} {g - d:8.1f} {g / d:6.2f}")
                if metric == "ttfc":
                    goal = GOALS["ttfc_p50_1"] if (label == "1" and p == 50) else (
                        GOALS["ttfc_p99_1"] if label == "1" else GOALS["ttfc_p99_n"] if p == 99 else None)
                    if goal is not None:
                        verdicts.append(f"added TTFC p{p} at {label}: {g - d:.1f} ms (goal ≤ {goal:.0f}) "
                                        f"{'OK' if g - d <= goal else 'MISSED'}")
                    if label != "1" and p == 50:
                        verdicts.append(f"TTFC p50 at {label}: {g / d:.2f}× the floor (goal ≤ "
                                        f"{GOALS['ttfc_ratio_n']:.0f}×) {'OK' if g / d <= GOALS['ttfc_ratio_n'] else 'MISSED'}")
                elif label == "1" and p == 50:
                    verdicts.append(f"added end (done) p50 at 1: {g - d:.1f} ms (goal ≤ {GOALS['total_p50_1']:.0f}) "
                                    f"{'OK' if g - d <= GOALS['total_p50_1'] else 'MISSED'}")
    print(f"\n(samples: {len(results[('1', 'gateway')])} sequential, {len(results[(str(concurrency), 'gateway')])} "
          f"at {concurrency} concurrent)")
    print(f"gateway CPU per stream: {results[('1', 'cpu_ms')]:.1f} ms sequential, "
          f"{results[(str(concurrency), 'cpu_ms')]:.1f} ms at {concurrency} concurrent "
          f"({args_chunks} chunks each)")
    if held:
        print("\nSlow streams held by one gateway worker")
        print(f"  opened {held['open']}/{held['streams']} in {held['open_sec']:.1f} s, errors: {len(held['errors'])}")
        print(f"  gateway RSS {held['rss_before_mb']:.0f} MB idle → {held['rss_holding_mb']:.0f} MB holding "
              f"= {held['kb_per_stream']:.0f} KB per stream")
        print(f"  gateway CPU while holding them: {held['holding_cpu_pct']:.1f} % of a core with the 2 s "
              f"heartbeat + text checkpoints, {held.get('no_checkpoints_cpu_pct', float('nan')):.1f} % without")
        for err in held["errors"][:5]:
            print("   ", err)
        verdicts.append(f"streams held: {held['open']} (goal ≥ {GOALS['hold']}) "
                        f"{'OK' if held['open'] >= GOALS['hold'] and not held['errors'] else 'below goal'}")
    print("\n" + "\n".join(verdicts))


async def saturate(stack: Stack, *, seconds: float, clients: int) -> dict:
    """`clients` loops asking back to back for `seconds` (clients alternate between the workers):
    turns per second at saturation and server CPU per turn (all workers)."""
    import httpx

    gws = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120,
                             limits=httpx.Limits(max_connections=None)) for port in stack.gw_ports]
    done, errors = 0, 0
    stop_at = time.perf_counter() + seconds

    async def client(i: int):
        nonlocal done, errors
        n = 0
        while time.perf_counter() < stop_at:
            try:
                await gateway_stream(gws[(i + n) % len(gws)], stack.token, f"饱和{i}-{n}")
                done += 1
            except Exception:  # noqa: BLE001 - counted and reported
                errors += 1
            n += 1

    llm_pid = stack.procs[0].pid
    cpu_before, t0 = stack.cpu_sec(), time.perf_counter()
    llm_before, me_before = _cpu_sec(llm_pid), time.process_time()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - t0
    cpu_ms = (stack.cpu_sec() - cpu_before) * 1000
    for gw in gws:
        await gw.aclose()
    # Where the two cores went: the workers, the scripted model, these clients (the rest: other
    # work on the machine, Redis, the database).
    return {"turns_per_sec": done / elapsed, "cpu_ms_per_turn": cpu_ms / max(done, 1), "errors": errors,
            "cores": {"workers": cpu_ms / 1000 / elapsed, "model": (_cpu_sec(llm_pid) - llm_before) / elapsed,
                      "clients": (time.process_time() - me_before) / elapsed}}


def _moderation_env(words: int) -> dict:
    return {"BENCH_MODERATION_WORDS": str(words)} if words else {}


def _variants(args) -> list[tuple[str, Path, str, tuple[str, ...], int]]:
    """(label, source tree, backend, uvicorn options, moderation words) per gateway set-up to
    compare. `--moderation off,100000` runs each with no word list and with a mask list of that
    many words read by every stage (issue 44: what checking the question and the streamed answer
    costs). Backends:
    `embedded` (one worker), `redis` (Redis, two workers), `redis1` (Redis, one worker). `--trees
    before=/tmp/base,after=.` runs each backend from each tree, so a change and the code before
    it are measured in the same run; `--servers 'h11=--loop asyncio --http h11,fast=--loop uvloop
    --http httptools'` likewise runs each under each set of uvicorn options."""
    trees = [(name, Path(path).resolve()) for name, _, path in
             (item.partition("=") for item in args.trees.split(","))] if args.trees else [("", ROOT)]
    servers = [(name, tuple(options.split())) for name, _, options in
               (item.partition("=") for item in args.servers.split(","))] if args.servers else [("", ())]
    moderation = [(f"words{value}" if value != "off" else "nowords", 0 if value == "off" else int(value))
                  for value in args.moderation.split(",")] if args.moderation else [("", 0)]
    return [(":".join(part for part in (tree, server, listed, backend) if part), root, backend, options, words)
            for backend in args.backends.split(",") for tree, root in trees for server, options in servers
            for listed, words in moderation]


def _gc_collections(stack: Stack, path: str) -> list:
    """The worker's garbage collections since the last call: [(generation, ms), …]."""
    os.kill(stack.gateway.pid, 12)  # SIGUSR2
    while not Path(path).exists():
        time.sleep(0.1)
    collections = json.loads(Path(path).read_text())
    Path(path).unlink()
    return collections


def _workers(backend: str) -> int:
    return 2 if backend == "redis" else 1


def compare_backends(args) -> None:
    """The same measurement against each run backend (and source tree), in one run (this machine
    is noisy: compare the figures of one run, not across runs)."""
    rows = {}
    for label, root, backend, server_args, words in _variants(args):
        gc_log = f"{tempfile.mkdtemp(prefix='bench-gc-')}/gc.json" if args.gc_log else ""
        stack = Stack(pace=args.pace, chunks=args.chunks, redis_url=args.redis_url if backend.startswith("redis") else "",
                      workers=_workers(backend), database_url=args.database_url, root=root,
                      profile=args.profile.replace("{label}", label.replace(":", "-")), server_args=server_args,
                      extra_env={**({"BENCH_GC_LOG": gc_log} if gc_log else {}), **_moderation_env(words)}).start()
        try:
            if gc_log:
                _gc_collections(stack, gc_log)  # those of the start-up: not counted
            rows[label] = asyncio.run(measure(stack, runs=args.runs, concurrency=args.concurrency))
            if args.saturate:
                rows[label]["saturation"] = asyncio.run(
                    saturate(stack, seconds=args.saturate, clients=args.concurrency))
            if gc_log:
                rows[label]["gc"] = _gc_collections(stack, gc_log)
        finally:
            stack.stop()
    db = "PostgreSQL" if args.database_url.startswith("postgres") else "SQLite"
    print(f"\nSide by side ({db}, {args.chunks} chunks × {args.pace * 1000:.0f} ms): gateway TTFC and total (ms), "
          "added over direct, server CPU per turn, the first chunk's p50 against the direct client's")
    width = max(9, *(len(label) for label in rows))
    header = (f"{'variant':<{width}} {'streams':>7} {'ttfc p50':>9} {'+direct':>8} {'ttfc p99':>9} {'+direct':>8} "
              f"{'total p50':>10} {'+direct':>8} {'cpu ms':>7} {'ttfc/floor':>10}")
    print(header)
    print("-" * len(header))
    for label, results in rows.items():
        for streams in ("1", str(args.concurrency)):
            gateway, direct = results[(streams, "gateway")], results[(streams, "direct")]
            p50, p99 = _pct([g[0] for g in gateway], 50), _pct([g[0] for g in gateway], 99)
            floor, end = _pct([d[0] for d in direct], 50), _pct([g[1] for g in gateway], 50)
            print(f"{label:<{width}} {streams:>7} {p50:9.1f} {p50 - floor:8.1f} "
                  f"{p99:9.1f} {p99 - _pct([d[0] for d in direct], 99):8.1f} "
                  f"{end:10.1f} {end - _pct([d[1] for d in direct], 50):8.1f} {results[(streams, 'cpu_ms')]:7.1f} "
                  f"{p50 / floor:9.2f}×")
    print("\nSlowest first chunks at 1 stream (run number: gateway TTFC ms), to tell warm-up from periodic stalls:")
    for label, results in rows.items():
        slowest = sorted(enumerate(g[0] for g in results[("1", "gateway")]), key=lambda item: -item[1])[:4]
        print(f"  {label:<{width}} " + ", ".join(f"#{i}: {v:.1f}" for i, v in slowest))
    if args.gc_log:
        print("\nGarbage collections in the (first) worker after start-up: count, total ms, longest ms")
        for label, results in rows.items():
            by_gen = {gen: [ms for g, ms in results["gc"] if g == gen] for gen in (0, 1, 2)}
            print(f"  {label:<{width}} " + "; ".join(
                f"gen{gen} {len(v)}× {sum(v):.0f} ms, max {max(v, default=0):.1f}" for gen, v in by_gen.items()))
    if args.saturate:
        print(f"\nAt saturation ({args.concurrency} clients asking back to back for {args.saturate:.0f} s)")
        for label, results in rows.items():
            sat = results["saturation"]
            cores = ", ".join(f"{k} {v:.2f}" for k, v in sat["cores"].items())
            print(f"  {label:<{width}} {_workers(label.rpartition(':')[2])} worker(s): {sat['turns_per_sec']:6.1f} turns/s, "
                  f"server CPU {sat['cpu_ms_per_turn']:5.1f} ms per turn, errors {sat['errors']}; cores busy: {cores}")
        for label in rows:
            one = label.replace("redis", "embedded") if label.endswith("redis") else None
            if one in rows:
                ratio = rows[label]["saturation"]["turns_per_sec"] / rows[one]["saturation"]["turns_per_sec"]
                print(f"  {label} / {one}: {ratio:.2f}× (goal ≥ 1.3× on this 2-core machine, where the clients "
                      f"and the model share the cores)")
        for label in rows:  # --moderation: the word lists' cost per turn against none
            parts = label.split(":")
            listed = next((p for p in parts if p.startswith("words")), None)
            bare = ":".join("nowords" if p == listed else p for p in parts)
            if listed and bare in rows:
                cpu = rows[label]["saturation"]["cpu_ms_per_turn"] / rows[bare]["saturation"]["cpu_ms_per_turn"]
                print(f"  CPU per turn {label} / {bare}: {cpu:.3f}× (goal ≤ 1.05×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40, help="sequential streams per side at 1 stream")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--pace", type=float, default=0.01, help="seconds between the model's chunks")
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--hold", type=int, default=300, help="slow streams to hold open (0: skip)")
    parser.add_argument("--ramp", type=int, default=100, help="streams opened per 0.25 s while holding")
    parser.add_argument("--backends", default="",
                        help="compare run backends side by side: 'embedded,redis' (Redis: two workers)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--saturate", type=float, default=0.0,
                        help="with --backends: also ask back to back for this many seconds (turns/s, CPU per turn)")
    parser.add_argument("--database-url", default="",
                        help="postgres://…/<name>: a throw-away PostgreSQL database (dropped and made again); "
                             "default a temporary SQLite file")
    parser.add_argument("--servers", default="",
                        help="compare uvicorn options side by side: 'h11=--loop asyncio --http h11,"
                             "fast=--loop uvloop --http httptools'; options that start with granian run "
                             "granian instead (its ASGI interface without lifespan): 'g=granian --loop asyncio'")
    parser.add_argument("--trees", default="",
                        help="name=path,… source trees to run the gateway from, side by side (each with every --backends; "
                             "without --backends: embedded)")
    parser.add_argument("--profile", default="",
                        help="py-spy the first gateway worker into this file (.svg: flame graph, else raw "
                             "collapsed stacks); '{label}' is replaced by the variant's name")
    parser.add_argument("--gc-log", action="store_true",
                        help="with --backends: time every garbage collection of the (first) worker")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="with --hold: trace the holding worker's allocations and show what a held stream holds")
    parser.add_argument("--tracemalloc-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gateway-log", default="", help="append the gateway workers' log lines to this file")
    parser.add_argument("--burst", type=int, default=0,
                        help="open this many streams in the same instant against a slow model (issue 24), "
                             "against the direct floor; with --trees/--servers/--backends side by side")
    parser.add_argument("--burst-pace", type=float, default=1.0, help="with --burst: seconds between the model's deltas")
    parser.add_argument("--burst-chunks", type=int, default=20, help="with --burst: the model's deltas per answer")
    parser.add_argument("--burst-users", type=int, default=1,
                        help="with --burst: this many students, each with a JWT, the streams taking them in turn "
                             "(1: one student opens them all, as in docs/benchmarks.md's earlier tables)")
    parser.add_argument("--moderation", default="",
                        help="compare word lists side by side: 'off,100000' (no list; a mask list of 100,000 words "
                             "checking the question and the streamed answer); with --saturate, CPU per turn")
    parser.add_argument("--serve-llm", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gateway_log:
        os.environ["BENCH_GATEWAY_LOG"] = args.gateway_log
    if args.serve_llm:
        serve_llm(args.serve_llm, args.pace, args.chunks)
        return
    if args.burst:
        args.backends = args.backends or "embedded"
        compare_bursts(args)
        return
    if (args.trees or args.servers or args.moderation) and not args.backends:
        args.backends = "embedded"  # trees and servers are compared side by side, through --backends
    if args.backends:
        compare_backends(args)
        return

    stack = Stack(pace=args.pace, chunks=args.chunks, database_url=args.database_url, profile=args.profile).start()
    try:
        results = asyncio.run(measure(stack, runs=args.runs, concurrency=args.concurrency))
    finally:
        stack.stop()
    held = None
    if args.hold:
        # A model that takes ~2 minutes per answer: every stream stays open while we count.
        traced = tempfile.mkdtemp(prefix="bench-tracemalloc-") if args.tracemalloc else ""
        slow = Stack(pace=5.0, chunks=30, database_url=args.database_url,
                     extra_env={"BENCH_TRACEMALLOC": traced} if traced else None).start()
        try:
            held = asyncio.run(hold(slow, streams=args.hold, ramp=args.ramp))
        finally:
            slow.stop()
        if traced:
            tracemalloc_report(traced, held["open"])
            if args.tracemalloc_only:
                report(results, held, args.concurrency, args.chunks)
                return
        # The same without heartbeats and checkpoints in the window: what the checkpoints cost.
        slow = Stack(pace=5.0, chunks=30, extra_env={"RUN_HEARTBEAT_SEC": "3600"}).start()
        try:
            held["no_checkpoints_cpu_pct"] = asyncio.run(hold(slow, streams=args.hold, ramp=args.ramp))[
                "holding_cpu_pct"]
        finally:
            slow.stop()
    report(results, held, args.concurrency, args.chunks)


if __name__ == "__main__":
    main()
