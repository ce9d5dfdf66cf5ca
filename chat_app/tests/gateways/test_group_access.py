"""Who sees what (issue 43, docs/design.md#campus-identity-and-audit): a student not in 研究生 names
the graduate-only agent through every gateway — REST, /v1 with the official `openai` client, the
MCP server with the `mcp` client, A2A with a2a-sdk — and gets the answer an agent that does not
exist gets, never seeing it listed; the model is never given a graduate-only sub-agent's tool,
nor does keyword routing reach it; a graduate sees and uses both. All over the live server
(`live_asgi`), the scripted model and the contract sub-agent."""
import httpx
import mcp_types as types
import openai
import pytest
from a2a.types import GetExtendedAgentCardRequest, TaskState
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from mcp.shared.exceptions import MCPError

from agents_app.access import agents_for, audience_of, tools_for
from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Conversation
from chat_app.tests.gateways.test_a2a_server import _call, _question, _send
from chat_app.tests.gateways.test_mcp_server import mcp_session
from subagents_app.models import SubAgent
from testkit.web.sse import chat, parse_blocks, read_rest, read_until

pytestmark = pytest.mark.django_db(transaction=True)

GRAD_QUESTION = "论文答辩什么时候开始"


@pytest.fixture
def graduates(db) -> Group:
    return Group.objects.create(name="研究生")


@pytest.fixture
def thesis(agent, agent_factory, sub_agent_factory, graduates):
    """Beside the default agent 校园小智 (`call_canteen`, open to all), a sub-agent of 校园小智 and
    a whole agent, `thesis`, both limited to 研究生."""
    grad_office = sub_agent_factory(name="grad-office", display_name="研究生院助手", domain="graduate",
                                    description="研究生院助手：论文、答辩、开题、学位。")
    grad_office.allowed_groups.add(graduates)
    agent.sub_agents.add(grad_office)
    thesis = agent_factory(slug="thesis", name="论文助手", is_default=False, system_prompt="你是论文助手。")
    thesis.allowed_groups.add(graduates)
    return thesis


@pytest.fixture
def graduate(db, password, graduates):
    graduate = get_user_model().objects.create_user(username="20239001", password=password, first_name="小研")
    graduate.groups.add(graduates)
    return graduate


@pytest.fixture
def student_key(user) -> str:
    return api_key_create(user=user, name="客户端")[1]


@pytest.fixture
def graduate_key(graduate) -> str:
    return api_key_create(user=graduate, name="客户端")[1]


def _bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


# --- REST -----------------------------------------------------------------------------------------

def test_rest_a_forbidden_agent_is_answered_as_an_unknown_one_and_never_listed(live_asgi, llm_settings, thesis,
                                                                                 student_key):
    headers = _bearer(student_key)
    forbidden = chat(live_asgi, {"message": "你好", "agent": "thesis"}, headers=headers)
    unknown = chat(live_asgi, {"message": "你好", "agent": "nobody"}, headers=headers)
    assert forbidden.status == unknown.status == 400
    assert {k: v for k, v in forbidden.body_json.items() if k != "request_id"} == \
        {k: v for k, v in unknown.body_json.items() if k != "request_id"}
    assert Conversation.objects.count() == 0 and llm_settings.requests == []

    listed = httpx.get(f"{live_asgi}/api/v1/agents", headers=headers, timeout=10).json()
    assert [a["slug"] for a in listed] == ["xiaozhi"]


def test_rest_a_graduate_sees_and_uses_the_graduate_agent(live_asgi, llm_settings, thesis, graduate_key):
    headers = _bearer(graduate_key)
    listed = httpx.get(f"{live_asgi}/api/v1/agents", headers=headers, timeout=10).json()
    assert [a["slug"] for a in listed] == ["xiaozhi", "thesis"]
    llm_settings.reply_text("开题在九月。")
    result = chat(live_asgi, {"message": "开题什么时候", "agent": "thesis"}, headers=headers)
    assert result.status == 200 and result.text == "开题在九月。"
    assert llm_settings.last_request.messages[0]["content"] == "你是论文助手。"


def test_the_model_is_never_given_a_forbidden_sub_agents_tool(live_asgi, llm_settings, thesis, student_key,
                                                               graduate_key):
    llm_settings.reply_text("好的。")
    chat(live_asgi, {"message": "你好"}, headers=_bearer(student_key))
    assert llm_settings.last_request.tool_names == ["call_canteen"]
    assert "研究生院" not in llm_settings.last_request.messages[0]["content"]

    llm_settings.reply_text("好的。")
    chat(live_asgi, {"message": "你好"}, headers=_bearer(graduate_key))
    assert llm_settings.last_request.tool_names == ["call_canteen", "call_grad_office"]


def test_a_hint_naming_a_forbidden_sub_agents_domain_is_refused_without_naming_it(live_asgi, llm_settings, thesis,
                                                                                   student_key):
    answer = chat(live_asgi, {"message": "你好", "hint_domain": "graduate"}, headers=_bearer(student_key))
    assert answer.status == 400 and "canteen" in answer.body_json["message"]
    assert "graduate" not in answer.body_json["message"]


def test_keyword_routing_never_routes_to_a_forbidden_sub_agent(live_asgi, settings, thesis, student_key,
                                                               graduate_key):
    settings.LLM_BASE_URL = ""  # no model: keyword routing answers
    student = chat(live_asgi, {"message": GRAD_QUESTION}, headers=_bearer(student_key))
    assert student.status == 200 and student.of("tool_call") == []
    graduate = chat(live_asgi, {"message": GRAD_QUESTION}, headers=_bearer(graduate_key))
    assert [call["tool"] for call in graduate.of("tool_call")] == ["call_grad_office"]


def test_a_conversation_whose_agent_was_since_limited_goes_on_with_the_default(live_asgi, llm_settings, thesis,
                                                                                graduates, agent_factory, user,
                                                                                student_key):
    library = agent_factory(slug="library", name="图书馆助手", is_default=False, system_prompt="你是图书馆助手。")
    llm_settings.reply_text("好的。")
    first = chat(live_asgi, {"message": "借书", "agent": "library"}, headers=_bearer(student_key))
    library.allowed_groups.add(graduates)  # staff limit it to 研究生 while the student's conversation exists
    chat(live_asgi, {"message": "还书", "conversation_id": first.frames[0]["conversation_id"]},
         headers=_bearer(student_key))
    assert llm_settings.last_request.messages[0]["content"] == "你是校园小智，回答学生关于校园生活的问题。"
    assert Conversation.objects.get(id=first.frames[0]["conversation_id"]).agent.slug == "xiaozhi"


def test_a_graduates_run_resumed_after_approval_keeps_the_graduate_only_tool(live_asgi, llm_settings, thesis,
                                                                           graduate_key, subagent_server):
    """The resumed turn lists its tools again: with the graduate's groups (read when the run is
    claimed), not with no groups, or the approved call would be no tool of the turn."""
    SubAgent.objects.filter(name="grad-office").update(approval_policy="ask")
    headers = _bearer(graduate_key)
    llm_settings.reply_tool_calls(("call_grad_office", {"message": "答辩时间"}), text="需要你确认。")
    llm_settings.reply_text("答辩在六月。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": GRAD_QUESTION}, headers=headers) as response:
            blocks, raw = read_until(response, lambda f: f["type"] == "approval_required")
            run_id, asked = blocks[0][1]["run_id"], blocks[-1][1]
            decided = httpx.post(f"{live_asgi}/api/v1/runs/{run_id}/approvals", headers=headers, timeout=10,
                                 json={"call_id": asked["call_id"], "decision": "approve"})
            assert decided.status_code == 200
            rest = read_rest(response)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    [result] = [frame for _, frame in later if frame["type"] == "tool_result"]
    assert result["ok"] is True and later[-1][1]["full_text"] == "需要你确认。答辩在六月。"
    assert llm_settings.last_request.tool_names == ["call_canteen", "call_grad_office"]
    assert len(subagent_server.requests) == 1


# --- the page ---------------------------------------------------------------------------------------

def test_the_page_offers_neither_the_agent_nor_the_sub_agent(client, thesis, user, graduate):
    client.force_login(user)
    state = client.get("/").context["state"]
    assert [a["slug"] for a in client.get("/").context["agents"]] == ["xiaozhi"]
    assert set(state["catalogs"]) == {"xiaozhi"}
    assert "研究生院助手" not in str(state["catalogs"]) and "call_grad_office" not in state["tools"]["names"]

    client.force_login(graduate)
    state = client.get("/").context["state"]
    assert set(state["catalogs"]) == {"xiaozhi", "thesis"}
    assert "研究生院助手" in [s["label"] for s in state["catalogs"]["xiaozhi"]["services"]]


# --- /v1 (the official openai client) ---------------------------------------------------------------

def _sdk(base: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=20)


def _ask(sdk: openai.OpenAI, model: str):
    return sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": "你好"}])


def test_openai_a_forbidden_model_is_not_found_as_an_unknown_one(live_asgi, llm_settings, thesis, student_key):
    with _sdk(live_asgi, student_key) as sdk:
        assert [m.id for m in sdk.models.list().data] == ["xiaozhi"]
        with pytest.raises(openai.NotFoundError) as retrieved:
            sdk.models.retrieve("thesis")
        with pytest.raises(openai.NotFoundError) as forbidden:
            _ask(sdk, "thesis")
        with pytest.raises(openai.NotFoundError) as unknown:
            _ask(sdk, "nobody")
    assert forbidden.value.body == {**unknown.value.body, "message": unknown.value.body["message"].replace(
        "nobody", "thesis")}
    assert retrieved.value.status_code == 404
    assert Conversation.objects.count() == 0


def test_openai_a_graduate_lists_and_uses_the_graduate_model(live_asgi, llm_settings, thesis, graduate_key):
    llm_settings.reply_text("开题在九月。")
    with _sdk(live_asgi, graduate_key) as sdk:
        assert [m.id for m in sdk.models.list().data] == ["xiaozhi", "thesis"]
        assert sdk.models.retrieve("thesis").id == "thesis"
        assert _ask(sdk, "thesis").choices[0].message.content == "开题在九月。"


# --- the MCP server (the mcp client) -------------------------------------------------------------------

async def test_mcp_a_forbidden_agents_tool_is_neither_listed_nor_callable(live_asgi, llm_settings, thesis,
                                                                          student_key):
    async with mcp_session(live_asgi, student_key) as session:
        listed = await session.list_tools()
        assert [tool.name for tool in listed.tools] == ["ask_xiaozhi"]
        assert "研究生院助手" not in listed.tools[0].description
        with pytest.raises(MCPError) as forbidden:
            await session.call_tool("ask_thesis", {"message": "你好"})
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("ask_nobody", {"message": "你好"})
    assert forbidden.value.code == unknown.value.code == types.INVALID_PARAMS
    assert forbidden.value.message == unknown.value.message.replace("ask_nobody", "ask_thesis")
    assert await sync_to_async(Conversation.objects.count)() == 0


async def test_mcp_a_graduate_lists_and_calls_the_graduate_agent(live_asgi, llm_settings, thesis, graduate_key):
    llm_settings.reply_text("开题在九月。")
    async with mcp_session(live_asgi, graduate_key) as session:
        listed = await session.list_tools()
        assert [tool.name for tool in listed.tools] == ["ask_xiaozhi", "ask_thesis"]
        assert "研究生院助手" in listed.tools[0].description
        result = await session.call_tool("ask_thesis", {"message": "开题什么时候"})
    assert not result.is_error and result.structured_content["answer"] == "开题在九月。"


# --- A2A (a2a-sdk) -------------------------------------------------------------------------------------

def _a2a_refusal(base: str, key: str, agent: str) -> Exception:
    with pytest.raises(Exception) as raised:  # noqa: PT011 - whatever a2a-sdk raises, compared below
        _send(base, _bearer(key), _question("你好", metadata={"agent": agent}))
    return raised.value


def test_a2a_the_card_names_no_limited_agent_and_a_send_naming_it_is_refused_as_unknown(live_asgi, llm_settings,
                                                                                         thesis, student_key):
    card = httpx.get(f"{live_asgi}/.well-known/agent-card.json", timeout=10).json()
    assert [skill["id"] for skill in card["skills"]] == ["xiaozhi"]
    assert "研究生院助手" not in str(card)
    forbidden, unknown = (_a2a_refusal(live_asgi, student_key, slug) for slug in ("thesis", "nobody"))
    assert (type(forbidden), str(forbidden)) == (type(unknown), str(unknown))
    assert Conversation.objects.count() == 0


def test_a2a_a_graduate_reaches_the_graduate_agent_by_its_slug(live_asgi, llm_settings, thesis, graduate_key):
    llm_settings.reply_text("开题在九月。")
    (event,) = _send(live_asgi, _bearer(graduate_key), _question("开题什么时候", metadata={"agent": "thesis"}))
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert llm_settings.last_request.messages[0]["content"] == "你是论文助手。"


def test_a2a_the_extended_card_lists_the_callers_own_skills(live_asgi, thesis, student_key, graduate_key):
    public = httpx.get(f"{live_asgi}/.well-known/agent-card.json", timeout=10).json()
    assert public["capabilities"]["extendedAgentCard"] is True
    skills = {}
    for who, key in (("student", student_key), ("graduate", graduate_key)):
        card = _call(live_asgi, _bearer(key), "get_extended_agent_card", GetExtendedAgentCardRequest())
        skills[who] = [(skill.id, "研究生院助手" in skill.description) for skill in card.skills]
    assert skills == {"student": [("xiaozhi", False)], "graduate": [("xiaozhi", True), ("thesis", False)]}


def test_the_lists_read_one_query_for_the_groups_beyond_the_kept_catalog(thesis, user, django_assert_num_queries):
    agents_for(audience=audience_of(user=user))  # the catalog read and kept
    with django_assert_num_queries(2):  # the stamp, the user's group ids
        audience = audience_of(user=user)
        agents = agents_for(audience=audience)
        assert [s.name for s in tools_for(agent=agents[0], audience=audience)[1]] == ["canteen"]
