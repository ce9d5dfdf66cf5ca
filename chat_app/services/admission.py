"""Admitting one chat turn: everything decided before the stream starts, in one sync call.

The stream view crosses into sync code once for all of it (auth lookup, limits, the user
message, the history), instead of once per step: each crossing is a thread hand-off and, with
CONN_MAX_AGE=0 on pool threads, a fresh database connection.
"""
from dataclasses import dataclass

from chat_app import api_errors as errors
from chat_app.authentication import Caller, chat_caller_resolve
from chat_app.chat_input import ChatInput, chat_input_read
from chat_app.limits import StreamSlot, stream_slot_and_rate_take, stream_slot_release
from chat_app.quota import user_token_quota_check
from chat_app.services.turns import TurnStart, turn_begin


@dataclass(frozen=True)
class Admission:
    caller: Caller
    chat: ChatInput
    start: TurnStart
    slot: StreamSlot


def chat_turn_admit(*, request, request_id: str) -> Admission:
    """401/403 (auth) → 415/413/400 (the body, read only now: an unauthenticated body is never
    parsed) → 429 (streams, rate, daily tokens) → 404/400 (conversation, agent) → the user message stored.
    Raises ApiError; holds a stream slot only when it returns."""
    caller = chat_caller_resolve(request)
    chat = chat_input_read(request=request)
    user_id = caller.user.pk
    slot, rate_ok = stream_slot_and_rate_take(user_id=user_id)
    if slot is None:
        raise errors.ApiError(errors.MSG_TOO_MANY_STREAMS, code=errors.TOO_MANY_STREAMS, status=429)
    try:
        if not rate_ok:
            raise errors.ApiError(
                errors.MSG_RATE_LIMITED, code=errors.RATE_LIMITED, status=429, headers={"Retry-After": "60"}
            )
        user_token_quota_check(user_id=user_id)
        start = turn_begin(user=caller.user, chat=chat, request_id=request_id, slot_key=slot.cache_key)
    except BaseException:
        stream_slot_release(slot=slot)
        raise
    return Admission(caller=caller, chat=chat, start=start, slot=slot)
