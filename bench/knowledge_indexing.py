"""Benchmark: a 1,000-page Chinese PDF indexed, on one core and inside a worker that keeps
answering (issue 45; docs/knowledge.md#indexing).

    .venv/bin/python bench/knowledge_indexing.py                  # 1,000 pages, about two minutes
    .venv/bin/python bench/knowledge_indexing.py --database-url postgres://postgres@127.0.0.1:5432/campus_bench
    .venv/bin/python bench/knowledge_indexing.py --pages 20 --idle 2 --rate 2 --rounds 1   # a smoke run

The PDF is the demo handbook's 转专业管理规定 repeated to --pages full pages, written by
demo_app/knowledge/build.py's own code (bench/_handbook_pdf.py: a CJK font subset embedded with a
ToUnicode map, as a word processor writes one); built once, then kept in the temporary folder.

**One core** (this process, and the parser children it starts, pinned to one CPU):

- text extraction by pypdf and by PDFium (pypdfium2), side by side: CPU seconds, pages/s, and
  whether both give the same page texts and the same blocks and headings to knowledge_app.parsing;
- indexing as a worker does it, stage by stage: parse (document_parse: the child process, under
  DOCUMENT_PARSE_*), passages (passages_cut), keyword index (a KeywordIndex of the passages, as a
  worker's first search builds it); pages per second of the whole, beside the same with pypdf's
  text (read in this process, as the child read it before). Goal ≥ 200 pages/s.

**Live**: the scripted model and one gateway worker (uvicorn, as bench/stream_overhead.py starts
them, its Stack and clients reused), the worker serving bench/_loop_lag.py's probe beside the
app. A steady --rate chats per second (POST /api/v1/chat with a JWT, read as SSE) for --idle
seconds; then, --rounds times, a staff member logs into the admin over HTTP and uploads the PDF
into a collection of its own, and the worker indexes it on its thread (knowledge_app.indexing)
while the chats go on at the same rate; the round ends when the document is ready and a first
search in the admin (试检索, building the keyword index in the worker) answered. Printed side by
side, idle and indexing (and each step of it): chats' first-chunk latency p50/p99/max and the
event loop's lag p50/p99/max; the worker's garbage collections (a full one stops every stream);
and the indexing's wall time (upload, parsed, ready, first search).
"""
import argparse
import asyncio
import os
import re
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import stream_overhead as so  # noqa: E402 - after the path

PY = sys.executable


def _cpu_self() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _cpu_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _parser_module():
    """campus_agent/base/documents/parser.py, the child's own code, loaded in this process."""
    import importlib.util

    from campus_agent.base.documents import PARSER

    spec = importlib.util.spec_from_file_location("document_parser", PARSER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pypdf_pages(data: bytes) -> list[str]:
    """Each page's text as the child read a knowledge-base PDF before issue 45 (pypdf)."""
    import io

    from pypdf import PdfReader

    return [(page.extract_text() or "").replace("\x00", "") for page in PdfReader(io.BytesIO(data)).pages]


def pdfium_pages(data: bytes) -> list[str]:
    """Each page's text as the child reads a knowledge-base PDF now (its PdfiumPages)."""
    reader = _parser_module().PdfiumPages(data)
    try:
        return [text.replace("\x00", "") for text in reader.texts()]
    finally:
        reader.close()


def indexed(pages: list[str]) -> tuple[float, float, int, list]:
    """Structure, passages and keyword index of page texts: (seconds of passages, seconds of the
    index, passages, blocks)."""
    from campus_agent.base.documents import RawBlock
    from knowledge_app.keyword_index import KeywordIndex
    from knowledge_app.parsing import structured_blocks
    from knowledge_app.passages import passages_cut

    started = _cpu_self()
    blocks = structured_blocks([RawBlock("page", 0, text, number) for number, text in enumerate(pages, 1)])
    passages = passages_cut(blocks)
    cut = _cpu_self()
    KeywordIndex((p.seq, "转专业管理规定汇编（示例）", p.heading, p.text) for p in passages)
    return cut - started, _cpu_self() - cut, len(passages), blocks


def one_core(data: bytes, pages: int) -> None:
    from django.conf import settings

    from knowledge_app.keyword_index import KeywordIndex
    from knowledge_app.parsing import document_parse
    from knowledge_app.passages import passages_cut

    # rjieba's dictionary and bm25s's import, once per worker: not a document's cost
    KeywordIndex([(1, "预热", "", "预热")])
    started = _cpu_self()
    old = pypdf_pages(data)
    old_sec = _cpu_self() - started
    started = _cpu_self()
    new = pdfium_pages(data)
    new_sec = _cpu_self() - started
    old_cut, old_index, old_passages, old_blocks = indexed(old)
    new_cut, new_index, new_passages, new_blocks = indexed(new)

    # The worker's own path: the child (its start and PDFium's import included), then the rest.
    wall, children = time.perf_counter(), _cpu_children()
    parsed = document_parse(data=data)
    parse_wall, parse_child = time.perf_counter() - wall, _cpu_children() - children
    started = _cpu_self()
    passages_cut(parsed.blocks)
    parse_rest = _cpu_self() - started  # passages, as the worker cuts them after the parse
    live_pages = parsed.pages

    headings = sum(1 for b in new_blocks if b.kind == "heading")
    same_headings = [b for b in old_blocks if b.kind == "heading"] == [b for b in new_blocks if b.kind == "heading"]
    print(f"\n{pages:,} pages, one core (CPU {sorted(os.sched_getaffinity(0))}): text extraction")
    print(f"  {'':28} {'pypdf':>9} {'PDFium':>9}  {'pypdf / PDFium':>14}")
    print(f"  {'CPU seconds':28} {old_sec:9.2f} {new_sec:9.2f}  {old_sec / new_sec:13.1f}×")
    print(f"  {'pages/s':28} {pages / old_sec:9.0f} {pages / new_sec:9.0f}")
    print(f"  same page texts: {sum(a == b for a, b in zip(old, new, strict=True))} of {pages}; "
          f"same blocks: {old_blocks == new_blocks}; same headings ({headings:,}): {same_headings}")

    old_total = old_sec + old_cut + old_index
    new_total = new_sec + new_cut + new_index
    print("\nindexing (parse + passages + keyword index), one core, CPU seconds")
    print(f"  {'':28} {'pypdf':>9} {'PDFium':>9}")
    print(f"  {'text extraction':28} {old_sec:9.2f} {new_sec:9.2f}")
    print(f"  {'structure + passages':28} {old_cut:9.2f} {new_cut:9.2f}   ({new_passages:,} passages)")
    print(f"  {'keyword index':28} {old_index:9.2f} {new_index:9.2f}")
    print(f"  {'indexing pages/s':28} {pages / old_total:9.0f} {pages / new_total:9.0f}   goal ≥ 200")
    print(f"\nthe worker's path: document_parse {parse_wall:.2f} s wall ({live_pages} pages; the child's CPU "
          f"{parse_child:.2f} s of DOCUMENT_PARSE_CPU_SEC {settings.DOCUMENT_PARSE_CPU_SEC} s), passages "
          f"{parse_rest:.2f} s: indexing {pages / (parse_wall + parse_rest + new_index):.0f} pages/s with the "
          f"keyword index")


# --- live ---------------------------------------------------------------------------------------

def _staff_and_collections(rounds: int) -> None:
    """The admin's superuser and a collection per round, written from this process (Django is set
    up on the stack's database): no third Django start-up."""
    from django.contrib.auth import get_user_model
    from django.db import connections

    from knowledge_app.models import KnowledgeCollection

    get_user_model().objects.create_superuser("staff", "staff@example.edu", "bench-staff-password")
    for i in range(rounds):
        KnowledgeCollection.objects.create(slug=f"bench-{i}", name=f"汇编 {i}")
    connections.close_all()


class IndexingStack(so.Stack):
    """stream_overhead's Stack, the worker serving bench/_loop_lag.py (the app and the probe)."""

    def _gateway_cmd(self, port: int, first: bool) -> list[str]:
        cmd = super()._gateway_cmd(port, first)
        return [("bench._loop_lag:application" if part == "campus_agent.asgi:application" else part) for part in cmd]


def _csrf(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


async def staff_client(base: str):
    """An httpx client logged into the admin as a superuser, over HTTP."""
    import httpx

    client = httpx.AsyncClient(base_url=base, timeout=120)
    page = await client.get("/admin/login/")
    answer = await client.post("/admin/login/", data={
        "username": "staff", "password": "bench-staff-password", "csrfmiddlewaretoken": _csrf(page.text),
        "next": "/admin/"})
    assert answer.status_code == 302, (answer.status_code, answer.text[:300])
    return client


async def loop_lags(http) -> list[float]:
    return (await http.get("/__bench/loop-lag")).json()


class Chats:
    """A steady stream of chats: one started every 1/rate seconds whatever the others do, each
    noted with when it started and its first-chunk latency."""

    def __init__(self, http, token: str, rate: float):
        self.http, self.token, self.rate = http, token, rate
        self.done: list[tuple[float, float]] = []  # (started, ms to the first chunk)
        self.failed = 0
        self.tasks: set[asyncio.Task] = set()

    async def _one(self, number: int) -> None:
        started = time.perf_counter()
        try:
            first, _ = await so.gateway_stream(self.http, self.token, f"第{number}个问题：转专业的条件是什么？")
        except Exception:  # noqa: BLE001 - counted and shown
            self.failed += 1
            return
        self.done.append((started, first))

    async def run(self, stop: asyncio.Event) -> None:
        number, next_at = 0, time.perf_counter()
        while not stop.is_set():
            task = asyncio.create_task(self._one(number))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            number += 1
            next_at += 1 / self.rate
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, next_at - time.perf_counter()))
            except TimeoutError:
                pass
        await asyncio.gather(*self.tasks)

    def between(self, start: float, end: float) -> list[float]:
        return [ms for started, ms in self.done if start <= started < end]


def _document_state(collection_slug: str) -> tuple[str, int] | None:
    from knowledge_app.models import KnowledgeDocument

    return (KnowledgeDocument.objects.filter(collection__slug=collection_slug)
            .values_list("status", "progress").first())


async def index_round(staff, data: bytes, slug: str, *, stack: IndexingStack, via: str) -> dict:
    """Indexes the PDF into the collection `slug` and follows it (reading the database every 20 ms
    from this process, not asking the worker) until it is ready; then a first search there, which
    builds the collection's keyword index in the worker. `via` "worker": uploaded through the
    admin, indexed on the worker's thread; "command": `manage.py knowledge_import`, a process of
    its own. Returns when each step ended (time.perf_counter()): parsed (progress 60: the child's
    answer read and its blocks made), ready (passages cut and stored), searched."""
    from knowledge_app.models import KnowledgeCollection, KnowledgeDocument

    times, command = {}, None
    if via == "worker":
        collection = await asyncio.to_thread(lambda: KnowledgeCollection.objects.get(slug=slug).pk)
        form = await staff.get("/admin/knowledge_app/knowledgedocument/upload/")
        times["started"] = time.perf_counter()
        answer = await staff.post("/admin/knowledge_app/knowledgedocument/upload/",
                                  data={"collection": str(collection), "csrfmiddlewaretoken": _csrf(form.text)},
                                  files={"files": (f"{slug}.pdf", data, "application/pdf")})
        assert answer.status_code == 302, (answer.status_code, answer.text[:300])
    else:
        path = Path(stack.tmp.name) / f"{slug}.pdf"
        path.write_bytes(data)
        times["started"] = time.perf_counter()
        command = await asyncio.create_subprocess_exec(
            PY, "manage.py", "knowledge_import", str(path), "--collection", slug, cwd=ROOT, env=stack.env,
            stdout=asyncio.subprocess.DEVNULL)
    times["uploaded"] = time.perf_counter()
    while True:
        state = await asyncio.to_thread(_document_state, slug)
        now = time.perf_counter()
        status, progress = state or ("waiting", 0)
        if progress >= 60 and "parsed" not in times:
            times["parsed"] = now
        if status in ("ready", "failed"):
            break
        if command is not None and command.returncode is not None:
            raise RuntimeError(f"knowledge_import ended ({command.returncode}) with the document {status}")
        await asyncio.sleep(0.02)
    times["ready"] = now
    times.setdefault("parsed", now)
    if command is not None:
        await command.wait()
    collection = await asyncio.to_thread(lambda: KnowledgeCollection.objects.get(slug=slug).pk)
    if status == "failed":
        error = await asyncio.to_thread(lambda: KnowledgeDocument.objects.get(collection_id=collection).error)
        raise RuntimeError(f"the document failed: {error}")
    searched = await staff.get(f"/admin/knowledge_app/knowledgecollection/{collection}/search/", params={"q": "转专业条件"})
    assert searched.status_code == 200 and "第" in searched.text, searched.status_code
    times["searched"] = time.perf_counter()
    return times


def _row(name: str, ttfc: list[float], lags: list[float]) -> str:
    if not ttfc or not lags:
        return f"  {name:34} {len(ttfc):6d}   (too few samples)"
    return (f"  {name:34} {len(ttfc):6d} {so._pct(ttfc, 50):9.1f} {so._pct(ttfc, 99):9.1f} {max(ttfc):9.1f}"
            f"   {so._pct(lags, 50):8.2f} {so._pct(lags, 99):8.2f} {max(lags):8.1f}")


WAYS = {"worker": "uploaded in the admin, indexed on the worker's thread",
        "command": "manage.py knowledge_import, a process of its own"}
PHASES = [  # (name, from, to) in a round's times
    ("{way}: upload → first search", "started", "searched"),
    ("  parse: child, its blocks", "started", "parsed"),
    ("  passages cut and stored", "parsed", "ready"),
    ("  first search: keyword index", "ready", "searched"),
]


async def live(stack: IndexingStack, data: bytes, pages: int, *, rate: float, idle: float, rounds: int,
               ways: list[str]) -> None:
    import httpx

    base = f"http://127.0.0.1:{stack.gw_port}"
    gc_log = stack.env["BENCH_GC_LOG"]
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=None)) as http:
        for _ in range(3):  # warm: imports, the database's first connections
            await so.gateway_stream(http, stack.token, "你好")
        staff = await staff_client(base)
        await staff.get("/admin/knowledge_app/knowledgedocument/upload/")
        await loop_lags(http)  # starts the probe

        chats, stop = Chats(http, stack.token, rate), asyncio.Event()
        running = asyncio.create_task(chats.run(stop))
        await asyncio.sleep(1)  # the stream of chats steady
        await loop_lags(http)
        await asyncio.to_thread(so._gc_collections, stack, gc_log)
        idle_start = time.perf_counter()
        await asyncio.sleep(idle)
        idle_end = time.perf_counter()
        collections = {"idle": await asyncio.to_thread(so._gc_collections, stack, gc_log)}
        done: dict[str, list[dict]] = {}
        for way in ways:  # the worker's thread first: its first search pays the worker's imports
            done[way] = []
            for number in range(rounds):
                slug = f"bench-{number}" if way == "worker" else f"bench-command-{number}"
                done[way].append(await index_round(staff, data, slug, stack=stack, via=way))
                await asyncio.sleep(1)  # the chats started during the round finish; not measured
            collections[way] = await asyncio.to_thread(so._gc_collections, stack, gc_log)
        lags = await loop_lags(http)
        stop.set()
        await running
        await staff.aclose()

    def lags_between(start: float, end: float) -> list[float]:
        return [ms for when, ms in lags if start <= when < end]

    idle_ttfc = chats.between(idle_start, idle_end)
    print(f"\nlive: one worker, {rate:g} chats/s; the {pages:,}-page PDF indexed {rounds}× each way: "
          + ", ".join(WAYS[way] for way in ways))
    print(f"  {'':36} {'chats':>6} {'TTFC p50':>9} {'TTFC p99':>9} {'TTFC max':>9}   "
          f"{'lag p50':>8} {'lag p99':>8} {'lag max':>8}  (ms)")
    print(_row("idle", idle_ttfc, lags_between(idle_start, idle_end)))
    for way, rounds_done in done.items():
        for name, start, end in PHASES:
            ttfc = [ms for r in rounds_done for ms in chats.between(r[start], r[end])]
            lag = [ms for r in rounds_done for ms in lags_between(r[start], r[end])]
            print(_row(name.format(way=way), ttfc, lag))
    for way, rounds_done in done.items():
        indexing_ttfc = [ms for r in rounds_done for ms in chats.between(r["started"], r["searched"])]
        if idle_ttfc and indexing_ttfc:
            print(f"  TTFC p99 indexing ({way}) / idle: "
                  f"{so._pct(indexing_ttfc, 99) / so._pct(idle_ttfc, 99):.2f}×")
    print(f"  failed chats: {chats.failed}")
    for phase, collected in collections.items():
        full = [ms for generation, ms in collected if generation == 2]
        print(f"  the worker's garbage collections, {phase}: {len(collected)}, the longest "
              f"{max((ms for _, ms in collected), default=0):.1f} ms; full ones {len(full)}"
              + (f" ({', '.join(f'{ms:.0f}' for ms in full)} ms)" if full else ""))
    for way, rounds_done in done.items():
        for number, r in enumerate(rounds_done, 1):
            ready = r["ready"] - r["started"]
            print(f"  {way} round {number}: started {r['uploaded'] - r['started']:.2f} s, parsed "
                  f"{r['parsed'] - r['started']:.2f} s, ready {ready:.2f} s ({pages / ready:.0f} pages/s), "
                  f"first search {r['searched'] - r['ready']:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=8.0, help="chats started per second")
    parser.add_argument("--idle", type=float, default=15.0, help="seconds of chats before indexing")
    parser.add_argument("--rounds", type=int, default=3, help="times the PDF is uploaded and indexed")
    parser.add_argument("--pace", type=float, default=0.02, help="the model's seconds per chunk")
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--ways", default="worker,command",
                        help="where the PDF is indexed, side by side: worker (the admin's upload), command")
    parser.add_argument("--database-url", default="",
                        help="a throw-away PostgreSQL database (dropped and made again); default a SQLite file")
    parser.add_argument("--cpu", type=int, default=None, help="the core of the one-core part (default: the last)")
    parser.add_argument("--skip-live", action="store_true")
    args = parser.parse_args()

    from bench._handbook_pdf import handbook_pdf

    started = time.perf_counter()
    data = handbook_pdf(args.pages)
    print(f"the PDF: {args.pages:,} pages, {len(data) / 1e6:.1f} MB ({time.perf_counter() - started:.1f} s to build or read)")

    stack = IndexingStack(pace=args.pace, chunks=args.chunks, database_url=args.database_url)
    # stream_overhead's launcher times the worker's garbage collections (its --gc-log)
    stack.env["BENCH_GC_LOG"] = f"{stack.tmp.name}/gc.json"
    stack.env["MEDIA_ROOT"] = f"{stack.tmp.name}/media"  # the uploads: not the source tree's media/
    os.environ.update({key: stack.env[key] for key in ("DATABASE_URL", "LOG_DIR", "MEDIA_ROOT")})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()

    everything = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {args.cpu if args.cpu is not None else max(everything)})
    one_core(data, args.pages)
    os.sched_setaffinity(0, everything)
    if args.skip_live:
        stack.tmp.cleanup()
        return
    stack.start()
    try:
        _staff_and_collections(args.rounds)
        asyncio.run(live(stack, data, args.pages, rate=args.rate, idle=args.idle, rounds=args.rounds,
                         ways=args.ways.split(",")))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
