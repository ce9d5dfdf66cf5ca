"""Benchmark (issue 46): this gateway's OpenAI-compatible endpoint against LiteLLM's proxy, the
gateway a campus would pick instead, side by side in one run.

    .venv/bin/python bench/litellm_peer.py                    # 3 rounds: 20 streams one by one, 64 at 32 at once
    .venv/bin/python bench/litellm_peer.py --rounds 5 --runs 40 --concurrency 32
    .venv/bin/python bench/litellm_peer.py --litellm-version 1.110.2   # another LiteLLM, its own virtualenv
    .venv/bin/python bench/litellm_peer.py --ours-only        # without LiteLLM (the smoke test): ours and the floor

Four processes, each on loopback: the scripted model (testkit.model.fake_llm, `--chunks` chunks
`--pace` s apart, started as bench/stream_overhead.py starts it), one gateway worker (uvicorn,
campus_agent.asgi, a throw-away SQLite file: stream_overhead's Stack), LiteLLM's proxy, and this
script, the clients. Three sides ask the same question with the official `openai` client, the
same call on each (stream, usage chunk asked for, max_tokens 256):

- **direct**, the floor: the scripted model itself;
- **ours**: `POST /v1/chat/completions` with a personal API key (made through `/api/v1/api-keys`
  as bench/openai_overhead.py makes it), model = the bench agent's slug; every request checks
  the key on its row, stores the question and the reply, as in production;
- **theirs**: LiteLLM's proxy (`litellm[proxy]==--litellm-version`, default 1.108.7, pinned),
  one uvicorn worker (`--num_workers 1`), a master key, no database (no DATABASE_URL: no spend
  logs, no virtual keys), callbacks none, logging at ERROR, the model cost map read from the
  package (no fetch), and one model: `openai/fake-model` with `api_base` at the scripted model.

LiteLLM lives in its own virtualenv, made on first use outside the repository with `python -m
venv` and pip from the package registry: `~/.cache/campus-agent-bench/litellm-<version>`
(`$XDG_CACHE_HOME` if set; a file `installed` marks a finished install, so an interrupted one is
made again).

Measured per side, in rounds that rotate the sides' order (a busy machine weighs on all alike):
time to the first text chunk and to the stream's end (after the usage chunk and `[DONE]`) at 1
stream (`--runs` one after the other) and at `--concurrency` at once (twice that many streams);
"added" = the side's percentile minus the floor's at the same percentile; server CPU per request
= the server's process tree's user + system time from /proc/<pid>/stat before and after its
blocks, divided by its requests (idle work between them counted); RSS of the process tree after
warm-up and after the run. Ratios are ours / theirs (below 1: ours is lighter or faster).
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stream_overhead import Stack, _cpu_sec, _free_port, _pct, _process_tree, _rss_kb  # noqa: E402

from bench._django_setup import bench_cache  # noqa: E402 - stream_overhead put the root on the path

LITELLM_VERSION = "1.108.7"  # the version measured before issue 46 (1.107.x is absent from the registry)
MASTER_KEY = "sk-bench-master"
MODEL = "fake-model"  # the scripted model's name, and LiteLLM's name for it
OURS_MODEL = "bench"  # the agent stream_overhead's Stack seeds
SIDES = ("direct", "ours", "theirs")
# Variables LiteLLM's proxy reads that would give it a database or a cache, or make it fetch:
# the child gets a clean environment instead of ours (Stack's DATABASE_URL is a SQLite URL).
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE")


# --- LiteLLM: its virtualenv, its configuration, its process ------------------------------------
def litellm_home(version: str, environ: dict | None = None) -> Path:
    return bench_cache(environ) / f"litellm-{version}"


def litellm_install(version: str) -> Path:
    """The proxy's `litellm` command, its virtualenv made first if it is not there yet."""
    home = litellm_home(version)
    marker = home / "installed"
    if not marker.exists():
        print(f"installing litellm[proxy]=={version} into {home} (once) …", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
        subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        f"litellm[proxy]=={version}"], check=True)
        marker.write_text(version + "\n")
    return home / "bin" / "litellm"


def litellm_config(*, llm_port: int, master_key: str = MASTER_KEY) -> dict:
    """The proxy's config.yaml (written as JSON, which YAML reads): one model, a master key, no
    database, no callbacks, no spend or error logs, no request bodies logged."""
    return {
        "model_list": [{
            "model_name": MODEL,
            "litellm_params": {"model": f"openai/{MODEL}", "api_base": f"http://127.0.0.1:{llm_port}/v1",
                               "api_key": "sk-bench"},
        }],
        "litellm_settings": {
            "callbacks": [], "success_callback": [], "failure_callback": [], "service_callback": [],
            "turn_off_message_logging": True, "json_logs": False, "request_timeout": 600,
        },
        "general_settings": {
            "master_key": master_key,
            "disable_spend_logs": True, "disable_error_logs": True,
            "disable_adding_master_key_hash_to_db": True, "store_model_in_db": False,
            "background_health_checks": False,
        },
    }


def litellm_env(environ: dict) -> dict:
    """The proxy's environment: a few of ours (paths, locale) and LiteLLM's own switches —
    errors only in its log, the model cost map from the package (this machine reaches no such
    URL, and a fetch would retry at start-up), production mode (no .env read)."""
    return {
        **{name: environ[name] for name in PASSED_ENV if name in environ},
        "LITELLM_LOG": "ERROR",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MODE": "PRODUCTION",
        "DISABLE_ADMIN_UI": "True",
        "PYTHONUNBUFFERED": "1",
    }


class LiteLlmProxy:
    """LiteLLM's proxy as a child process, one worker, ready once its health endpoint answers."""

    def __init__(self, *, command: Path, llm_port: int):
        self.command, self.llm_port = command, llm_port
        self.port = _free_port()
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-litellm-")

    def start(self) -> "LiteLlmProxy":
        config = Path(self.tmp.name) / "config.yaml"
        config.write_text(json.dumps(litellm_config(llm_port=self.llm_port), indent=2))
        self.log = Path(self.tmp.name) / "proxy.log"
        self.proc = subprocess.Popen(
            [str(self.command), "--config", str(config), "--host", "127.0.0.1", "--port", str(self.port),
             "--num_workers", "1"],
            cwd=self.tmp.name, env=litellm_env(dict(os.environ)),
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )
        self._wait_healthy(timeout=180)
        return self

    def _wait_healthy(self, *, timeout: float) -> None:
        """Polls /health/liveliness (no key needed): uvicorn answers only after the app's start-up,
        where the proxy reads its config and builds its router."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"LiteLLM's proxy exited ({self.proc.returncode}):\n{self._log_tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health/liveliness", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"LiteLLM's proxy not healthy after {timeout:.0f} s:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def cpu_sec(self) -> float:
        return sum(_cpu_sec(pid) for pid in _process_tree(self.proc.pid))

    def rss_kb(self) -> int:
        return sum(_rss_kb(pid) for pid in _process_tree(self.proc.pid))

    def stop(self) -> None:
        if getattr(self, "proc", None) is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.tmp.cleanup()


# --- the clients ------------------------------------------------------------------------------
async def sdk_stream(client, model: str, question: str) -> tuple[float, float]:
    """One streamed answer through the openai SDK, the same call on every side: (ms to the first
    text chunk, ms to the stream's end)."""
    started, first = time.perf_counter(), None
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], stream=True, max_tokens=256,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
    if first is None:
        raise RuntimeError(f"{model}: a stream without text")
    return (first - started) * 1000, (time.perf_counter() - started) * 1000


async def _api_key(stack: Stack) -> str:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.gw_port}", timeout=60) as http:
        made = await http.post("/api/v1/api-keys", json={"name": "bench"},
                               headers={"Authorization": f"Bearer {stack.token}"})
        made.raise_for_status()
        return made.json()["key"]


async def _block(client, model: str, *, side: str, width: int, count: int, tag: str) -> list[tuple[float, float]]:
    """`count` streams, `width` at a time."""
    semaphore = asyncio.Semaphore(width)

    async def one(i: int) -> tuple[float, float]:
        async with semaphore:
            try:
                return await sdk_stream(client, model, f"{tag}-{i}")
            except Exception as exc:
                raise RuntimeError(f"{side}, {width} at once: {exc!r}") from exc

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def measure(stack: Stack, proxy: LiteLlmProxy | None, *, rounds: int, runs: int, concurrency: int) -> dict:
    """{(width, side): [(ttfc, total), …]}, {(width, side, "cpu_ms"): per request}, RSS figures."""
    import httpx2  # the openai SDK's HTTP client
    import openai

    sdk = {"direct": (f"http://127.0.0.1:{stack.llm_port}/v1", "sk-bench", MODEL),
           "ours": (f"http://127.0.0.1:{stack.gw_port}/v1", await _api_key(stack), OURS_MODEL)}
    if proxy:
        sdk["theirs"] = (f"http://127.0.0.1:{proxy.port}/v1", MASTER_KEY, MODEL)
    # An idle connection is dropped by the client after 2 s, before uvicorn's keep-alive of 5 s
    # closes it (the servers' default): a side idles while the others run their blocks, and a
    # request on a connection the server is closing fails (no retries: a retry would be timed).
    clients = {side: openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=120,
                                        http_client=httpx2.AsyncClient(limits=httpx2.Limits(
                                            max_connections=None, keepalive_expiry=2.0), timeout=120))
               for side, (url, key, _) in sdk.items()}
    servers = {"ours": stack.cpu_sec, **({"theirs": proxy.cpu_sec} if proxy else {})}
    rss = {"ours": lambda: sum(_rss_kb(pid) for pid in stack.gateway_pids()),
           **({"theirs": proxy.rss_kb} if proxy else {})}
    sides = list(clients)
    out: dict = {}
    try:
        for side in sides:  # warm-up: code paths, connection pools, database pages
            for _ in range(5):
                await sdk_stream(clients[side], sdk[side][2], "热身")
        out["rss_warm_kb"] = {side: read() for side, read in rss.items()}
        for width, per_block in ((1, runs), (concurrency, concurrency * 2)):
            for r in range(rounds):
                order = sides[r % len(sides):] + sides[:r % len(sides)]
                for side in order:
                    samples = out.setdefault((width, side), [])
                    before = servers[side]() if side in servers else 0.0
                    samples += await _block(clients[side], sdk[side][2], side=side, width=width, count=per_block,
                                            tag=f"问题{r}")
                    if side in servers:
                        out.setdefault((width, side, "cpu_sec"), 0.0)
                        out[(width, side, "cpu_sec")] += servers[side]() - before
            for side in servers:
                out[(width, side, "cpu_ms")] = out.pop((width, side, "cpu_sec")) * 1000 / (rounds * per_block)
        out["rss_end_kb"] = {side: read() for side, read in rss.items()}
    finally:
        for client in clients.values():
            await client.close()
    return out


# --- the figures ------------------------------------------------------------------------------
def ratio(ours: float, theirs: float) -> str:
    """ours / theirs, or why there is none (an added time at or below the floor's has no ratio)."""
    if theirs <= 0 or ours < 0:
        return "n/a"
    return f"{ours / theirs:.2f}×"


def figures(out: dict, width: int, side: str) -> dict:
    """A side's figures at one width: p50 and p99 of the first chunk and the end, each added over
    the floor's at the same percentile, and server CPU per request."""
    mine, floor = out[(width, side)], out[(width, "direct")]
    row = {}
    for name, at in (("ttfc", 0), ("end", 1)):
        for p in (50, 99):
            value = _pct([s[at] for s in mine], p)
            row[f"{name}_p{p}"] = value
            row[f"{name}_p{p}_added"] = value - _pct([s[at] for s in floor], p)
    row["cpu_ms"] = out.get((width, side, "cpu_ms"), float("nan"))
    return row


def report(out: dict, args) -> None:
    print(f"\nSide by side ({args.chunks} chunks × {args.pace * 1000:.0f} ms, {args.rounds} rounds; "
          f"LiteLLM {'—' if args.ours_only else args.litellm_version}): ms; \"+\" = added over direct at the same "
          "percentile; CPU = server CPU per request")
    header = (f"{'side':<7} {'streams':>7} {'ttfc p50':>9} {'+':>7} {'ttfc p99':>9} {'+':>7} "
              f"{'end p50':>8} {'+':>7} {'end p99':>8} {'+':>7} {'cpu ms':>7}")
    print(header)
    print("-" * len(header))
    widths = (1, args.concurrency)
    for width in widths:
        for side in SIDES:
            if (width, side) not in out:
                continue
            f = figures(out, width, side)
            added = side != "direct"

            def cell(name, size, f=f, added=added):
                return f"{f[name]:{size}.1f} " + (f"{f[name + '_added']:7.1f}" if added else f"{'':>7}")

            cpu = f"{f['cpu_ms']:7.1f}" if side in out["rss_warm_kb"] else f"{'':>7}"
            print(f"{side:<7} {width:>7} {cell('ttfc_p50', 9)} {cell('ttfc_p99', 9)} {cell('end_p50', 8)} "
                  f"{cell('end_p99', 8)} {cpu}")
    for side, warm in out["rss_warm_kb"].items():
        print(f"RSS {side}: {warm / 1024:.1f} MB after warm-up, {out['rss_end_kb'][side] / 1024:.1f} MB after the run")
    if "theirs" not in out["rss_warm_kb"]:
        return
    print("\nRatios ours / theirs (below 1: ours lighter or faster)")
    for width in widths:
        ours, theirs = figures(out, width, "ours"), figures(out, width, "theirs")
        print(f"  {width:>2} stream(s): CPU per request {ratio(ours['cpu_ms'], theirs['cpu_ms'])}; "
              f"first chunk added p50 {ratio(ours['ttfc_p50_added'], theirs['ttfc_p50_added'])}, "
              f"p99 {ratio(ours['ttfc_p99_added'], theirs['ttfc_p99_added'])}; "
              f"end added p50 {ratio(ours['end_p50_added'], theirs['end_p50_added'])}, "
              f"p99 {ratio(ours['end_p99_added'], theirs['end_p99_added'])}")
    warm, end = out["rss_warm_kb"], out["rss_end_kb"]
    print(f"  RSS after warm-up {ratio(warm['ours'], warm['theirs'])}, after the run {ratio(end['ours'], end['theirs'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per width; each side once per round, order rotated")
    parser.add_argument("--runs", type=int, default=20, help="streams one after the other per side per round")
    parser.add_argument("--concurrency", type=int, default=32, help="streams at once (twice as many per side per round)")
    parser.add_argument("--pace", type=float, default=0.01, help="seconds between the model's chunks")
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--litellm-version", default=LITELLM_VERSION)
    parser.add_argument("--ours-only", action="store_true", help="no LiteLLM (the smoke test): ours against the floor")
    args = parser.parse_args()
    command = None if args.ours_only else litellm_install(args.litellm_version)
    stack = Stack(pace=args.pace, chunks=args.chunks).start()
    proxy = LiteLlmProxy(command=command, llm_port=stack.llm_port) if command else None
    try:
        if proxy:
            proxy.start()
        out = asyncio.run(measure(stack, proxy, rounds=args.rounds, runs=args.runs, concurrency=args.concurrency))
    finally:
        if proxy:
            proxy.stop()
        stack.stop()
    report(out, args)


if __name__ == "__main__":
    main()
