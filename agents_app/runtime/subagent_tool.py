"""A sub-agent offered to the model as `call_<name>(message)`, behind its circuit breaker
(campus_agent/base/circuit.py): while the breaker is open the tool is still offered, its description
says it is unavailable, and a call fails at once instead of waiting for the timeout.

The sub-agent's protocol picks the client: the seed contract (subagents_app/client.py) or A2A
(subagents_app/a2a_client.py). Both return the same reply, so nothing else here differs, but for
one thing only A2A has: an agent that asks the student something (`input-required`). The turn then
waits for the student's answer (ToolOutcome.elicitation, a one-field form), and the call's next
run sends that answer as the next message of the same A2A task; a student who declines has the
task cancelled instead."""
from __future__ import annotations

from django.utils.translation import gettext_lazy as _

from agents_app.mcp.person import MAX_QUESTIONS_PER_CALL
from agents_app.runtime.context import RunContext
from agents_app.runtime.tool import ElicitationNeeded, Emit, ToolOutcome
from agents_app.runtime.tool_names import subagent_tool_name
from campus_agent.base.circuit import (
    CIRCUIT_OPEN_DESCRIPTION,
    acircuit_enter,
    acircuit_failure,
    acircuit_success,
    circuit_release,
)
from campus_agent.base.request_id import request_id_set
from subagents_app.a2a_client import a2a_call, a2a_task_cancel
from subagents_app.client import subagent_call, subagent_circuit_key, subagent_label
from subagents_app.models import SubAgent

MESSAGE_PARAMETERS = {
    "type": "object",
    "properties": {"message": {"type": "string", "description": "要交给该子 Agent 的问题，写完整、自包含。"}},
    "required": ["message"],
}
MISSING_MESSAGE_TEXT = _("调用参数缺少 message（要交给子 Agent 的问题）。")
CIRCUIT_OPEN_TEXT = _("子 Agent 暂时不可用，请稍后再试。")
# The form an A2A agent's question is put to the student with: one answer in words.
ANSWER_FIELD = "answer"
ANSWER_TITLE = _("你的回答")
NOT_ANSWERED_TEXT = ("学生没有回答子 Agent 的问题，子 Agent 的任务已取消。请据此回答，不要再次调用它，除非学生明确要求。",
                     _("未回答，未执行。"))


def answer_schema() -> dict:
    """The one-field form, titled in the run's language (it is stored with the pause)."""
    return {"type": "object", "required": [ANSWER_FIELD], "properties": {
        ANSWER_FIELD: {"type": "string", "title": str(ANSWER_TITLE), "minLength": 1, "maxLength": 2000}}}
# A probe may take the whole timeout; past it plus this margin another worker may probe.
PROBE_LEASE_MARGIN_SEC = 5


class SubAgentTool:
    parameters = MESSAGE_PARAMETERS
    answers_in_prose = True  # a sub-agent answers the student in sentences

    def __init__(self, *, sub_agent: SubAgent, name: str | None = None, unavailable: bool = False):
        self.sub_agent = sub_agent
        self.approval = sub_agent.approval_policy
        # `name`: the one the turn's assembly made unique; alone, the tool names itself.
        self.name = name or subagent_tool_name(sub_agent=sub_agent.name)
        # `unavailable`: its breaker was open when the turn's tools were assembled.
        self.description = (CIRCUIT_OPEN_DESCRIPTION if unavailable else "") + sub_agent.description

    @property
    def trace_kind(self) -> str:
        """campus.tool.kind on its span (runtime/tracing.py): `subagent`, or `a2a`."""
        return "a2a" if self.sub_agent.protocol == SubAgent.Protocol.A2A else "subagent"

    @property
    def circuit_key(self) -> str:
        return subagent_circuit_key(self.sub_agent)

    @property
    def keyword_text(self) -> str:
        return self.sub_agent.name  # course-select → course, select

    def fallback_args(self, question: str) -> dict | None:
        return {"message": question}  # the question is exactly what a sub-agent takes

    async def run(self, args: dict, ctx: RunContext, emit: Emit) -> ToolOutcome:
        request_id_set(ctx.request_id)  # a task does not see the request's ContextVar value
        message = args.get("message")
        if not isinstance(message, str) or not message.strip():
            return ToolOutcome(text=MISSING_MESSAGE_TEXT, ok=False, error=MISSING_MESSAGE_TEXT)
        answered = ctx.elicitation_answers[-1] if ctx.elicitation_answers else None
        goes_on = answered.get("resume") if answered and self.sub_agent.is_a2a else None
        if goes_on and answered.get("action") != "accept":  # the student would not answer: the task ends
            await a2a_task_cancel(sub_agent=self.sub_agent, task_id=str(goes_on.get("task_id", "")),
                                  request_id=ctx.request_id, conversation_id=ctx.conversation_id,
                                  campus_token=ctx.campus_token)
            return ToolOutcome(text=NOT_ANSWERED_TEXT[0], ok=False, error=NOT_ANSWERED_TEXT[1])
        ticket = await acircuit_enter(source=self.circuit_key, name=f"sub-agent {self.sub_agent.name}",
                                      lease_sec=self.sub_agent.timeout_sec + PROBE_LEASE_MARGIN_SEC)
        if ticket is None:
            return ToolOutcome(text=CIRCUIT_OPEN_TEXT, ok=False, error=CIRCUIT_OPEN_TEXT)
        extra = {}
        if goes_on:
            extra = {"goes_on": goes_on}
            message = str((answered.get("content") or {}).get(ANSWER_FIELD, ""))
        call = a2a_call if self.sub_agent.is_a2a else subagent_call
        try:
            reply = await call(
                sub_agent=self.sub_agent,
                message=message,
                request_id=ctx.request_id,
                conversation_id=ctx.conversation_id,
                campus_token=ctx.campus_token,  # the only hop the campus token is sent to
                on_chunk=emit,
                **extra,
            )
        except BaseException:
            # Cancelled (a stop, the turn's budget): nothing learnt about the sub-agent. A plain
            # cache call, not awaited: an await here could be cancelled again.
            circuit_release(ticket)
            raise
        if reply.source_failed:
            await acircuit_failure(ticket, reason=reply.text)
        else:
            await acircuit_success(ticket)
        if reply.ok:
            return ToolOutcome(text=reply.text, chart=reply.chart, elicitation=self._question(reply, ctx))
        # The model reads the contract's failure text with its reason; the student reads the notice.
        return ToolOutcome(text=reply.text, ok=False, error=reply.notice or reply.text, code=reply.code)

    def _question(self, reply, ctx: RunContext) -> ElicitationNeeded | None:
        """The agent's question for the student (an A2A `input-required`), while the call may still
        wait for one more answer (MAX_QUESTIONS_PER_CALL); else the reply's text stands (it tells
        the model what the agent asked)."""
        if reply.asks is None or len(ctx.elicitation_answers) >= MAX_QUESTIONS_PER_CALL:
            return None
        return ElicitationNeeded(service=subagent_label(self.sub_agent), message=reply.asks["message"], mode="form",
                                 schema=answer_schema(), defaults={},
                                 resume={"task_id": reply.asks["task_id"], "context_id": reply.asks["context_id"]})
