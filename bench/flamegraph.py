"""A flame graph (SVG) from py-spy's raw collapsed stacks (`py-spy record --format raw`).

    .venv/bin/python bench/flamegraph.py profile.txt docs/benchmarks/turn-sqlite.svg --title "…"

py-spy writes SVG itself (`--format flamegraph`), but the raw stacks are what one reads with a
script; this draws the same file, with start-up (module imports) left out and paths shortened.
Each box is a function; its width is the share of samples it was on the stack; hover for figures.
"""
import argparse
import html
import re
from collections import defaultdict

WIDTH, ROW = 1600, 17
_SITE = re.compile(r"/[^ ]*?/site-packages/|/[^ ]*?/lib/python3\.\d+/|/work/[^ ]*?/(?=[a-z_]+/)")


def _frame(text: str) -> str:
    return re.sub(r":\d+\)", ")", _SITE.sub("", text))


def stacks(path: str):
    """(frames, samples) per line of py-spy's raw output, each stack starting at the callback (a
    task step) or the work item (a database call) that the event loop or a thread pool ran: their
    own frames are the same in every stack. A stack with neither (the loop waiting, start-up)
    is kept whole."""
    for line in open(path, encoding="utf-8"):
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        starts = [i for i, frame in enumerate(frames) if frame.startswith(("Handle._run ", "_WorkItem.run "))]
        yield (frames[starts[0]:] if starts else frames), int(count)


def _tree(path: str, skip: str):
    root = {"n": 0, "kids": defaultdict(lambda: None)}
    for frames, count in stacks(path):
        if skip and any(skip in frame for frame in frames):
            continue
        node = root
        node["n"] += count
        for frame in frames:
            name = _frame(frame)
            kid = node["kids"][name]
            if kid is None:
                kid = node["kids"][name] = {"n": 0, "kids": defaultdict(lambda: None)}
            kid["n"] += count
            node = kid
    return root


def _depth(node) -> int:
    return 1 + max((_depth(k) for k in node["kids"].values()), default=0)


def _colour(name: str) -> str:
    if "chat_app/" in name or "agents_app/" in name or "campus_agent/" in name:
        return "rgb(240,170,60)"  # ours
    if "django/" in name:
        return "rgb(110,180,110)"
    if "asyncio/" in name or "threading" in name or "concurrent/" in name:
        return "rgb(170,170,200)"
    return "rgb(230,110,80)"


def render(root, title: str) -> str:
    depth = _depth(root)
    height = (depth + 2) * ROW + 30
    total = max(root["n"], 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="monospace" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/><text x="8" y="18" font-size="14">{html.escape(title)} '
           f'({total} samples; width = share of samples; orange: this project, green: Django, grey: asyncio/threads)</text>']

    def draw(node, name, x, level):
        w = node["n"] / total * WIDTH
        if w < 0.5:
            return
        y = height - (level + 1) * ROW
        tip = f"{name} — {node['n']} samples, {100 * node['n'] / total:.1f}%"
        out.append(f'<g><title>{html.escape(tip)}</title><rect x="{x:.1f}" y="{y}" width="{max(w - 0.4, 0.1):.1f}" '
                   f'height="{ROW - 1}" fill="{_colour(name)}" rx="2"/>')
        chars = int(w / 6.6)
        if chars >= 4:
            label = name if len(name) <= chars else name[: chars - 1] + "…"
            out.append(f'<text x="{x + 3:.1f}" y="{y + ROW - 5}">{html.escape(label)}</text>')
        out.append("</g>")
        for kid_name, kid in sorted(node["kids"].items(), key=lambda item: -item[1]["n"]):
            draw(kid, kid_name, x, level + 1)
            x += kid["n"] / total * WIDTH

    x = 0.0
    for name, kid in sorted(root["kids"].items(), key=lambda item: -item[1]["n"]):
        draw(kid, name, x, 0)
        x += kid["n"] / total * WIDTH
    out.append("</svg>")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw")
    parser.add_argument("svg")
    parser.add_argument("--title", default="")
    parser.add_argument("--skip", default="import_from_string", help="leave out stacks through this frame")
    args = parser.parse_args()
    with open(args.svg, "w", encoding="utf-8") as out:
        out.write(render(_tree(args.raw, args.skip), args.title or args.raw))


if __name__ == "__main__":
    main()
