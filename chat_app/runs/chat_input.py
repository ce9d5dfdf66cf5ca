"""The body of `POST /api/v1/chat` (docs/design.md#the-chat-stream), checked before anything is stored.

The body itself (Content-Type, size, encoding, depth, JSON object) is checked where every JSON
endpoint's is, in campus_agent.base.json_body; the fields are checked here.
"""
import dataclasses
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_lazy as _

from campus_agent.base import errors
from campus_agent.base.json_body import JsonBodyRefused, json_object_read

MESSAGE_MAX = 8000
HINT_DOMAIN_MAX = 64
AGENT_SLUG_MAX = 64


@dataclass(frozen=True)
class ChatInput:
    message: str
    conversation_id: uuid.UUID | None
    agent: str | None
    hint_domain: str | None
    attachments: tuple[uuid.UUID, ...] = ()  # the caller's uploads (docs/design.md#attachments), in the order sent
    # The language the student reads (the page's switch, else Accept-Language; docs/design.md#cross-cutting-rules): the
    # model is told to answer in it. None: not known (a client of another protocol).
    language: str | None = None
    # The messages a new conversation opens with, (role, text) in order, before the question:
    # a client's own history that continues no stored conversation (the OpenAI-compatible API,
    # docs/clients.md). Stored marked `meta.from_client`; ignored for an existing conversation.
    opening: tuple[tuple[str, str], ...] = ()


def _optional_str(body: dict, name: str, limit: int) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise errors.invalid_body(errors.MSG_FIELD_TYPE.format(field=name))
    _refuse_nul(value, name)
    return value.strip() or None


def _refuse_nul(value: str, name: str) -> None:
    # PostgreSQL text and jsonb cannot hold U+0000: storing it would fail after the 200 is sent.
    if "\x00" in value:
        raise errors.invalid_body(errors.MSG_NUL_CHARACTER.format(field=name))


MSG_ATTACHMENTS = _("attachments 必须是最多 {limit} 个附件 ID（POST /api/v1/uploads 的 id）的数组。")


def _attachments(body: dict) -> tuple[uuid.UUID, ...]:
    value = body.get("attachments")
    if value is None:
        return ()
    limit = settings.UPLOAD_MAX_PER_MESSAGE
    if not isinstance(value, list) or len(value) > limit or not all(isinstance(v, str) for v in value):
        raise errors.invalid_body(MSG_ATTACHMENTS.format(limit=limit))
    try:
        ids = [uuid.UUID(v) for v in value]
    except ValueError:
        raise errors.invalid_body(MSG_ATTACHMENTS.format(limit=limit)) from None
    return tuple(dict.fromkeys(ids))


def chat_input_read(*, request) -> ChatInput:
    """The request's chat input. Raises ApiError: 415 / 413 / 400 for the body
    (campus_agent.base.json_body), 400 (40001) for its fields. Call it only once the caller is known:
    an unauthenticated body is never parsed."""
    try:
        body = json_object_read(request)
    except JsonBodyRefused as exc:
        raise errors.ApiError(exc.message, code=exc.code, status=exc.status) from None
    return dataclasses.replace(chat_input_parse(body=body), language=translation.get_language_from_request(request))


def chat_input_parse(*, body: dict) -> ChatInput:
    """Raises ApiError 400 (40001) unless `body` has a 1–8000 character message and valid fields."""
    message = body.get("message")
    if message is not None and not isinstance(message, str):
        raise errors.invalid_body(errors.MSG_FIELD_TYPE.format(field="message"))
    message = (message or "").strip()
    _refuse_nul(message, "message")
    if not message:
        raise errors.invalid_body(errors.MSG_MESSAGE_MISSING)
    if len(message) > MESSAGE_MAX:
        raise errors.invalid_body(errors.MSG_MESSAGE_TOO_LONG)
    conversation_id = body.get("conversation_id")
    if conversation_id is not None:
        try:
            conversation_id = uuid.UUID(str(conversation_id)) if isinstance(conversation_id, str) else None
        except ValueError:
            conversation_id = None
        if conversation_id is None:
            raise errors.invalid_body(errors.MSG_CONVERSATION_ID)
    return ChatInput(
        message=message,
        conversation_id=conversation_id,
        agent=_optional_str(body, "agent", AGENT_SLUG_MAX),
        hint_domain=_optional_str(body, "hint_domain", HINT_DOMAIN_MAX),
        attachments=_attachments(body),
    )
