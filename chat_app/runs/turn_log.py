"""The one INFO line a turn writes, when its run ends on this worker (docs/operations.md#logs).

Every way a run ends passes through `RunTask._observed` (chat_app.runs.engine), which writes this
line once in its `finally`: finished, stopped (a student's stop, a client that hung up on a
gateway that stops its run), cancelled by a shutdown, failed, cut by the budget, blocked by
moderation, paused for a person. What a turn logged at INFO before (the request's `→`/`←`, the
turn's start, each model attempt, each tool round, the runtime's and the run's end) is at DEBUG;
warnings and errors are as they were.

The fields are passed as keyword arguments, so loguru keeps them in the record's `extra` too:
a sink that writes JSON (`serialize=True`) has each as a key, beside `request_id`.
"""
from dataclasses import dataclass

from loguru import logger

from campus_agent.base.redaction import clip_text

# How a turn ended (`outcome`); `reason` says more where there is more to say.
OK = "ok"  # answered to its end
FALLBACK = "fallback"  # the model failed, keyword routing answered (docs/design.md#keyword-routing)
# Cut short: reason length / content_filter (the model's own cut), budget (TURN_BUDGET_SEC), failed /
# frame_failed (a bug: its traceback is beside it), store_failed (the reply stored alone or not at all).
INTERRUPTED = "interrupted"
ERROR = "error"  # a failure cut the answer: reason is the code the student was told (50003 …)
BLOCKED = "blocked"  # moderation: reason is `<stage>:<category>`
STOPPED = "stopped"  # stopped: reason says by whom (stop, client_gone, cancelled, deleted)
CANCELLED = "cancelled"  # the worker shut down under it; the partial reply was stored
PAUSED = "paused"  # waits for a person: reason names the tools; the run's resumption writes its own line
OUTCOMES = (OK, FALLBACK, INTERRUPTED, ERROR, BLOCKED, STOPPED, CANCELLED, PAUSED)

TEMPLATE = (
    "turn end outcome={outcome} reason={reason} user={user} agent={agent} run={run} conversation={conversation} "
    "tools={tools} tools_failed={tools_failed} prompt_tokens={prompt_tokens} completion_tokens={completion_tokens} "
    "provider={provider} model={model} first_chunk_ms={first_chunk_ms} total_ms={total_ms} admit_ms={admit_ms} "
    "chars={chars} history={history} resumed={resumed} errors={errors} moderation={moderation} question={question!r}"
)


@dataclass(frozen=True)
class TurnEnd:
    outcome: str
    reason: str | None
    user: int | None
    agent: str
    run: str
    conversation: str
    tools: list[str]
    tools_failed: list[str]
    prompt_tokens: int | None
    completion_tokens: int | None
    provider: str | None
    model: str | None
    first_chunk_ms: int | None  # None: no text (nor reasoning) was sent
    total_ms: int
    admit_ms: int | None  # None: a resumed run (its admission is the answer's request)
    chars: int
    history: int
    resumed: bool
    errors: list[int]  # the codes of the `error` frames the student was sent (a tool's, the model's …)
    moderation: list[str]  # `<stage>:<action>:<category>` of each hit
    question: str  # as the log may keep it: masked, clipped, or `<blocked: category>`; "" when resumed


def turn_end_log(end: TurnEnd) -> None:
    fields = vars(end) | {"question": clip_text(end.question) if end.question else ""}
    logger.info(TEMPLATE, **fields)
