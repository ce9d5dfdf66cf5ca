"""Reads of conversations: a student's list, search, one conversation, its messages, answers and
their feedback, and the stored conversation a client's history matches."""
import uuid
from dataclasses import dataclass

from django.db.models import Case, Exists, F, OuterRef, Q, QuerySet, Subquery, TextField, Value, When
from django.db.models.functions import Concat, Greatest, Length, StrIndex, Substr, Upper

from chat_app.models import Conversation, Feedback, Message, Run


def conversation_list(*, user) -> QuerySet[Conversation]:
    """The user's conversations, newest first, each with `active_run_id` (the run in progress, or
    None) so that a page or a second tab can re-attach to it (docs/design.md#runs)."""
    active_run = Run.objects.filter(conversation=OuterRef("pk"), status__in=Run.ACTIVE).order_by("-started_at")
    return (
        Conversation.objects.filter(user=user)
        .select_related("agent")
        .annotate(active_run_id=Subquery(active_run.values("id")[:1]))
        .order_by("-updated_at")
    )


SNIPPET_BEFORE = 20  # characters of a message shown before the match in a search snippet
SNIPPET_AFTER = 50  # … and after it
SNIPPET_CUT = "…"


def conversation_search(*, user, query: str) -> QuerySet[Conversation]:
    """The user's conversations whose title or question/answer text contains `query`, ignoring
    case, newest first. `icontains` escapes LIKE's wildcards on every backend, so `%` and `_` in
    a query match themselves.

    Each has `match_snippet`: the part of its first matching message around the match, "…" where
    cut (None when only the title matches), so the student sees why it was found. It is cut in
    the database (a long answer is not read whole for 100 hits); the match is found as `icontains`
    finds it, UPPER on both sides (PostgreSQL's UPPER … LIKE; SQLite folds ASCII only, as LIKE does)."""
    matching = Message.objects.filter(
        conversation=OuterRef("pk"),
        role__in=[Message.Role.USER, Message.Role.ASSISTANT],
        content__icontains=query,
    )
    size = len(query) + SNIPPET_BEFORE + SNIPPET_AFTER
    snippets = (
        matching.order_by("created_at", "seq")
        .annotate(start=Greatest(StrIndex(Upper("content"), Upper(Value(query))) - SNIPPET_BEFORE, Value(1)),
                  length=Length("content"))
        .annotate(snippet=Concat(
            Case(When(start__gt=1, then=Value(SNIPPET_CUT)), default=Value("")),
            Substr("content", F("start"), size),
            Case(When(length__gte=F("start") + size, then=Value(SNIPPET_CUT)), default=Value("")),
            output_field=TextField(),
        ))
        .values("snippet")[:1]
    )
    return (
        conversation_list(user=user)
        .filter(Q(title__icontains=query) | Exists(matching))
        .annotate(match_snippet=Subquery(snippets))
    )


def conversation_get(*, user, conversation_id) -> Conversation | None:
    """The user's own conversation, or None: another user's conversation is indistinguishable from a
    missing one (IDOR answers 404)."""
    return conversation_list(user=user).filter(id=conversation_id).first()


def conversation_for_turn(*, user, conversation_id) -> Conversation | None:
    """The user's own conversation a new question is asked in (None otherwise, as
    conversation_get), with `active_run_id`: its run that has not ended (running or waiting for a
    person), which refuses the question (docs/design.md#runs). One query, without the agent the
    lists show."""
    active = Run.objects.filter(conversation=OuterRef("pk"), status__in=Run.ACTIVE).order_by("-started_at")
    return (Conversation.objects.filter(user=user, id=conversation_id)
            .annotate(active_run_id=Subquery(active.values("id")[:1])).first())


def message_list(*, conversation: Conversation) -> QuerySet[Message]:
    return Message.objects.filter(conversation=conversation).order_by("created_at", "seq")


def answer_get(*, user, message_id) -> Message | None:
    """An assistant row of one of the user's conversations, or None (another user's looks missing)."""
    return Message.objects.filter(id=message_id, role=Message.Role.ASSISTANT, conversation__user=user).first()


def message_get(*, user, message_id) -> Message | None:
    """A row of any role of one of the user's conversations, or None (another user's looks missing)."""
    return Message.objects.filter(id=message_id, conversation__user=user).first()


TURN_ROWS_MAX = 500  # rows read back from an answer to find its question


def answer_turn(*, answer: Message) -> tuple[str, str]:
    """(question, answer text) of the turn `answer` ends: the user row before it, and every
    assistant row's text from there to `answer` (the text said before tool calls too), as the
    student read it. The question is "" when none is found within TURN_ROWS_MAX rows."""
    earlier = (
        Message.objects.filter(conversation_id=answer.conversation_id)
        .filter(Q(created_at__lt=answer.created_at) | Q(created_at=answer.created_at, seq__lte=answer.seq))
        .order_by("-created_at", "-seq")
        .values_list("id", "role", "content")[:TURN_ROWS_MAX]
    )
    question, texts = "", []
    for message_id, role, content in earlier:
        if role == Message.Role.USER:
            question = content
            break
        if role == Message.Role.ASSISTANT and (content or message_id == answer.id):
            texts.append(content)
    return question, "\n\n".join(reversed(texts))


def feedback_get(*, user, message: Message) -> Feedback | None:
    return Feedback.objects.filter(user=user, message=message).first()


def feedback_by_answer(*, user, conversation: Conversation) -> dict[str, dict]:
    """The user's ratings in one conversation: answer id → {"rating", "comment"} (the page's state)."""
    rows = Feedback.objects.filter(user=user, message__conversation=conversation).values(
        "message_id", "rating", "comment"
    )
    return {str(row["message_id"]): {"rating": row["rating"], "comment": row["comment"]} for row in rows}


CONVERSATION_CANDIDATES_MAX = 10


def _turn_texts(rows) -> tuple[list[str], list[str]]:
    """(questions, answers) of a conversation's live user and assistant rows in order: a turn's
    answer is all its assistant text (the text said before tool calls too), as the client got it."""
    questions, answers = [], []
    for role, content in rows:
        if role == Message.Role.USER:
            questions.append(content)
            answers.append("")
        elif answers:
            answers[-1] += content
    return questions, answers


def _theirs(texts, count: int, latest: bool) -> list[str]:
    """The client's `texts` compared with `count` stored ones: all of them, or with `latest` the
    last `count` (all when there are fewer)."""
    if not latest:
        return list(texts)
    return list(texts[max(len(texts) - count, 0):]) if count > 0 else []


@dataclass(frozen=True)
class HistoryMatch:
    conversation_id: uuid.UUID
    asked_again: bool  # its last question is the one asked now, and the client lacks its answer


def conversation_find_by_history(*, user, questions: list[str], answers: list[str], question: str
                                 ) -> HistoryMatch | None:
    """The user's conversation that a client's history continues (the OpenAI-compatible API,
    docs/clients.md): its live questions are exactly the client's earlier user messages, in
    order — or those and then `question` (`asked_again`: the client regenerates the last answer,
    or asks its last question again); for a conversation the client's history opened, the latest
    of them. Of several such, the one whose answers the client shows
    (its assistant text starts with ours, after trimming), then the one continued rather than
    asked again, then the most recently updated. None: a new conversation."""
    if not questions:
        return None
    live_questions = Message.objects.filter(conversation=OuterRef("pk"), role=Message.Role.USER, superseded=False)
    opened_by_client = Message.objects.filter(conversation=OuterRef("pk"), meta__from_client=True)
    candidates = list(
        Conversation.objects.filter(user=user)
        .filter(Exists(live_questions.filter(content=questions[0])) | Exists(opened_by_client),
                Exists(live_questions.filter(content=questions[-1])))
        .order_by("-updated_at")
        .values_list("id", flat=True)[:CONVERSATION_CANDIDATES_MAX]
    )
    if not candidates:
        return None
    rows: dict = {cid: [] for cid in candidates}
    opened: set = set()  # the conversations a client's history opened (maybe its latest part only)
    for cid, role, content, meta in (
        Message.objects.filter(conversation_id__in=candidates, superseded=False,
                               role__in=[Message.Role.USER, Message.Role.ASSISTANT])
        .order_by("created_at", "seq")
        .values_list("conversation_id", "role", "content", "meta")
    ):
        rows[cid].append((role, content))
        if not rows[cid][1:] and isinstance(meta, dict) and meta.get("from_client"):
            opened.add(cid)
    best, best_score = None, None
    for cid in candidates:  # newest first: a tie keeps the newest
        stored_questions, stored_answers = _turn_texts(rows[cid])
        # A conversation a client's history opened holds its latest messages only
        # (wire.client_opening): it is compared with as many of the client's, the newest.
        latest = cid in opened
        if stored_questions == _theirs(questions, len(stored_questions), latest):
            asked_again = False
        elif stored_questions[-1:] == [question] and \
                stored_questions[:-1] == _theirs(questions, len(stored_questions) - 1, latest):
            asked_again = True
        else:
            continue
        compared = len(stored_answers) - asked_again  # the client lacks the answer it asks again
        shown = sum(1 for ours, theirs in zip(stored_answers[:compared], _theirs(answers, compared, latest), strict=False)
                    if ours.strip() and theirs.strip().startswith(ours.strip()))
        score = (shown, not asked_again)
        if best_score is None or score > best_score:
            best, best_score = HistoryMatch(conversation_id=cid, asked_again=asked_again), score
    return best
