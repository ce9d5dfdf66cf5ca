"""The project server's reset between tests (testkit.fixtures.base.project_server_reset)
ends what a test left running before its tables are flushed: also a database call whose task it
cancelled, which goes on in its thread (the PostgreSQL pass once hung on one)."""
import asyncio
import threading
import time

import pytest

from campus_agent.base.asyncdb import db_call
from testkit.fixtures.base import project_server_reset

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_reset_waits_for_the_database_call_of_a_task_it_cancelled(live_asgi_session):
    started, finished = threading.Event(), threading.Event()

    def write() -> None:  # a run's storing call, still going when the test ends
        started.set()
        time.sleep(0.5)
        finished.set()

    async def start() -> None:
        asyncio.ensure_future(db_call(write))

    live_asgi_session.call(start)
    assert started.wait(10)
    project_server_reset(live_asgi_session)
    assert finished.is_set()
