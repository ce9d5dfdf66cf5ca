"""SQLite's write-ahead log copied back into the database file off the answering path
(docs/design.md#the-chat-stream, "What is stored").

In WAL mode SQLite copies the log back into the database file (a checkpoint) in the commit that
makes the log longer than `wal_autocheckpoint` pages: that commit waits for the copy and its
fsyncs. With the default of 1,000 pages that was every 30th turn, whose admission took 8–12 ms
longer (bench/turn_timeline.py, turns one at a time): the one stall left in a first chunk.

So a serving worker checkpoints on its own, every beat of the run supervisor, on the beat's
thread, PASSIVE: it copies what no reader still needs and waits for nobody. The automatic
checkpoint stays as a backstop (AUTOCHECKPOINT_PAGES, set with the connection's other pragmas in
settings.py) for what has no supervisor (manage.py commands) and for a burst that writes more
than that between two beats.
"""
from django.db import connection

AUTOCHECKPOINT_PAGES = 10_000  # ≈ 40 MB of 4 KiB pages (SQLite's default: 1,000)


def in_use() -> bool:
    """Whether the database is SQLite (read from the connection's class: no query, any thread)."""
    return connection.vendor == "sqlite"


def wal_checkpoint() -> tuple[int, int] | None:
    """A passive checkpoint of this thread's connection: (frames in the log, frames copied into
    the database file); None on a database other than SQLite, or one not in WAL mode."""
    if not in_use():
        return None
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
        _busy, logged, copied = cursor.fetchone()
    return None if logged < 0 else (logged, copied)  # -1, -1: not in WAL mode (a database in memory)
