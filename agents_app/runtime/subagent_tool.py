"""A sub-agent offered to the model as `call_<name>(message)`."""
from __future__ import annotations

from agents_app.runtime.context import RunContext
from agents_app.runtime.tool import Emit, ToolOutcome
from agents_app.runtime.tool_names import subagent_tool_name
from campus_agent.request_id import request_id_set
from subagents_app.client import subagent_call
from subagents_app.models import SubAgent

MESSAGE_PARAMETERS = {
    "type": "object",
    "properties": {"message": {"type": "string", "description": "要交给该子 Agent 的问题，写完整、自包含。"}},
    "required": ["message"],
}
MISSING_MESSAGE_TEXT = "调用参数缺少 message（要交给子 Agent 的问题）。"


class SubAgentTool:
    parameters = MESSAGE_PARAMETERS
    answers_in_prose = True  # a sub-agent answers the student in sentences

    def __init__(self, *, sub_agent: SubAgent, name: str | None = None):
        self.sub_agent = sub_agent
        # `name`: the one the turn's assembly made unique; alone, the tool names itself.
        self.name = name or subagent_tool_name(sub_agent=sub_agent.name)
        self.description = sub_agent.description

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
        reply = await subagent_call(
            sub_agent=self.sub_agent,
            message=message,
            request_id=ctx.request_id,
            conversation_id=ctx.conversation_id,
            campus_token=ctx.campus_token,  # the only hop the campus token is sent to
            on_chunk=emit,
        )
        if reply.ok:
            return ToolOutcome(text=reply.text, chart=reply.chart)
        # The model reads the §5 text with its reason; the student reads the notice.
        return ToolOutcome(text=reply.text, ok=False, error=reply.notice or reply.text, code=reply.code)
