"""`manage.py routing_check` against the scripted model (and keyword routing): the first round's
tool choice is judged, nothing is executed, checks are stored and compared with the last one."""
import io
import itertools
from xml.etree import ElementTree

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from demo_app.catalog import demo_catalog_load
from demo_app.routing_cases import DEMO_CASES, demo_cases_load
from insights_app.models import ANY_TOOL, RoutingCase, RoutingCheck, RoutingOutcome
from insights_app.routing.judge import (
    ARG_MISMATCH,
    DEADLINE_PASSED,
    FORBIDDEN,
    MALFORMED_ANSWER,
    MISSING,
    NO_TOOL_EXPECTED,
)
from insights_app.tests.helpers import route_by_description
from testkit.model.fake_llm import Reply, ScriptedCall

pytestmark = pytest.mark.django_db


def _check(*args: str) -> str:
    out = io.StringIO()
    call_command("routing_check", *args, stdout=out)
    return out.getvalue()


def _calls(name: str, message: str = "二食堂晚饭吃什么") -> Reply:
    return Reply(tool_calls=[ScriptedCall(name, {"message": message})])


def _outcome(check: RoutingCheck) -> RoutingOutcome:
    return check.outcomes.get()


def test_right_tool_passes_and_nothing_runs(llm_settings, canteen_case, routing_agent):
    llm_settings.responder = route_by_description
    output = _check("--repeat", "2")

    check = RoutingCheck.objects.get()
    assert (check.mode, check.model, check.repeat, check.total, check.passed, check.regressed) == (
        "model", "fake-model", 2, 1, 1, 0)
    assert check.tools == ["call_canteen", "call_course"]
    outcome = _outcome(check)
    assert (outcome.passes, outcome.runs, outcome.passed, outcome.change) == (2, 2, True, "new")
    assert outcome.detail[0]["tools"] == [{"name": "call_canteen", "args": {"message": "二食堂晚饭吃什么"}}]
    assert "[通过] 2/2" in output
    # One request per run, each a first round: the agent's prompt, the question, its tools.
    assert len(llm_settings.requests) == 2
    sent = llm_settings.requests[0]
    assert sent.messages == [{"role": "system", "content": routing_agent.system_prompt},
                             {"role": "user", "content": "二食堂晚饭吃什么"}]
    assert sent.tool_names == ["call_canteen", "call_course"] and sent.body["tool_choice"] == "auto"


def test_no_sub_agent_is_called(llm_settings, agent, subagent_server):
    """The check offers a served sub-agent and the model picks it: still no traffic to it."""
    RoutingCase.objects.create(agent=agent, question="今天吃什么", must_call=["call_canteen"])
    llm_settings.responder = lambda request: _calls("call_canteen")
    _check("--repeat", "3")
    assert RoutingCheck.objects.get().passed == 1
    assert subagent_server.requests == []


def test_wrong_tool_fails_with_reasons(llm_settings, canteen_case):
    llm_settings.responder = lambda request: _calls("call_course")
    output = _check("--repeat", "1")
    outcome = _outcome(RoutingCheck.objects.get())
    assert not outcome.passed and outcome.passes == 0
    failures = outcome.detail[0]["failures"]
    assert MISSING.format(tool="call_canteen") in failures
    assert FORBIDDEN.format(tool="call_course") in failures
    assert "[失败] 0/1" in output and FORBIDDEN.format(tool="call_course") in output


def test_no_tool_fails_a_must_call_and_passes_a_no_tool_case(llm_settings, case_factory):
    lunch = case_factory("今天吃什么", must_call=["call_canteen"])
    hello = case_factory("你好", must_not_call=[ANY_TOOL])
    llm_settings.responder = lambda request: "你好！"
    _check("--repeat", "1")
    check = RoutingCheck.objects.get()
    assert check.outcomes.get(case=hello).passed
    lunch_outcome = check.outcomes.get(case=lunch)
    assert not lunch_outcome.passed
    assert lunch_outcome.detail[0]["failures"] == [MISSING.format(tool="call_canteen")]

    llm_settings.responder = lambda request: _calls("call_canteen")
    with pytest.raises(CommandError):  # "你好" passed last time
        _check("--repeat", "1")
    latest = RoutingCheck.objects.first()
    assert latest.outcomes.get(case=hello).detail[0]["failures"] == [NO_TOOL_EXPECTED.format(tools="call_canteen")]


def test_argument_expectation(llm_settings, canteen_case):
    llm_settings.responder = lambda request: _calls("call_canteen", message="今天晚饭吃什么")
    _check("--repeat", "1")
    outcome = _outcome(RoutingCheck.objects.get())
    assert not outcome.passed
    assert outcome.detail[0]["failures"] == [ARG_MISMATCH.format(
        tool="call_canteen", argument="message", contains="二食堂", actual="今天晚饭吃什么")]


def test_history_comes_before_the_question(llm_settings, case_factory):
    history = [{"role": "user", "content": "二食堂在哪"}, {"role": "assistant", "content": "在北区。"}]
    case_factory("那里晚饭吃什么", must_call=["call_canteen"], history=history)
    llm_settings.responder = lambda request: _calls("call_canteen")
    _check("--repeat", "1")
    assert llm_settings.last_request.messages[1:] == [*history, {"role": "user", "content": "那里晚饭吃什么"}]


def test_repeat_and_pass_rate(llm_settings, canteen_case, settings):
    settings.ROUTING_CHECK_CONCURRENCY = 1  # the scripted answers alternate in request order
    answers = itertools.cycle([_calls("call_canteen"), _calls("call_course"), _calls("call_canteen")])
    llm_settings.responder = lambda request: next(answers)

    _check()  # default: 3 runs, 0.66 → 2 of 3 suffice
    outcome = _outcome(RoutingCheck.objects.first())
    assert (outcome.runs, outcome.passes, outcome.passed) == (3, 2, True)

    with pytest.raises(CommandError) as raised:  # 2 of 3 no longer enough: passed → failed
        _check("--pass-rate", "1")
    assert raised.value.returncode == 1
    outcome = _outcome(RoutingCheck.objects.first())
    assert (outcome.runs, outcome.passes, outcome.passed, outcome.change) == (3, 2, False, "regressed")


def test_regression_exit_code_and_difference(llm_settings, canteen_case):
    llm_settings.responder = route_by_description
    _check()
    first = RoutingCheck.objects.get()

    llm_settings.responder = lambda request: _calls("call_course")
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("routing_check", stdout=out)
    assert raised.value.returncode == 1 and "新失败" in str(raised.value)
    second = RoutingCheck.objects.first()
    assert second.previous == first
    assert (second.passed, second.regressed, second.fixed) == (0, 1, 0)
    assert _outcome(second).change == RoutingOutcome.Change.REGRESSED
    assert "新失败" in out.getvalue()

    # Still failing is not a new regression: exit 0, unless --strict.
    _check()
    assert _outcome(RoutingCheck.objects.first()).change == RoutingOutcome.Change.STILL_FAILING
    with pytest.raises(CommandError) as raised:
        _check("--strict")
    assert raised.value.returncode == 1

    llm_settings.responder = route_by_description
    _check()
    assert _outcome(RoutingCheck.objects.first()).change == RoutingOutcome.Change.FIXED


def test_exit_status_of_the_command_line(llm_settings, canteen_case):
    """What a pipeline sees: manage.py exits 1 on a regression."""
    from django.core.management import ManagementUtility

    llm_settings.responder = route_by_description
    _check()
    llm_settings.responder = lambda request: "不用工具"
    with pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "routing_check"]).execute()
    assert exited.value.code == 1


def test_a_failed_model_request_fails_the_run_not_the_check(llm_settings, canteen_case):
    llm_settings.queue(Reply(status=500))
    llm_settings.responder = route_by_description
    _check("--repeat", "2", "--pass-rate", "0.5")
    outcome = _outcome(RoutingCheck.objects.get())
    assert (outcome.runs, outcome.passes, outcome.passed) == (2, 1, True)
    assert any("请求模型失败" in f for run in outcome.detail for f in run["failures"])


def test_junit_report(llm_settings, case_factory, canteen_case, tmp_path):
    case_factory("李老师的课还有名额吗", must_call=["call_course"])
    llm_settings.responder = lambda request: _calls("call_course")
    report = tmp_path / "routing.xml"
    _check("--repeat", "1", "--junit", str(report))

    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert suite.get("name") == "routing.xiaozhi"
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["model"] == "fake-model" and properties["fingerprint"] == RoutingCheck.objects.get().fingerprint
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    failed = cases[f"#{canteen_case.pk} 二食堂晚饭吃什么"].find("failure")
    assert failed.get("message") == "失败：0/1 次选对"
    assert MISSING.format(tool="call_canteen") in failed.text
    assert cases[next(n for n in cases if "李老师" in n)].find("failure") is None


def test_fingerprint_follows_what_the_model_reads(llm_settings, canteen_case, routing_agent, subagents_unserved):
    llm_settings.responder = route_by_description
    _check("--repeat", "1")
    _check("--repeat", "1")
    first, second = RoutingCheck.objects.order_by("id")
    assert first.fingerprint == second.fingerprint
    canteen, _ = subagents_unserved
    canteen.description += "还有夜宵。"
    canteen.save()
    _check("--repeat", "1")
    assert RoutingCheck.objects.first().fingerprint != first.fingerprint


def test_keyword_routing_without_a_model(settings, canteen_case, case_factory):
    settings.LLM_BASE_URL = ""
    case_factory("李老师的课还有名额吗", must_call=["call_course"], must_not_call=["call_canteen"])
    output = _check()
    check = RoutingCheck.objects.get()
    assert (check.mode, check.model, check.repeat, check.passed, check.total) == ("keyword", "", 1, 2, 2)
    assert "关键词路由" in output


def test_model_mode_needs_a_model(settings, canteen_case):
    settings.LLM_BASE_URL = ""
    with pytest.raises(CommandError, match="没有可用的模型"):
        _check("--mode", "model")


@pytest.fixture
def admin_provider(settings, llm_server, provider_factory, routing_agent):
    """No LLM_* settings: the agent's model is the provider chosen on its admin page."""
    settings.LLM_BASE_URL = ""
    provider = provider_factory(name="campus-vllm", base_url=llm_server.url, key="sk-admin-0123456789",
                                default_model="admin-model")
    routing_agent.provider = provider
    routing_agent.save()
    llm_server.responder = route_by_description
    return provider


def test_a_provider_set_in_admin_is_what_the_check_asks(admin_provider, llm_server, canteen_case):
    """Chat turns ask the admin's provider (provider_chain): so does the check, not keyword routing."""
    output = _check("--repeat", "1")
    check = RoutingCheck.objects.get()
    assert (check.mode, check.model, check.passed, check.total) == ("model", "admin-model", 1, 1)
    assert "模型 admin-model" in output
    sent = llm_server.requests[0]
    assert sent.body["model"] == "admin-model" and sent.headers["authorization"] == "Bearer sk-admin-0123456789"


def test_the_admin_button_checks_the_provider_set_in_admin(admin_provider, llm_server, canteen_case, routing_agent,
                                                          staff_client):
    from django.urls import reverse

    staff_client.post(reverse("admin:agents_app_agent_routing_check", args=[routing_agent.pk]))
    check = RoutingCheck.objects.get()
    assert (check.mode, check.model) == ("model", "admin-model")
    assert len(llm_server.requests) == check.repeat


def test_a_disabled_admin_provider_is_keyword_routing_as_in_turns(admin_provider, canteen_case):
    admin_provider.enabled = False
    admin_provider.save()
    _check()
    assert RoutingCheck.objects.get().mode == "keyword"


def test_demo_cases_pass_out_of_the_box(settings, tmp_path):
    settings.LLM_BASE_URL = ""
    demo_catalog_load(base_url="http://127.0.0.1:9/demo/subagents", with_logins=False)
    assert demo_cases_load() == (len(DEMO_CASES), 0)
    assert demo_cases_load() == (0, len(DEMO_CASES))  # again: nothing changes
    _check("--agent", "xiaozhi", "--strict", "--junit", str(tmp_path / "demo.xml"))
    check = RoutingCheck.objects.get()
    assert check.passed == check.total == len(DEMO_CASES) and not check.problems


def test_unknown_agent(canteen_case):
    with pytest.raises(CommandError, match="没有标识为“nobody”的智能体"):
        _check("--agent", "nobody")


def test_a_model_that_never_stops_streaming_ends_at_the_checks_deadline(llm_settings, canteen_case, settings):
    """Issue 20 (7): a never-ending stream held the admin request > 150 s."""
    settings.ROUTING_CHECK_DEADLINE_SEC = 0.5
    endless = Reply(text="想一想" * 2000, chunk_delay=0.05)  # ≈ 75 s of text, never a tool call
    llm_settings.queue(endless, endless)
    _check("--repeat", "2", "--pass-rate", "0.5")
    check = RoutingCheck.objects.get()
    outcome = _outcome(check)
    assert (outcome.runs, outcome.passes, outcome.passed) == (2, 0, False)
    assert [run["failures"] for run in outcome.detail] == [[DEADLINE_PASSED.format(seconds=0.5)]] * 2
    assert check.duration_ms < settings.LLM_TIMEOUT * 1000  # the check's deadline, not the client's read timeout


@pytest.fixture
def malformed_model(settings):
    """An OpenAI-compatible server whose answer has a tool call with a list for `index` and an
    object for `name` (what a broken upstream sends; the scripted model only sends valid calls)."""
    import json

    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from testkit.servers import ThreadedAsgiServer

    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [
        {"index": 0, "delta": {"tool_calls": [{"index": [0], "id": {"x": 1}, "type": "function",
                                               "function": {"name": ["call_canteen"], "arguments": "{}"}}]},
         "finish_reason": None}]}

    async def completions(request):
        async def body():
            yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    with ThreadedAsgiServer(app) as server:
        settings.LLM_BASE_URL = f"{server.url}/v1"
        settings.LLM_API_KEY = "sk-test"
        settings.LLM_MODEL = "m"
        settings.LLM_TIMEOUT = 5.0
        yield server


def test_a_malformed_answer_is_a_failed_run_with_a_reason_staff_can_read(malformed_model, canteen_case):
    """Issue 20 (7): it was recorded as `TypeError: unhashable type: 'list'`."""
    _check("--repeat", "1")
    outcome = _outcome(RoutingCheck.objects.get())
    assert outcome.passed is False
    (failure,) = outcome.detail[0]["failures"]
    assert failure.startswith(MALFORMED_ANSWER.split("{")[0])
