"""The run's states in the database: the only code that writes `Run.status` (docs/design.md#runs).

    (admitted) ──run_create──▶ RUNNING ──run_finish──▶ FINISHED | INTERRUPTED
                                │  ▲ ╲
                     run_pause  │  │  ╲ runs_reap (its worker stopped heart-beating)
                                ▼  │   ╲───────────────▶ INTERRUPTED
                              WAITING ──run_waiting_close──▶ INTERRUPTED
                           (run_resume_claim ▲: every answer is in; any worker)

Every move is a conditional UPDATE from the states it may leave (`_move`), checked against
RUN_MOVES first: an illegal move raises `IllegalMove`, and a move whose run has left its state
meanwhile (another worker got there first) changes nothing and says so (0 rows). Sync; the
event loop's side is chat_app.runs.engine (the run's task, stop, the reaper's sweep), which
calls these through campus_agent.base.asyncdb. What a waiting run waits for is
chat_app.runs.wait's; its slot, chat_app.runs.lease's (the row keeps the slot's key for whoever
ends a run no task holds).
"""
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone, translation
from django.utils.translation import gettext_lazy as _
from loguru import logger

from agents_app.runtime.events import CUT_REASONS
from campus_agent.base.asyncdb import db_call
from campus_agent.base.errors import GENERAL
from chat_app.models import Message, Run
from chat_app.runs.bus import run_bus
from chat_app.runs.recording import RowSpec, TurnRows, turn_store, turns_store

State = Run.Status

# Which states a run may move to from each state (a finished or interrupted run is final).
RUN_MOVES: dict[State, frozenset[State]] = {
    State.RUNNING: frozenset({State.WAITING, State.FINISHED, State.INTERRUPTED}),
    State.WAITING: frozenset({State.RUNNING, State.INTERRUPTED}),
    State.FINISHED: frozenset(),
    State.INTERRUPTED: frozenset(),
}

# Names this process in Run.worker: unique even when a pid is reused after a restart.
WORKER_ID = f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
WORKER_LOST_MESSAGE = _("服务进程意外中断，回答未完成。")
# A run whose task could not store its end (issue 20 point 3) is not a dead worker's: it is
# marked (Run.worker) so the reaper ends it at its next sweep and says what happened.
STORE_FAILED_WORKER_PREFIX = "store-failed:"
STORE_FAILED_REAP_MESSAGE = _("回答保存失败，这里只保留了保存前已生成的文字。")
_CHECKPOINT_SQL = "UPDATE {table} SET partial_text = %s WHERE id = %s"


def run_language(run: Run) -> translation.override:
    """The texts written into `run` from here on in its student's language (Run.language), on
    whichever worker writes them."""
    return translation.override(run.language or settings.LANGUAGE_CODE)


class IllegalMove(Exception):
    """A move RUN_MOVES does not allow (a bug in the caller, never a race)."""


def run_move_check(source: State, target: State) -> None:
    if target not in RUN_MOVES[State(source)]:
        raise IllegalMove(f"a run cannot move from {source} to {target}")


def _move(run_id, *, source: tuple[State, ...], target: State, **fields) -> bool:
    """Moves the run from one of `source` to `target` (with `fields`); False when it was in
    none of them any more (another worker moved it first)."""
    for state in source:
        run_move_check(state, target)
    if target in (State.FINISHED, State.INTERRUPTED):
        fields.setdefault("ended_at", timezone.now())
    return bool(Run.objects.filter(id=run_id, status__in=source).update(status=target, **fields))


# --- reads --------------------------------------------------------------------------------------

def run_get(*, user, run_id) -> Run | None:
    """The caller's own run, or None (another user's run is indistinguishable from a missing one)."""
    try:
        run_id = uuid.UUID(str(run_id))
    except ValueError:
        return None
    return Run.objects.filter(id=run_id, user=user).first()


def run_refresh(*, run_id) -> Run | None:
    return Run.objects.filter(id=run_id).first()


def run_stored_end(*, run: Run) -> dict:
    """The `done` payload of an ended run, built from its stored reply (its log has expired or
    never reached this worker)."""
    row = Message.objects.filter(id=run.message_id).only("content", "chart", "meta").first()
    payload = {
        "type": "done",
        "full_text": row.content if row else "",
        "message_id": str(run.message_id),
        "chart": row.chart if row else None,
    }
    if run.status == State.INTERRUPTED or (row is not None and row.meta.get("interrupted")):
        payload["interrupted"] = True
        if row is not None and row.meta.get("interrupted_reason") in CUT_REASONS:
            payload["interrupted_reason"] = row.meta["interrupted_reason"]
    if row is not None and row.meta.get("usage"):
        payload["usage"] = row.meta["usage"]
    for name in ("provider", "model"):  # who answered (Done.provider / Done.model)
        if row is not None and isinstance(row.meta.get(name), str) and row.meta[name]:
            payload[name] = row.meta[name]
    return payload


def run_active_get(*, conversation_id) -> Run | None:
    """The conversation's run in progress (the newest, should there be several), or None."""
    return (
        Run.objects.filter(conversation_id=conversation_id, status__in=Run.ACTIVE)
        .only("id", "request_id")
        .order_by("-started_at")
        .first()
    )


# --- moves --------------------------------------------------------------------------------------

def run_create(*, conversation, user, request_id: str, agent_name: str, slot_key: str, language: str = "") -> Run:
    """(admitted) → RUNNING on this worker, holding the slot `slot_key` (inside the caller's transaction)."""
    return Run.objects.create(
        conversation=conversation, user=user, status=State.RUNNING, worker=WORKER_ID, heartbeat_at=timezone.now(),
        request_id=request_id, agent_name=agent_name, slot_key=slot_key, language=language,
    )


def run_rows_store(*, run: Run, rows: list[RowSpec], unsaved_text: str | None = None) -> None:
    """Rows of the run (a finished tool round while it goes on; its end), in one transaction.

    With `unsaved_text`, the run's checkpoint is replaced in the same transaction: the text it
    held may have become part of the stored round, and a reaper must never store it twice.
    """
    with transaction.atomic(savepoint=False):  # as turn_store's: inside run_finish's, no savepoint
        turn_store(
            conversation_id=run.conversation_id,
            final_message_id=run.message_id,
            rows=rows,
            agent_name=run.agent_name,
            request_id=run.request_id,
        )
        if unsaved_text is not None:
            Run.objects.filter(id=run.id).update(partial_text=unsaved_text)


@dataclass(frozen=True)
class Finish:
    """A run's end to store: what is left of its reply, and whether it was cut."""

    run: Run
    rows: list[RowSpec]
    interrupted: bool


def run_finish(*, run: Run, rows: list[RowSpec], interrupted: bool) -> bool:
    """RUNNING → FINISHED (or INTERRUPTED), storing what is left of its reply, in one transaction.
    False when the reaper had ended it already (it took the worker for dead): nothing is written."""
    return runs_finish([Finish(run=run, rows=rows, interrupted=interrupted)])[0]


def runs_finish(finishes: list[Finish]) -> list[bool]:
    """`run_finish` for several runs in one transaction (chat_app.runs.engine groups the ends that
    come together: `FINISHES`): each run moved on its own (a reaped one is not, and stores
    nothing), then the rows of all that moved written together (`turns_store`). One outcome per
    finish, in order; an error undoes them all (the group's caller then stores each alone)."""
    with transaction.atomic():
        moved = [
            _move(finish.run.id, source=(State.RUNNING,),
                  target=State.INTERRUPTED if finish.interrupted else State.FINISHED, partial_text="", slot_key="")
            for finish in finishes
        ]
        turns_store([
            TurnRows(conversation_id=finish.run.conversation_id, final_message_id=finish.run.message_id,
                     rows=finish.rows, agent_name=finish.run.agent_name, request_id=finish.run.request_id)
            for finish, ended in zip(finishes, moved, strict=True) if ended
        ])
    return moved


def run_pause(*, run: Run, rows: list[RowSpec], state: dict, frames_seq: int) -> bool:
    """RUNNING → WAITING (inside the caller's transaction, which stores what the person is asked:
    chat_app.runs.wait): the round so far and the turn's state stored, no worker, no slot. False
    when the run was no longer running (reaped)."""
    moved = _move(run.id, source=(State.RUNNING,), target=State.WAITING, worker="", partial_text="",
                  slot_key="", frames_seq=frames_seq, resume_state=state)
    if moved and rows:
        run_rows_store(run=run, rows=rows)
    return moved


def run_resume_claim(*, run_id, slot_key: str) -> bool:
    """WAITING → RUNNING on this worker holding the slot `slot_key` (inside the caller's
    transaction, which checked that every answer is in). False when another worker claimed it
    first or it ended."""
    return _move(run_id, source=(State.WAITING,), target=State.RUNNING, worker=WORKER_ID,
                 heartbeat_at=timezone.now(), slot_key=slot_key)


def run_waiting_close(*, run_id, rows_for) -> Run | None:
    """WAITING → INTERRUPTED without resuming (stopped, or no quota left at its expiry):
    `rows_for(run)` gives the rows that end it (the pause's calls as not run, the reply). None
    when it was not waiting (nothing is written)."""
    with transaction.atomic():
        if not _move(run_id, source=(State.WAITING,), target=State.INTERRUPTED):
            return None
        run = Run.objects.get(id=run_id)
        run_rows_store(run=run, rows=rows_for(run))
    return run


def runs_heartbeat(*, worker: str, checkpoints: dict[uuid.UUID, str], run_ids=None) -> None:
    """Refreshes the heartbeat of the running runs of `worker` (only those in `run_ids` when
    given: the runs a task of this worker still runs) and saves the unsaved reply text of those
    that changed: two statements whatever the number of runs. A run whose task ended without
    storing its end is no longer kept alive by its worker's beat: a reaper ends it."""
    now = timezone.now()
    with transaction.atomic():
        beating = Run.objects.filter(worker=worker, status=State.RUNNING)
        if run_ids is not None:
            beating = beating.filter(id__in=list(run_ids))
        beating.update(heartbeat_at=now)
        if checkpoints:
            # One prepared UPDATE run for every row (executemany): bulk_update's CASE over
            # hundreds of rows cost a fifth of a core at 1,000 held streams (bench/stream_overhead.py).
            id_field = Run._meta.pk
            rows = [(text, id_field.get_db_prep_value(run_id, connection)) for run_id, text in checkpoints.items()]
            with connection.cursor() as cursor:
                cursor.executemany(_CHECKPOINT_SQL.format(table=connection.ops.quote_name(Run._meta.db_table)), rows)


def run_store_failed_mark(*, run: Run, text: str) -> bool:
    """A RUNNING run whose task could not store its end (the full rows nor the reply alone):
    keeps `text` as its checkpoint and marks it for the reaper's next sweep (its heartbeat made
    stale), whose mark then says the store failed, not that the worker died."""
    stale = timezone.now() - timedelta(days=1)
    return bool(Run.objects.filter(id=run.id, status=State.RUNNING).update(
        worker=(STORE_FAILED_WORKER_PREFIX + WORKER_ID)[:128], partial_text=text, heartbeat_at=stale,
    ))


def run_reap(*, run: Run, stale_before) -> bool:
    """RUNNING → INTERRUPTED for a run whose worker stopped heart-beating before `stale_before`:
    the text it had checkpointed becomes the stored reply; its slot (`run.slot_key`) is the
    caller's to release (chat_app.runs.engine adopts the lease). Claimed by a conditional update,
    so two workers reaping at once never store it twice."""
    with transaction.atomic():
        claimed = Run.objects.filter(id=run.id, status=State.RUNNING, heartbeat_at__lt=stale_before)
        run_move_check(State.RUNNING, State.INTERRUPTED)
        if not claimed.update(status=State.INTERRUPTED, ended_at=timezone.now(), partial_text="", slot_key=""):
            return False
        store_failed = run.worker.startswith(STORE_FAILED_WORKER_PREFIX)
        with run_language(run):
            reason = str(STORE_FAILED_REAP_MESSAGE if store_failed else WORKER_LOST_MESSAGE)
        meta = {"interrupted": True, "errors": [{"code": GENERAL, "message": reason}]}
        if store_failed:
            meta["store_failed"] = True
        run_rows_store(run=run, rows=[RowSpec(role="assistant", content=run.partial_text, meta=meta, is_final=True)])
    if store_failed:
        logger.warning("run {} could not store its end; finished as interrupted from its last text", run.id)
    else:
        logger.warning("run {} lost its worker {}; finished as interrupted", run.id, run.worker)
    return True


def runs_reap(*, stale_sec: float) -> list[Run]:
    """Reaps every running run whose worker stopped heart-beating `stale_sec` ago. A waiting run
    belongs to no worker: never reaped."""
    cutoff = timezone.now() - timedelta(seconds=stale_sec)
    stale = Run.objects.filter(status=State.RUNNING, heartbeat_at__lt=cutoff)
    return [run for run in stale if run_reap(run=run, stale_before=cutoff)]


def run_is_stale(*, run: Run, stale_sec: float) -> bool:
    """The run's worker stopped heart-beating: nobody will end it but a reaper."""
    return run.status == State.RUNNING and run.heartbeat_at < timezone.now() - timedelta(seconds=stale_sec)


# The runs this worker process runs (for stop and the supervisor's checkpoints), kept as long as
# their log after they end.
local_runs: dict = {}  # run id (UUID) → engine.RunTask


async def run_ended_announce(run: Run, *, closing: list[dict] = ()) -> None:
    """Followers of a run ended by its row alone (reaped, or closed while it waited) get the
    `closing` frames (its waiting calls' results), then its end."""
    payload = await db_call(run_stored_end, run=run)
    await run_bus().end_with(run.id, [*closing, payload], base=run.frames_seq)
