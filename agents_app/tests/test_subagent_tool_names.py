"""A sub-agent's tool name stays within the model API's limits, however long its name."""
import re

import pytest
from asgiref.sync import sync_to_async

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Done, ToolResult
from agents_app.runtime.loop import run_turn
from subagents_app.client import subagent_client_close
from testkit.model.fake_llm import Reply, ScriptedCall
from testkit.subagents.contract_agent import answer_chunks

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="0123456789abcdef", conversation_id="conv-42", user_id=1, campus_token="")
LONG_NAME = "campus-" + "x" * 49 + "-notice"  # 63 characters: the longest name the model allows


@pytest.fixture(autouse=True)
async def _close_shared_clients():
    yield
    await subagent_client_close()


async def test_a_63_character_sub_agent_name_is_offered_within_64_characters_and_routes(
    llm_settings, agent_factory, sub_agent_factory, subagent_server
):
    assert len(LONG_NAME) == 63
    long_one = await sync_to_async(sub_agent_factory)(name=LONG_NAME, description="通知公告")
    agent = await sync_to_async(agent_factory)(sub_agents=[long_one])
    offered: list[str] = []

    def responder(request):
        if any(m["role"] == "tool" for m in request.messages):
            return "好的"
        offered.extend(request.tool_names)  # call the tool by the name it was offered under
        return Reply(tool_calls=[ScriptedCall(request.tool_names[0], {"message": "有什么通知"}, id="call_1")])

    llm_settings.responder = responder
    events = [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "通知"}], ctx=CTX)]

    assert len(offered) == 1
    name = offered[0]
    assert len(name) <= 64 and re.fullmatch(r"[a-z0-9_-]+", name) and name.startswith("call_campus_")
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.ok and result.content == "".join(answer_chunks("有什么通知"))
    assert subagent_server.last_request is not None
    assert isinstance(events[-1], Done)
