"""A stamp: one row whose token database triggers replace at every write to some tables, so that
each worker may keep what it built from those tables (the agents' catalog, the word lists'
automata, the knowledge base's keyword indexes) while the token is the one it built it with, and
build it again, once, when any process changed them by any means (admin, a command, `update()`,
SQL in a console). Read in one statement per check; the triggers are installed after every
`migrate` (SQLite drops a table's triggers when a migration rebuilds the table). A database other
than SQLite and PostgreSQL has no triggers: its users build at every check.

The stamp's model is a row with a `token` CharField (32), kept at primary key STAMP_ID.
"""

import uuid

from django.db import connection, connections

STAMP_ID = 1
TRIGGER_VENDORS = frozenset({"sqlite", "postgresql"})

_SQLITE_TRIGGER = (
    'CREATE TRIGGER IF NOT EXISTS "{name}" AFTER {event} ON "{table}" '
    'BEGIN UPDATE "{stamp}" SET token = lower(hex(randomblob(16))); END'
)
_POSTGRES_FUNCTION = (
    "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN UPDATE \"{stamp}\" SET token = replace(gen_random_uuid()::text, '-', ''); RETURN NULL; END $$"
)
# Per statement, TRUNCATE included: one update of the stamp however many rows a statement writes.
_POSTGRES_TRIGGER = (
    'CREATE OR REPLACE TRIGGER "{name}" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "{table}" '
    "FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
)


def stamps_kept() -> bool:
    """Whether this database keeps stamps (has the triggers): else read what they guard every time."""
    return connection.vendor in TRIGGER_VENDORS


def stamp_token(model) -> str:
    """The stamp's token now: one statement on the cursor (every turn or search reads it; the
    ORM's queryset and `first()` cost ≈ 5× the query, docs/log.md). A missing row (a new or flushed
    database) is made with a fresh token, never one seen before."""
    meta, quote = model._meta, connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {quote(meta.get_field('token').column)} FROM {quote(meta.db_table)} WHERE {quote(meta.pk.column)} = %s",
            [STAMP_ID],
        )
        row = cursor.fetchone()
    if row is None or row[0] is None:
        return model.objects.get_or_create(pk=STAMP_ID, defaults={"token": uuid.uuid4().hex})[0].token
    return row[0]


def stamp_triggers_install(*, using: str, model, tables: list[str], function: str, sqlite_name: str,
                           postgres_name: str) -> None:
    """Creates the triggers that change `model`'s token at every write to `tables` (those that
    exist), where they are missing (idempotent). `function`: the PostgreSQL function's name;
    `sqlite_name` / `postgres_name`: the triggers' names, formatted with `table` (and `event`)."""
    db = connections[using]
    if db.vendor not in TRIGGER_VENDORS:
        return
    stamp = model._meta.db_table
    present = set(db.introspection.table_names())
    tables = [table for table in tables if table in present]
    if stamp not in present or not tables:
        return  # migrated only part of the way: the next migrate installs them
    with db.cursor() as cursor:
        if db.vendor == "sqlite":
            for table in tables:
                for event in ("INSERT", "UPDATE", "DELETE"):
                    cursor.execute(_SQLITE_TRIGGER.format(name=sqlite_name.format(table=table, event=event.lower()),
                                                          event=event, table=table, stamp=stamp))
        else:
            cursor.execute(_POSTGRES_FUNCTION.format(function=function, stamp=stamp))
            for table in tables:
                cursor.execute(_POSTGRES_TRIGGER.format(name=postgres_name.format(table=table), table=table,
                                                        function=function))
