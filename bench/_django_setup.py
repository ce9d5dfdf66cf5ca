"""Django for a benchmark script: its database (a temporary SQLite file unless one is given)
migrated, its log quiet and written to the temporary folder; and the migrated SQLite file every
script starts from, made once per set of migrations.

Migrating a new SQLite file from nothing takes ≈ 3.5 CPU-seconds beyond Django's start-up
(66 migrations, several of which rebuild tables); the bench scripts did it once or twice each,
which was a third of their smoke runs' CPU in the suite (docs/testing.md). The file migrated once
is kept under the bench cache (`~/.cache/campus-agent-bench/`, `$XDG_CACHE_HOME` if set), named
after a digest of the tree's migration files and Django's version, and copied for each run; the
script's own `migrate` then finds nothing to do (and would apply what a stale copy lacked).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench_cache(environ: dict | None = None) -> Path:
    """Where the bench scripts keep what outlives a run: the migrated SQLite file, LiteLLM's virtualenv."""
    environ = os.environ if environ is None else environ
    cache = Path(environ.get("XDG_CACHE_HOME") or Path(environ.get("HOME", "~")).expanduser() / ".cache")
    return cache / "campus-agent-bench"


def _migrations_digest(root: Path) -> str:
    import django

    digest = hashlib.sha256(django.__version__.encode())
    for path in sorted(root.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def sqlite_migrated(path: str | Path, *, root: Path = ROOT) -> None:
    """Makes `path` (a file that does not exist yet) a SQLite database with the tree's every
    migration applied: a copy of the cached one, migrated first if there is none (in a child
    with none of the project's variables, so what a data migration reads is the defaults)."""
    if Path(path).exists():  # a file the caller named: never overwritten
        return
    template = bench_cache() / f"sqlite-migrated-{_migrations_digest(root)}.sqlite3"
    if not template.exists():
        template.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="bench-template-", dir=template.parent) as tmp:
            fresh = Path(tmp) / "migrated.sqlite3"
            env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
            env.update(DJANGO_SETTINGS_MODULE="campus_agent.settings", DATABASE_URL=f"sqlite:///{fresh}",
                       LOG_DIR=f"{tmp}/logs", LOG_LEVEL="WARNING")
            subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=root, env=env, check=True)
            os.replace(fresh, template)  # whole or not at all: runs at once each make one, the last kept
    shutil.copyfile(template, path)


def django_migrated(*, database_url: str, prefix: str) -> tempfile.TemporaryDirectory:
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    if not database_url:
        sqlite_migrated(f"{tmp.name}/bench.sqlite3")
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{tmp.name}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["LOG_DIR"] = f"{tmp.name}/logs"

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return tmp
