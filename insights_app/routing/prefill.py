"""A new routing case from a stored conversation: the question, a little history, the tools
its turn actually called (staff keep them as "must call", or move a wrong one to "must not")."""
from django.db.models import Q
from django.utils import timezone

from agents_app.models import Agent
from chat_app.models import Message

HISTORY_MESSAGES = 4
NOTES_TEXT = "来自对话“{title}”（用户 {user}，{when:%Y-%m-%d %H:%M}）。这一轮实际调用了：{tools}。"
NO_TOOLS = "没有调用工具"


def _after(message: Message) -> Q:
    return Q(created_at__gt=message.created_at) | Q(created_at=message.created_at, seq__gt=message.seq)


def _before(message: Message) -> Q:
    return Q(created_at__lt=message.created_at) | Q(created_at=message.created_at, seq__lt=message.seq)


def case_question_of(*, message: Message) -> Message | None:
    """The user message a case is made from: the message itself, or the question an answer
    (e.g. a rated one) replied to."""
    if message.role == Message.Role.USER:
        return message
    rows = Message.objects.filter(_before(message), conversation_id=message.conversation_id,
                                  role=Message.Role.USER)
    return rows.order_by("-created_at", "-seq").first()


def _turn_rows(question: Message) -> list[Message]:
    """The rows of the question's turn: after it, up to the next question."""
    rows = []
    for row in Message.objects.filter(_after(question), conversation_id=question.conversation_id).order_by(
        "created_at", "seq"
    ):
        if row.role == Message.Role.USER:
            break
        rows.append(row)
    return rows


def _history(question: Message) -> list[dict]:
    """The questions and final answers just before it (no tool rows: the model's own earlier
    calls are not what a case replays)."""
    earlier = Message.objects.filter(_before(question), conversation_id=question.conversation_id,
                                     superseded=False, role__in=[Message.Role.USER, Message.Role.ASSISTANT])
    texts = []
    for row in earlier.exclude(meta__has_key="tool_calls").order_by("-created_at", "-seq")[:HISTORY_MESSAGES]:
        if row.content.strip():
            texts.append({"role": row.role, "content": row.content})
    return texts[::-1]


def routing_case_initial(*, message: Message) -> dict:
    """Initial values of the case form made from `message` (a question or an answer)."""
    question = case_question_of(message=message) or message
    conversation = question.conversation
    turn = _turn_rows(question)
    called = list(dict.fromkeys(
        call.get("function", {}).get("name", "")
        for row in turn for call in (row.meta.get("tool_calls") or []) if isinstance(call, dict)
    ))
    called = [name for name in called if name]
    answered_by = next((row.agent_name for row in turn if row.agent_name), "")
    agent = Agent.objects.filter(name=answered_by).first() if answered_by else None
    agent = agent or conversation.agent
    return {
        "agent": agent.pk if agent else None,
        "question": question.content,
        "history": _history(question),
        "must_call": called,
        "notes": NOTES_TEXT.format(title=conversation.title, user=conversation.user, when=timezone.localtime(question.created_at),
                                   tools="、".join(called) or NO_TOOLS),
        "source_message": question.pk,
    }
