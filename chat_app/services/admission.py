"""Admitting one chat turn: everything decided before the stream starts, in one sync call.

The stream view crosses into sync code once for all of it (auth lookup, limits, the user
message, the history), instead of once per step: each crossing is a thread hand-off.

`achat_turn_admit` is the stream view's entry: for a JWT checked a moment ago (chat_app.auth_cache)
it reads the body in the event loop, takes the Redis limits there (asyncio client), and crosses
once for the quota and the writes; otherwise it is `chat_turn_admit`, in one crossing. The
order of the answers is the same either way.
"""
from dataclasses import dataclass

from campus_agent.base.asyncdb import db_call
from chat_app import api_errors as errors
from chat_app.authentication import Caller, chat_caller_cached, chat_caller_resolve
from chat_app.chat_input import ChatInput, chat_input_read
from chat_app.limits import SlotLease, astream_slot_and_rate_take, stream_slot_and_rate_take, stream_slot_take
from chat_app.models import Run
from chat_app.quota import user_token_quota_check
from chat_app.services.turns import TurnStart, turn_begin


@dataclass(frozen=True)
class Admission:
    caller: Caller
    chat: ChatInput
    start: TurnStart
    lease: SlotLease  # handed to the run, which releases it when it ends


def chat_turn_admit(*, request, request_id: str) -> Admission:
    """401/403 (auth) → 415/413/400 (the body, read only now: an unauthenticated body is never
    parsed) → 429 (streams, rate, daily tokens) → 404/400 (conversation, agent) → the user message stored.
    Raises ApiError; holds a slot lease only when it returns."""
    caller = chat_caller_resolve(request)
    chat = chat_input_read(request=request)
    return _admit_known(caller=caller, chat=chat, request_id=request_id)


def _too_many_streams() -> errors.ApiError:
    return errors.ApiError(errors.MSG_TOO_MANY_STREAMS, code=errors.TOO_MANY_STREAMS, status=429)


def _rate_limited() -> errors.ApiError:
    return errors.ApiError(errors.MSG_RATE_LIMITED, code=errors.RATE_LIMITED, status=429, headers={"Retry-After": "60"})


def _admit_known(*, caller: Caller, chat: ChatInput, request_id: str) -> Admission:
    lease, rate_ok = stream_slot_and_rate_take(user_id=caller.user.pk)
    if lease is None:
        raise _too_many_streams()
    try:
        if not rate_ok:
            raise _rate_limited()
        return _admit_with_lease(caller=caller, chat=chat, request_id=request_id, lease=lease)
    except BaseException:
        lease.release_now()
        raise


def _admit_with_lease(*, caller: Caller, chat: ChatInput, request_id: str, lease: SlotLease) -> Admission:
    user_token_quota_check(user_id=caller.user.pk)
    start = turn_begin(user=caller.user, chat=chat, request_id=request_id, lease=lease)
    return Admission(caller=caller, chat=chat, start=start, lease=lease)


def resume_admit(run: Run) -> SlotLease:
    """Admits a waiting run that goes on as a new turn would be: a slot lease (429 42901 when the
    student's streams are all in use) and the daily quota (429 42904). Not the message rate: an
    answer to a waiting card is not a new message. Sync, inside the resume's transaction."""
    lease = stream_slot_take(user_id=run.user_id)
    if lease is None:
        raise _too_many_streams()
    try:
        user_token_quota_check(user_id=run.user_id)
    except BaseException:
        lease.release_now()
        raise
    return lease


async def caller_turn_admit(*, caller: Caller, chat: ChatInput, request_id: str) -> Admission:
    """A turn of a caller already known (an inbound protocol's, chat_app.inbound): the limits, the
    quota and the writes of chat_turn_admit. Raises ApiError; holds a slot lease only when it returns."""
    taken = await astream_slot_and_rate_take(user_id=caller.user.pk)
    if taken is None:  # not the Redis cache: the limits cost nothing in the database call
        return await db_call(_admit_known, caller=caller, chat=chat, request_id=request_id)
    lease, rate_ok = taken
    if lease is None:
        raise _too_many_streams()
    try:
        if not rate_ok:
            raise _rate_limited()
        return await db_call(_admit_with_lease, caller=caller, chat=chat, request_id=request_id, lease=lease)
    except BaseException:
        await lease.release()
        raise


async def achat_turn_admit(*, request, request_id: str) -> Admission:
    """See chat_turn_admit()."""
    caller = chat_caller_cached(request)
    if caller is None:
        return await db_call(chat_turn_admit, request=request, request_id=request_id)
    chat = chat_input_read(request=request)  # parsing only: the body is already in memory
    return await caller_turn_admit(caller=caller, chat=chat, request_id=request_id)
