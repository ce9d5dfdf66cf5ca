"""The knowledge base's stamp: one row whose token a database trigger replaces at every write to
the documents' and passages' tables, as for the agents' catalog (agents_app/catalog_cache.py) and
the word lists (safety_app/lists_cache.py). A worker keeps its keyword indexes
(knowledge_app.keyword_index) while the token is the one it checked them with.

A trigger, not a Django signal: a write by any process and by any means (admin, the import
command, the indexing job, `QuerySet.update()`, SQL in a console) counts. The triggers are
(re)installed after every `migrate` (knowledge_app.apps): SQLite drops a table's triggers when a
migration rebuilds the table. A database other than SQLite and PostgreSQL has no triggers: its
searches check the collection's content at every search instead (knowledge_app.keyword_index).

The model lives here rather than in models.py (its module is imported by KnowledgeAppConfig.ready)
so that it stays beside the code that reads it; its table is made by migration 0002.
"""

import uuid

from django.db import connection, connections, models

STAMP_ID = 1
TRIGGER_VENDORS = frozenset({"sqlite", "postgresql"})


class KnowledgeStamp(models.Model):
    """See the module's docstring."""

    token = models.CharField("版本标记", max_length=32)

    class Meta:
        app_label = "knowledge_app"
        verbose_name = verbose_name_plural = "知识库版本标记"

    def __str__(self) -> str:
        return self.token


def stamp_token() -> str:
    """The stamp's token now (one statement on the cursor: every search reads it)."""
    meta, quote = KnowledgeStamp._meta, connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {quote('token')} FROM {quote(meta.db_table)} WHERE {quote(meta.pk.column)} = %s", [STAMP_ID]
        )
        row = cursor.fetchone()
    if row is None:  # a new or flushed database: a fresh token, never one seen before
        return KnowledgeStamp.objects.get_or_create(pk=STAMP_ID, defaults={"token": uuid.uuid4().hex})[0].token
    return row[0]


def stamp_tables() -> list[str]:
    from knowledge_app.models import KnowledgeDocument, KnowledgePassage

    return [KnowledgeDocument._meta.db_table, KnowledgePassage._meta.db_table]


_SQLITE_TRIGGER = (
    'CREATE TRIGGER IF NOT EXISTS "{name}" AFTER {event} ON "{table}" '
    'BEGIN UPDATE "{stamp}" SET token = lower(hex(randomblob(16))); END'
)
_POSTGRES_FUNCTION = (
    "CREATE OR REPLACE FUNCTION knowledge_stamp_touch() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN UPDATE \"{stamp}\" SET token = replace(gen_random_uuid()::text, '-', ''); RETURN NULL; END $$"
)
# Per statement, TRUNCATE included: one update of the stamp however many passages a statement writes.
_POSTGRES_TRIGGER = (
    'CREATE OR REPLACE TRIGGER "{name}" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "{table}" '
    "FOR EACH STATEMENT EXECUTE FUNCTION knowledge_stamp_touch()"
)


def knowledge_triggers_install(*, using: str = "default") -> None:
    """Creates the triggers that change the stamp's token, where they are missing (idempotent)."""
    db = connections[using]
    if db.vendor not in TRIGGER_VENDORS:
        return
    stamp = KnowledgeStamp._meta.db_table
    present = set(db.introspection.table_names())
    tables = [table for table in stamp_tables() if table in present]
    if stamp not in present or not tables:
        return  # migrated only part of the way: the next migrate installs them
    with db.cursor() as cursor:
        if db.vendor == "sqlite":
            for table in tables:
                for event in ("INSERT", "UPDATE", "DELETE"):
                    cursor.execute(_SQLITE_TRIGGER.format(name=f"{table}_stamp_{event.lower()}", event=event,
                                                          table=table, stamp=stamp))
        else:
            cursor.execute(_POSTGRES_FUNCTION.format(stamp=stamp))
            for table in tables:
                cursor.execute(_POSTGRES_TRIGGER.format(name=f"{table}_stamp", table=table))
