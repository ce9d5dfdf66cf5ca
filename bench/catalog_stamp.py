"""Benchmark: the CPU of reading the catalog stamp, which every admission does (agents_app.catalog_cache),
through the ORM (`values_list(...).first()`, as before) against one statement on the cursor (now).

    .venv/bin/python bench/catalog_stamp.py [-n 3000] [--database-url postgres://…/<name>]

A throw-away SQLite file by default; a PostgreSQL URL names a database that is migrated and used
as it is. Both ways are timed in turns (6 rounds of `-n` reads, alternating which goes first) in
this process; the medians of the CPU per read are printed side by side with their ratio.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._django_setup import django_migrated  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3000, help="reads per round and way")
    parser.add_argument("--database-url", default="", help="default: a temporary SQLite file")
    args = parser.parse_args()
    tmp = django_migrated(database_url=args.database_url, prefix="bench-stamp-")  # noqa: F841 (kept for the run)
    from agents_app import catalog_cache
    from agents_app.models import CatalogStamp
    from campus_agent.base.stamps import STAMP_ID

    def orm() -> str | None:
        return CatalogStamp.objects.filter(pk=STAMP_ID).values_list("token", flat=True).first()

    cursor_read = catalog_cache._stamp_token
    cursor_read()  # the row exists from here on
    assert orm() == cursor_read()
    ways = {"ORM (before)": orm, "cursor (now)": cursor_read}
    cpu_us: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(6):
        for name in (list(ways) if round_ % 2 == 0 else list(reversed(ways))):
            started = time.process_time()
            for _ in range(args.n):
                ways[name]()
            cpu_us[name].append((time.process_time() - started) / args.n * 1e6)
    before, now = (statistics.median(cpu_us[name]) for name in ways)
    from django.db import connection

    vendor = connection.vendor
    print(f"catalog stamp read, {vendor}, µs of CPU per read (median of 6 rounds of {args.n}):")
    for name in ways:
        print(f"  {name:<14} {statistics.median(cpu_us[name]):7.1f}   rounds: "
              + " ".join(f"{value:.0f}" for value in cpu_us[name]))
    print(f"  now / before   {now / before:7.2f}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
