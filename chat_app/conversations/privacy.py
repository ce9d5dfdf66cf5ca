"""A student's data (PIPL; docs/design.md#cross-cutting-rules): everything stored about them as one JSON document, all
their conversations deleted at their word, and conversations past the retention period purged
(`manage.py purge_conversations`, for cron).

The export holds what the student wrote and was answered (conversations, messages with their
tool rows and reasoning, ratings, reports of answers with what they reported and its status — not
staff's notes), their API keys and login sessions as metadata — never a
secret: no password hash, no campus token, no key, no JWT. Each AI message carries its labels
(safety_app.labels): the visible text and the implicit `aigc` object."""
from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone
from loguru import logger

from agents_app.mcp.oauth import grant_revoke
from agents_app.models import McpOAuthGrant
from chat_app.models import ApiKey, AuthSession, Conversation, Feedback, Message, Run, Upload
from safety_app.labels import AIGC_KEY, LABEL_TEXT, aigc_label
from safety_app.models import AnswerReport

EXPORT_FORMAT = "campus-agent-export/1"


def _when(value) -> str | None:
    return value.isoformat() if value is not None else None


def _message_entry(message: Message, answered_by: dict) -> dict:
    entry = {"id": str(message.id), "role": message.role, "content": message.content, "meta": message.meta,
             "chart": message.chart, "created_at": _when(message.created_at), "superseded": message.superseded,
             "tokens": {"prompt": message.prompt_tokens, "completion": message.completion_tokens,
                        "cached": message.cached_tokens}}
    # An assistant row is the model's (a round's text or the reply); one a client brought along
    # (its own history, `from_client`) is not ours to label.
    meta = message.meta if isinstance(message.meta, dict) else {}
    if message.role == Message.Role.ASSISTANT and not meta.get("from_client"):
        if meta.get("provider"):  # the reply itself
            provider, model = str(meta["provider"]), str(meta.get("model") or "")
        else:  # a tool round's text: its turn's reply says who answered
            provider, model = answered_by.get(message.request_id, ("", "")) if message.request_id else ("", "")
        entry["label"] = str(LABEL_TEXT)
        entry[AIGC_KEY] = aigc_label(produce_id=str(message.id), provider=provider, model=model)
    return entry


def _answered_by(messages) -> dict[str, tuple[str, str]]:
    """request id → (provider, model) of its turn, from the final reply's meta (recording.py):
    a round's row before it was answered by the same model."""
    found = {}
    for message in messages:
        meta = message.meta if isinstance(message.meta, dict) else {}
        if message.role == Message.Role.ASSISTANT and message.request_id and meta.get("provider"):
            found[message.request_id] = (str(meta["provider"]), str(meta.get("model") or ""))
    return found


def user_data_export(*, user) -> dict:
    """Everything the project keeps about `user`, as JSON-ready data (the page's 「下载我的数据」)."""
    conversations = []
    for conversation in Conversation.objects.filter(user=user).select_related("agent").order_by("created_at"):
        messages = list(Message.objects.filter(conversation=conversation).order_by("created_at", "seq"))
        answered_by = _answered_by(messages)
        conversations.append({
            "id": str(conversation.id),
            "title": conversation.title,
            "agent": conversation.agent.slug if conversation.agent else None,
            "created_at": _when(conversation.created_at),
            "updated_at": _when(conversation.updated_at),
            "messages": [_message_entry(m, answered_by) for m in messages],
        })
    return {
        "format": EXPORT_FORMAT,
        "exported_at": _when(timezone.now()),
        "user": {"username": user.get_username(), "name": user.get_full_name(), "email": user.email,
                 "date_joined": _when(user.date_joined), "last_login": _when(user.last_login)},
        "conversations": conversations,
        "feedback": [
            {"message_id": str(f.message_id), "rating": f.rating, "comment": f.comment, "updated_at": _when(f.updated_at)}
            for f in Feedback.objects.filter(user=user).order_by("created_at")
        ],
        "reports": [
            {"message_id": str(r.message_id), "conversation_id": str(r.conversation_id), "reason": r.reason,
             "detail": r.detail, "question": r.question, "answer": r.answer, "status": r.status,
             "created_at": _when(r.created_at), "handled_at": _when(r.handled_at)}
            for r in AnswerReport.objects.filter(reporter=user).order_by("created_at")
        ],
        # What each attachment was (its bytes are the student's to fetch: GET /api/v1/uploads/<id>).
        "uploads": [
            {"id": str(u.id), "name": u.name, "content_type": u.content_type, "size": u.size,
             "conversation_id": str(u.conversation_id) if u.conversation_id else None, "created_at": _when(u.created_at)}
            for u in Upload.objects.filter(user=user).order_by("created_at")
        ],
        "api_keys": [
            {"name": k.name, "prefix": k.prefix, "created_at": _when(k.created_at), "last_used_at": _when(k.last_used_at),
             "expires_at": _when(k.expires_at), "revoked_at": _when(k.revoked_at)}
            for k in ApiKey.objects.filter(user=user).order_by("created_at")
        ],
        "login_sessions": [
            {"via": s.via, "created_at": _when(s.created_at), "expires_at": _when(s.expires_at)}
            for s in AuthSession.objects.filter(user=user).order_by("created_at")
        ],
        "connected_accounts": connected_accounts(user=user),
    }


def connected_accounts(*, user) -> list[dict]:
    """The MCP services the student connected their own account to (never a token)."""
    return [
        {"id": g.id, "service": g.service.label, "scope": g.scope, "connected_at": _when(g.created_at),
         "expires_at": _when(g.expires_at)}
        for g in McpOAuthGrant.objects.filter(user=user).select_related("service").order_by("created_at")
    ]


def connected_account_remove(*, user, grant_id: int) -> bool:
    """Disconnects one: the tokens are revoked at the authorization server where it has a
    revocation endpoint (RFC 7009, best effort) and deleted here (the next use asks the student
    again). False when the student has no such account."""
    grant = McpOAuthGrant.objects.select_related("service").filter(user=user, id=grant_id).first()
    if grant is None:
        return False
    grant_revoke(grant)
    grant.delete()
    logger.info("connected account removed user={} grant={}", user.pk, grant_id)
    return True


def user_conversations_delete(*, user) -> int:
    """Deletes every conversation of `user` (messages, runs, approvals and ratings with them);
    returns how many. A run still answering finds its conversation gone and stores nothing."""
    ids = list(Conversation.objects.filter(user=user).values_list("id", flat=True))
    Conversation.objects.filter(id__in=ids).delete()  # their attachments (and files) with them
    for upload in Upload.objects.filter(user=user, conversation__isnull=True):  # uploaded, never sent
        upload.delete()
    logger.info("all conversations deleted user={} count={}", user.pk, len(ids))
    return len(ids)


def conversations_purge(*, older_than_days: int, dry_run: bool = False) -> int:
    """Deletes the conversations untouched for `older_than_days` days (their last exchange older
    than that), except one with a run still going; returns how many (or would, with `dry_run`)."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    active = Run.objects.filter(status__in=Run.ACTIVE).values("conversation_id")
    stale = Conversation.objects.filter(updated_at__lt=cutoff).exclude(Q(id__in=active))
    ids = list(stale.values_list("id", flat=True))
    if not dry_run:
        Conversation.objects.filter(id__in=ids).delete()
        logger.info("conversations purged older_than_days={} count={}", older_than_days, len(ids))
    return len(ids)
