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

from django.db import models

from campus_agent.base.stamps import stamp_token as base_stamp_token
from campus_agent.base.stamps import stamp_triggers_install


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
    return base_stamp_token(KnowledgeStamp)


def stamp_tables() -> list[str]:
    from knowledge_app.models import KnowledgeDocument, KnowledgePassage

    return [KnowledgeDocument._meta.db_table, KnowledgePassage._meta.db_table]


def knowledge_triggers_install(*, using: str = "default") -> None:
    """Creates the triggers that change the stamp's token, where they are missing (idempotent)."""
    stamp_triggers_install(using=using, model=KnowledgeStamp, tables=stamp_tables(), function="knowledge_stamp_touch",
                           sqlite_name="{table}_stamp_{event}", postgres_name="{table}_stamp")
