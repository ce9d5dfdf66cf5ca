"""The database side of runs (sync; the async path calls these through chat_app.asyncdb)."""
import uuid
from datetime import timedelta

from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone
from loguru import logger

from campus_agent.errors import GENERAL
from chat_app.models import Message, Run
from chat_app.services.recording import RowSpec
from chat_app.services.turns import turn_store

WORKER_LOST_MESSAGE = "服务进程意外中断，回答未完成。"
_CHECKPOINT_SQL = "UPDATE {table} SET partial_text = %s WHERE id = %s"


def run_get(*, user, run_id) -> Run | None:
    """The caller's own run, or None (another user's run is indistinguishable from a missing one)."""
    try:
        run_id = uuid.UUID(str(run_id))
    except ValueError:
        return None
    return Run.objects.filter(id=run_id, user=user).first()


def run_refresh(*, run_id) -> Run | None:
    return Run.objects.filter(id=run_id).first()


def run_rows_store(*, run: Run, rows: list[RowSpec], unsaved_text: str | None = None) -> None:
    """Rows of the run (a finished tool round while it goes on; its end), in one transaction.

    With `unsaved_text`, the run's checkpoint is replaced in the same transaction: the text it
    held may have become part of the stored round, and a reaper must never store it twice.
    """
    with transaction.atomic():
        turn_store(
            conversation_id=run.conversation_id,
            final_message_id=run.message_id,
            rows=rows,
            agent_name=run.agent_name,
            request_id=run.request_id,
        )
        if unsaved_text is not None:
            Run.objects.filter(id=run.id).update(partial_text=unsaved_text)


def run_finish(*, run: Run, rows: list[RowSpec], interrupted: bool) -> bool:
    """Ends the run and stores what is left of its reply, in one transaction. False when the run
    had already been ended (by the reaper, which took its worker for dead): nothing is written."""
    status = Run.Status.INTERRUPTED if interrupted else Run.Status.FINISHED
    with transaction.atomic():
        ended = Run.objects.filter(id=run.id, status__in=Run.ACTIVE).update(
            status=status, ended_at=timezone.now(), partial_text=""
        )
        if not ended:
            return False
        run_rows_store(run=run, rows=rows)
    return True


def runs_heartbeat(*, worker: str, checkpoints: dict[uuid.UUID, str]) -> None:
    """Refreshes the heartbeat of every active run of `worker` and saves the unsaved reply text
    of those that changed: two statements whatever the number of runs."""
    now = timezone.now()
    with transaction.atomic():
        Run.objects.filter(worker=worker, status__in=Run.ACTIVE).update(heartbeat_at=now)
        if checkpoints:
            # One prepared UPDATE run for every row (executemany): bulk_update's CASE over
            # hundreds of rows cost a fifth of a core at 1,000 held streams (bench/stream_overhead.py).
            id_field = Run._meta.pk
            rows = [(text, id_field.get_db_prep_value(run_id, connection)) for run_id, text in checkpoints.items()]
            with connection.cursor() as cursor:
                cursor.executemany(_CHECKPOINT_SQL.format(table=connection.ops.quote_name(Run._meta.db_table)), rows)


def stream_slot_key_free(key: str) -> None:
    if key:
        cache.delete(key)


def runs_reap(*, stale_sec: float) -> list[Run]:
    """Finishes as interrupted every active run whose worker stopped heart-beating: the reply
    text it had checkpointed becomes the stored reply, its slot is given back. Each run is
    claimed by a conditional update, so two workers reaping at once never store it twice."""
    cutoff = timezone.now() - timedelta(seconds=stale_sec)
    reaped = []
    # A run that waits for approval belongs to no worker (chat_app.runs.approvals): not reaped.
    for run in Run.objects.filter(status=Run.Status.RUNNING, heartbeat_at__lt=cutoff):
        with transaction.atomic():
            claimed = Run.objects.filter(id=run.id, status=Run.Status.RUNNING, heartbeat_at__lt=cutoff).update(
                status=Run.Status.INTERRUPTED, ended_at=timezone.now(), partial_text=""
            )
            if not claimed:
                continue
            meta = {"interrupted": True, "errors": [{"code": GENERAL, "message": WORKER_LOST_MESSAGE}]}
            run_rows_store(
                run=run, rows=[RowSpec(role="assistant", content=run.partial_text, meta=meta, is_final=True)]
            )
        stream_slot_key_free(run.slot_key)
        logger.warning("run {} lost its worker {}; finished as interrupted", run.id, run.worker)
        reaped.append(run)
    return reaped


def run_stored_end(*, run: Run) -> dict:
    """The `done` payload of an ended run, built from its stored reply (the log has expired or
    never reached this worker)."""
    row = Message.objects.filter(id=run.message_id).only("content", "chart", "meta").first()
    payload = {
        "type": "done",
        "full_text": row.content if row else "",
        "message_id": str(run.message_id),
        "chart": row.chart if row else None,
    }
    if run.status == Run.Status.INTERRUPTED or (row is not None and row.meta.get("interrupted")):
        payload["interrupted"] = True
    if row is not None and row.meta.get("usage"):
        payload["usage"] = row.meta["usage"]
    return payload
