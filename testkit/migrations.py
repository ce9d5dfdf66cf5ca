"""Moving the test database between migrations, for the tests of a data migration: migrate back
to before it, make rows as they were then (the historical models `migrate_to` returns), migrate
forward, read them, and always end at the newest state for the tests that follow."""
from django.core.management.sql import emit_post_migrate_signal
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader


def migrate_to(targets: list[tuple[str, str]]):
    """Migrates to `targets` ((app, migration) each) and returns the apps of that state."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_to_newest() -> None:
    """Back to the newest state, as `migrate` leaves it: post_migrate's handlers install again the
    triggers SQLite dropped with the tables a migration rebuilt (the catalog's and the word lists'
    stamps); the suite's flush sends no post_migrate (suite_settings), so nothing else would."""
    migrate_to(MigrationExecutor(connection).loader.graph.leaf_nodes())
    emit_post_migrate_signal(verbosity=0, interactive=False, db=connection.alias)


def newest(app: str) -> tuple[str, str]:
    """The app's newest migration: a target that keeps it where it is while another app moves
    (its rows then have every column the database has)."""
    return MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes(app)[0]
