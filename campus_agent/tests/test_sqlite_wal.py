"""SQLite's write-ahead log is copied back by each worker's run supervisor, not in the commit of
whichever turn makes it long (campus_agent/base/sqlite_wal.py)."""
import pytest
from django.db import connection

from campus_agent.base.sqlite_wal import AUTOCHECKPOINT_PAGES, wal_checkpoint
from chat_app.models import Conversation

pytestmark = [pytest.mark.embedded, pytest.mark.skipif("connection.vendor != 'sqlite'")]


def _pragma(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_a_connection_copies_the_log_back_itself_only_past_the_backstop():
    assert _pragma("journal_mode") == "wal" and _pragma("wal_autocheckpoint") == AUTOCHECKPOINT_PAGES


def _rows(user, agent, count: int) -> None:
    for i in range(count):  # each in its own transaction: a commit, a few frames of the log
        Conversation.objects.create(user=user, agent=agent, title=f"对话{i}")


@pytest.mark.django_db(transaction=True)
def test_many_commits_grow_the_log_past_sqlites_default_without_copying_it_back(user, agent):
    wal_checkpoint()
    _rows(user, agent, 1)  # the log starts over
    _rows(user, agent, 300)
    logged, copied = wal_checkpoint()
    assert logged > 1_000 and copied == logged  # SQLite's default would have copied it back at 1,000


@pytest.mark.django_db(transaction=True)
async def test_the_supervisors_beat_copies_the_log_back(user, agent):
    from asgiref.sync import sync_to_async

    from chat_app.runs import supervisor

    await sync_to_async(wal_checkpoint)()
    await sync_to_async(_rows)(user, agent, 40)
    await supervisor._beat()
    # Copied back by the beat, so the next commit starts the log over from its beginning; without
    # it the log would hold all 41 commits' frames.
    await sync_to_async(_rows)(user, agent, 1)
    logged, _ = await sync_to_async(wal_checkpoint)()
    assert logged < 40
