"""Django for a benchmark script: its database (a temporary SQLite file unless one is given)
migrated, its log quiet and written to the temporary folder. Returns the folder, which the caller
keeps alive for the run."""
import os
import tempfile


def django_migrated(*, database_url: str, prefix: str) -> tempfile.TemporaryDirectory:
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{tmp.name}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["LOG_DIR"] = f"{tmp.name}/logs"

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return tmp
