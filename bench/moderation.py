"""Benchmark: the moderation word lists at the size a campus imports (issue 44).

    .venv/bin/python bench/moderation.py [--words 100000] [--chunks 2000] [--chunk-chars 4]

- **Build**: the automaton of --words random words (2–8 Chinese characters, as a purchased list
  is), as a worker builds it after a change of the lists (safety_app.matcher.Matcher). Goal ≤ 2 s.
- **Check per chunk**: a streamed answer of --chunks deltas of --chunk-chars characters fed to
  the answer's screen (safety_app.screen.StreamScreen), CPU per chunk, with the list and with
  none (the pass-through) side by side. Goal ≤ 0.2 ms per chunk added.
- **Hold-back**: how many characters of the answer arrive before the first is shown, against
  what the hold-back needs (the longest word less one).

The CPU of a whole turn with and without the lists is measured on the stream benchmark:
`bench/stream_overhead.py --moderation off,100000 --saturate 20` (docs/benchmarks.md).
"""
import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from safety_app.matcher import Entry, Matcher  # noqa: E402
from safety_app.screen import StreamScreen  # noqa: E402

# The characters the words are made of: common Chinese, but not those of the answer below.
ANSWER = "一食堂今天中午供应红烧肉、番茄炒蛋和清炒时蔬，晚上营业到九点，二食堂周末照常开放。"
WORD_CHARS = [chr(c) for c in range(0x4E00, 0x9FA6) if chr(c) not in ANSWER]


def word_list(count: int, seed: int = 44) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choices(WORD_CHARS, k=rng.randint(2, 8))))
    return sorted(words)


def _cpu_per_chunk_ms(matcher: Matcher, pieces: list[str], rounds: int = 5) -> float:
    samples = []
    for _ in range(rounds):
        screen = StreamScreen(matcher)
        started = time.process_time()
        for piece in pieces:
            screen.feed(piece)
        screen.end()
        samples.append((time.process_time() - started) * 1000 / len(pieces))
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=2000, help="deltas of the streamed answer")
    parser.add_argument("--chunk-chars", type=int, default=4, help="characters per delta (a token or two)")
    args = parser.parse_args()

    words = word_list(args.words)
    entry = Entry(category="bench", action="block")
    builds = []
    for _ in range(3):
        started = time.process_time()  # CPU: the machine's other work does not count
        matcher = Matcher(dict.fromkeys(words, entry))
        builds.append(time.process_time() - started)
    print(f"build: {args.words} words ({matcher.size} keys, longest {matcher.longest}): "
          f"{statistics.median(builds):.2f} s CPU, median of 3 (goal ≤ 2 s)")

    text = (ANSWER * (args.chunks * args.chunk_chars // len(ANSWER) + 1))[: args.chunks * args.chunk_chars]
    pieces = [text[i : i + args.chunk_chars] for i in range(0, len(text), args.chunk_chars)]
    none = _cpu_per_chunk_ms(Matcher({}), pieces)
    listed = _cpu_per_chunk_ms(matcher, pieces)
    print(f"check per chunk ({len(pieces)} chunks × {args.chunk_chars} chars): "
          f"lists {listed:.4f} ms, none {none:.4f} ms, added {listed - none:.4f} ms (goal ≤ 0.2 ms)")

    screen, received = StreamScreen(matcher), 0
    for piece in pieces:
        received += len(piece)
        if screen.feed(piece).shown:
            break
    print(f"hold-back: the first text shown after {received} characters received "
          f"(the longest word less one: {matcher.longest - 1}, plus the rest of its chunk)")
    assert screen.blocked is None, "a bench word matched the answer"


if __name__ == "__main__":
    main()
