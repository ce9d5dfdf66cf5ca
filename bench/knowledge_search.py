"""Benchmark: the knowledge base's keyword index at a campus's size (issue 45; knowledge_app.keyword_index).

    .venv/bin/python bench/knowledge_search.py [-n 100000] [--queries 1000] [--database-url postgres://…/<name>]

-n synthetic Chinese passages (≈ 450 characters each, in documents of 200 passages; words drawn
with a Zipf law from campus words and words of jieba's dictionary, and rare made-up terms — codes,
numbers — so the vocabulary grows with the corpus as a real one does) are written to a throw-away SQLite file (or the database named), then
a fresh child process — a worker that has searched nothing yet — measures:

- **Indexing**: the collection's index built, as a worker's first search builds it (read from the
  database, segmented, BM25), in pages per second of CPU, a page being 1,500 characters; and the
  same from rows already in memory (segmentation and BM25 alone). Goal ≥ 200 pages/s on one core.
- **Search**: `keyword_search` (the stamp read included) and `collection_search` (the passages read
  too), wall time per query over --queries questions of 2–6 words: p50 and p99. Goal p50 ≤ 20 ms,
  p99 ≤ 60 ms over 100,000 passages.
- **Check**: the first search after a write elsewhere (another collection), which checks the
  collection's content and keeps the index.
- **Memory**: the worker's resident memory before its first search and after it (the dictionary
  and the index; garbage collected), and its peak while building. Goal ≤ 200 MB added.
"""
import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAGE_CHARS = 1500
PASSAGES_PER_DOCUMENT = 200
CAMPUS_WORDS = """
学生 学院 学校 教务处 辅导员 专业 转专业 课程 学分 绩点 成绩 考试 补考 重修 缓考 毕业 学位 论文 答辩 导师 研究生 本科生
奖学金 助学金 评定 申请 审核 批准 公示 名额 条件 标准 材料 期限 学期 学年 第一学年 春季 秋季 寒假 暑假 请假 考勤 旷课
迟到 早退 处分 警告 记过 留校察看 开除 申诉 宿舍 熄灯 卫生 检查 电器 安全 消防 门禁 访客 图书馆 借阅 续借 逾期 罚款
校园卡 食堂 医务室 医保 心理 咨询 体育 体测 军训 社团 志愿 实习 就业 招聘 档案 户口 户籍 证明 成绩单 学籍 休学 复学 退学
保留 入学资格 注册 缴费 学费 住宿费 减免 贷款 勤工助学 岗位 报酬 工作日 办公室 地点 电话 邮箱 网站 系统 登录 密码 选课
退课 教室 实验室 设备 预约 开放时间 周一 周五 上午 下午 晚上 规定 办法 细则 通知 第一条 第二条 第三条 第四章 附则 解释
负责 执行 之日起 施行 应当 可以 不得 必须 按照 根据 经过 报送 提交 填写 表格 签字 盖章 原件 复印件 身份证 学生证 照片
""".split()
CHARS = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
PUNCTUATION = "，，，、。；："


def _vocabulary(rng: random.Random) -> list[str]:
    """Campus words and the two-character words of jieba's dictionary among CHARS (≈ 9,700), in a
    random order (the Zipf law's ranks): text the segmenter cuts as it cuts real text."""
    import rjieba

    words = CAMPUS_WORDS + [a + b for a in CHARS for b in CHARS if rjieba.has_word(a + b)]
    rng.shuffle(words)
    return words


def _rare(rng: random.Random) -> str:
    # What makes a real vocabulary grow with the corpus: course codes, room numbers, names.
    return rng.choice(("COURSE", "LAB", "ROOM", "")) + str(rng.randint(100, 99999)) + "".join(rng.choices(CHARS, k=2))


def _zipf_picker(rng: random.Random, words: list[str]):
    weights = [1 / (rank + 1) for rank in range(len(words))]
    cumulative, total = [], 0.0
    for weight in weights:
        total += weight
        cumulative.append(total)

    def pick(k: int) -> list[str]:
        return rng.choices(words, cum_weights=cumulative, k=k)

    return pick


def _passages(n: int, seed: int = 45):
    rng = random.Random(seed)
    pick = _zipf_picker(rng, _vocabulary(rng))
    for i in range(n):
        sentences = []
        length, goal = 0, rng.randint(300, 600)
        while length < goal:
            sentence = "".join(pick(rng.randint(4, 12)))
            if rng.random() < 0.3:
                sentence += _rare(rng)
            sentences.append(sentence + rng.choice(PUNCTUATION))
            length += len(sentences[-1])
        heading = f"第{i // 20 % 12 + 1}章 " + "".join(pick(2)) + f" › 第{i % 20 + 1}条"
        yield heading, "".join(sentences)


def _queries(count: int, seed: int = 46) -> list[str]:
    rng = random.Random(seed)
    pick = _zipf_picker(rng, _vocabulary(rng))
    tails = ["需要什么条件？", "怎么办理？", "在哪里？", "有什么规定？", ""]
    return ["".join(pick(rng.randint(2, 6))) + rng.choice(tails) for _ in range(count)]


def _fill(n: int) -> int:
    from knowledge_app.models import KnowledgeCollection, KnowledgeDocument, KnowledgePassage

    collection = KnowledgeCollection.objects.create(slug="bench", name="基准", description="基准")
    other = KnowledgeCollection.objects.create(slug="other", name="其他", description="其他")
    KnowledgeDocument.objects.create(collection=other, title="其他", file="o.pdf", content_hash="o", status="ready")
    batch, document = [], None
    for i, (heading, text) in enumerate(_passages(n)):
        if i % PASSAGES_PER_DOCUMENT == 0:
            document = KnowledgeDocument.objects.create(
                collection=collection, title=f"规定汇编第{i // PASSAGES_PER_DOCUMENT + 1}册", file=f"{i}.pdf",
                content_hash=f"{i:064d}", status="ready",
            )
        batch.append(KnowledgePassage(document=document, seq=i % PASSAGES_PER_DOCUMENT, heading=heading, text=text))
        if len(batch) == 5000:
            KnowledgePassage.objects.bulk_create(batch)
            batch = []
    KnowledgePassage.objects.bulk_create(batch)
    return collection.pk


def _rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _measure(collection_id: int, queries: int) -> dict:
    """The worker's side, in a fresh process."""
    from django.db import connection

    from knowledge_app.keyword_index import KeywordIndex, collection_rows, keyword_index, keyword_search
    from knowledge_app.models import KnowledgeCollection, KnowledgeDocument
    from knowledge_app.search import collection_search

    collection = KnowledgeCollection.objects.get(pk=collection_id)
    connection.ensure_connection()
    gc.collect()
    start = _rss_mb()
    KeywordIndex([(1, "学生手册", "转专业", "每学年受理一次。")]).search("转专业")  # the dictionary, bm25s
    gc.collect()
    before, peak_before = _rss_mb(), _rss_mb("VmHWM")
    started_cpu, started = time.process_time(), time.perf_counter()
    index = keyword_index(collection)  # the first search's build: read, segmented, BM25
    build_cpu, build_wall = time.process_time() - started_cpu, time.perf_counter() - started
    gc.collect()
    after, peak = _rss_mb(), _rss_mb("VmHWM")
    characters = index.fingerprint.characters
    rows = list(collection_rows(collection_id))
    started_cpu = time.process_time()
    KeywordIndex(rows)
    memory_cpu = time.process_time() - started_cpu
    del rows
    gc.collect()

    asked = _queries(queries)
    for query in asked[:20]:
        keyword_search(collection, query)
    keyword_ms, search_ms, found = [], [], 0
    for query in asked:
        started = time.perf_counter()
        hits = keyword_search(collection, query)
        keyword_ms.append((time.perf_counter() - started) * 1000)
        found += bool(hits)
    for query in asked:
        started = time.perf_counter()
        collection_search(collection, query)
        search_ms.append((time.perf_counter() - started) * 1000)
    assert keyword_index(collection) is index  # nothing was built again
    KnowledgeDocument.objects.filter(collection__slug="other").update(progress=50)  # a write elsewhere
    started = time.perf_counter()
    keyword_search(collection, asked[0])
    check_ms = (time.perf_counter() - started) * 1000
    assert keyword_index(collection) is index
    return {
        "vendor": connection.vendor, "passages": len(index), "characters": characters, "terms": len(index.vocab),
        "build_cpu": build_cpu, "build_wall": build_wall, "memory_cpu": memory_cpu,
        "rss_start": start, "rss_before": before, "rss_after": after, "peak_added": peak - max(before, peak_before) if peak > before else 0,
        "keyword_ms": keyword_ms, "search_ms": search_ms, "found": found, "check_ms": check_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="passages")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--database-url", default="", help="default: a temporary SQLite file")
    parser.add_argument("--measure", type=int, default=0, help=argparse.SUPPRESS)  # the child: collection id
    args = parser.parse_args()
    from bench._django_setup import django_migrated

    if args.measure:
        tmp = django_migrated(database_url=args.database_url, prefix="bench-knowledge-child-")  # noqa: F841
        print(json.dumps(_measure(args.measure, args.queries)))
        return

    tmp = django_migrated(database_url=args.database_url, prefix="bench-knowledge-")
    from django.conf import settings

    started = time.perf_counter()
    collection_id = _fill(args.n)
    print(f"{args.n} passages written in {time.perf_counter() - started:.1f} s")
    database_url = args.database_url or f"sqlite:///{settings.DATABASES['default']['NAME']}"
    child = subprocess.run(
        [sys.executable, __file__, "--measure", str(collection_id), "--queries", str(args.queries),
         "--database-url", database_url],
        capture_output=True, text=True, check=False,
    )
    if child.returncode:
        sys.exit(child.stderr)
    m = json.loads(child.stdout.strip().splitlines()[-1])
    pages = m["characters"] / PAGE_CHARS
    print(f"keyword index, {m['vendor']}: {m['passages']} passages, {m['characters'] / 1e6:.1f} M characters "
          f"({pages:.0f} pages of {PAGE_CHARS}), {m['terms']} terms")
    print(f"indexing (first search, from the database): {m['build_cpu']:.1f} s CPU, {m['build_wall']:.1f} s wall, "
          f"{pages / m['build_cpu']:.0f} pages/s of CPU")
    print(f"indexing (rows in memory): {pages / m['memory_cpu']:.0f} pages/s of CPU")
    for name, samples in (("keyword_search", m["keyword_ms"]), ("collection_search", m["search_ms"])):
        print(f"{name}: p50 {_percentile(samples, 0.5):.2f} ms, p99 {_percentile(samples, 0.99):.2f} ms, "
              f"mean {statistics.mean(samples):.2f} ms over {len(samples)} queries")
    print(f"queries that found something: {m['found']} of {len(m['keyword_ms'])}")
    print(f"first search after a write elsewhere (content checked, index kept): {m['check_ms']:.1f} ms")
    print(f"worker memory: {m['rss_start']:.0f} MB before its first search, {m['rss_after']:.0f} MB after: "
          f"added {m['rss_after'] - m['rss_start']:.0f} MB, of which the dictionary and libraries "
          f"{m['rss_before'] - m['rss_start']:.0f} MB and the index {m['rss_after'] - m['rss_before']:.0f} MB "
          f"(peak while building +{m['peak_added']:.0f} MB)")
    tmp.cleanup()


if __name__ == "__main__":
    main()
