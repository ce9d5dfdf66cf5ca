"""One INFO line per turn, whatever its end (chat_app/runs/turn_log.py, docs/operations.md#logs): the
live server, the scripted model and the contract sub-agent; loguru's records caught by a sink."""
import json
import threading

import httpx
import openai
import pytest
from loguru import logger

from campus_agent.base.logging import LOG_FORMAT
from chat_app.accounts.api_keys import api_key_create
from chat_app.runs.turn_log import OUTCOMES
from safety_app.models import ListWord, WordList
from testkit.model.fake_llm import Reply
from testkit.web.sse import chat, parse_events

pytestmark = pytest.mark.django_db(transaction=True)

FIELDS = {
    "outcome", "reason", "user", "agent", "run", "conversation", "tools", "tools_failed", "prompt_tokens",
    "completion_tokens", "provider", "model", "first_chunk_ms", "total_ms", "admit_ms", "chars", "history",
    "resumed", "errors", "moderation", "question",
}
LINE_WAIT_SEC = 15.0


class Records:
    """Every record loguru writes while the test runs (all levels), and an event per turn line."""

    def __init__(self):
        self.records: list[dict] = []
        self.json_lines: list[dict] = []
        self._turn_lines = threading.Condition()

    def write(self, message) -> None:
        with self._turn_lines:
            self.records.append(message.record)
            self._turn_lines.notify_all()

    def write_json(self, message) -> None:
        with self._turn_lines:
            self.json_lines.append(json.loads(message))
            self._turn_lines.notify_all()

    def json_of(self, request_id: str) -> list[dict]:
        """The `extra` of the request's INFO lines as the JSON sink wrote them."""
        return [j["record"]["extra"] for j in self.json_lines
                if j["record"]["extra"].get("request_id") == request_id and j["record"]["level"]["name"] == "INFO"]

    def of(self, request_id: str, level: str | None = None) -> list[dict]:
        return [r for r in self.records if r["extra"].get("request_id") == request_id
                and (level is None or r["level"].name == level)]

    def turn_lines(self, request_id: str, count: int = 1) -> list[dict]:
        """The request's first `count` turn lines, once written (waited for: a run goes on after its
        client left)."""
        def written():  # by both sinks (the server's thread calls one after the other)
            lines = [r for r in self.of(request_id) if "outcome" in r["extra"]]
            as_json = [extra for extra in self.json_of(request_id) if "outcome" in extra]
            return lines if len(lines) >= count and len(as_json) >= count else None
        with self._turn_lines:
            lines = self._turn_lines.wait_for(written, timeout=LINE_WAIT_SEC)
        assert lines, f"no {count} turn line(s) for {request_id}"
        return lines[:count]


@pytest.fixture
def records():
    caught = Records()
    sinks = [logger.add(caught.write, format=LOG_FORMAT, level="DEBUG"),
             logger.add(caught.write_json, serialize=True, level="INFO", format="{message}")]
    yield caught
    for sink in sinks:
        logger.remove(sink)


def _held_story_left_after_its_first_chunk(base_url: str, llm_settings, auth_headers: dict,
                                           release: threading.Event) -> str:
    """A turn whose model holds after two chunks until `release` is set, its client gone after the
    first chunk frame: returns the turn's request id."""
    llm_settings.queue(Reply(text="第一段。第二段。第三段。第四段。", chunk_size=4, hold_after_chunks=2, release=release))
    with httpx.Client(base_url=base_url, timeout=10) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "讲个故事"}, headers=auth_headers) as response:
            raw = ""
            for text in response.iter_text():
                raw += text
                if "chunk" in [f["type"] for f in parse_events(raw[: raw.rfind("\n\n") + 2])[0]]:
                    break
            return response.headers["x-request-id"]


def _one_info_line(records: Records, request_id: str) -> dict:
    """The turn's line, after checking it is the request's only INFO line."""
    [line] = records.turn_lines(request_id)
    infos = records.of(request_id, "INFO")
    assert [r["message"] for r in infos] == [line["message"]]
    extra = line["extra"]
    assert FIELDS <= set(extra) and extra["outcome"] in OUTCOMES
    assert line["message"].startswith(f"turn end outcome={extra['outcome']} ")
    # A JSON sink has the fields as keys (loguru's `serialize`), beside the request id.
    as_json = records.json_of(request_id)
    assert len(as_json) == 1 and FIELDS <= set(as_json[0])
    return extra


def test_a_finished_turn_writes_one_info_line(live_asgi, llm_settings, agent, auth_headers, user, records):
    llm_settings.reply_text("你好，我是校园小智。", usage={"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21})
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    assert result.types[-1] == "done"

    request_id = result.headers["x-request-id"]
    line = _one_info_line(records, request_id)
    session = result.frames[0]
    assert line["outcome"] == "ok" and line["reason"] is None
    assert (line["user"], line["agent"], line["run"], line["conversation"]) == (
        user.pk, agent.slug, session["run_id"], session["conversation_id"])
    assert (line["tools"], line["tools_failed"]) == ([], [])
    assert (line["prompt_tokens"], line["completion_tokens"]) == (12, 9)
    assert (line["provider"], line["model"]) == ("default", "fake-model")
    assert 0 <= line["admit_ms"] <= line["first_chunk_ms"] <= line["total_ms"]
    assert line["chars"] == len("你好，我是校园小智。") and line["question"] == "你好" and line["resumed"] is False
    # What was INFO before is still written, at DEBUG: the request's `→`/`←`, the turn's start,
    # the model's attempt, the runtime's end.
    debug = " | ".join(r["message"] for r in records.of(request_id, "DEBUG"))
    for was_info in ("→ POST /api/v1/chat", "← POST /api/v1/chat status=200", "chat turn start",
                     "model attempt answered", "turn done", "run end"):
        assert was_info in debug


def test_a_tool_turn_names_its_tools_and_failures(live_asgi, llm_settings, agent, auth_headers, subagent_server,
                                                  records):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天吃啥"}), ("no_such_tool", {}))
    llm_settings.reply_text("一食堂有红烧肉。")
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)
    assert result.types[-1] == "done"

    request_id = result.headers["x-request-id"]
    line = _one_info_line(records, request_id)
    assert line["outcome"] == "ok"
    assert line["tools"] == ["call_canteen", "no_such_tool"] and line["tools_failed"] == ["no_such_tool"]
    debug = " | ".join(r["message"] for r in records.of(request_id, "DEBUG"))
    assert "round=1 tool calls=" in debug and "sub-agent call name=canteen" in debug


def test_a_failed_sub_agent_is_a_warning_beside_the_turn_line(
    live_asgi, llm_settings, agent, auth_headers, subagent_server, records
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:error]] 今天吃啥"}))
    llm_settings.reply_text("查询失败了。")
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)

    request_id = result.headers["x-request-id"]
    line = _one_info_line(records, request_id)
    assert (line["outcome"], line["errors"], line["tools_failed"]) == ("ok", [50001], ["call_canteen"])
    assert [r["message"].split(" ok=")[0] for r in records.of(request_id, "WARNING")] == [
        "sub-agent done name=canteen"]


@pytest.mark.parametrize("fallback", [False, True])
def test_a_model_failure_writes_one_info_line(live_asgi, llm_settings, agent, auth_headers, settings, records,
                                              fallback):
    settings.KEYWORD_FALLBACK_ENABLED = fallback
    llm_settings.fail(500)
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    assert result.types[-1] == "done"

    request_id = result.headers["x-request-id"]
    line = _one_info_line(records, request_id)
    if fallback:
        assert (line["outcome"], line["reason"]) == ("fallback", None)
    else:
        assert (line["outcome"], line["reason"]) == ("error", "50003")
    assert line["prompt_tokens"] is None and line["provider"] is None
    assert records.of(request_id, "WARNING")  # the failure's own warnings, as before


def test_a_model_cut_mid_answer_is_an_error(live_asgi, llm_settings, agent, auth_headers, settings, records):
    settings.KEYWORD_FALLBACK_ENABLED = False
    llm_settings.queue(Reply(text="第一段。第二段。第三段。第四段。", chunk_size=4, drop_after_chunks=2))
    result = chat(live_asgi, {"message": "讲讲"}, headers=auth_headers)
    assert result.text and result.frames[-1]["interrupted"] is True

    line = _one_info_line(records, result.headers["x-request-id"])
    assert (line["outcome"], line["reason"], line["errors"]) == ("error", "50003", [50003])
    assert line["chars"] == len(result.text) and line["first_chunk_ms"] is not None


def test_a_client_gone_mid_stream_leaves_the_turn_to_write_its_line(
    live_asgi, llm_settings, agent, auth_headers, records
):
    """The response is a follower, not the run (docs/design.md#runs): the run finishes after its
    client left, and writes its one line then, not at the hang-up."""
    release = threading.Event()
    request_id = _held_story_left_after_its_first_chunk(live_asgi, llm_settings, auth_headers, release)
    assert not records.of(request_id, "INFO")  # the hang-up wrote none
    release.set()

    line = _one_info_line(records, request_id)
    assert line["outcome"] == "ok" and line["chars"] == len("第一段。第二段。第三段。第四段。")


def test_an_openai_client_that_hangs_up_stops_its_run(live_asgi, llm_settings, agent, user, records):
    """A client of /v1 cannot come back: its hang-up stops the run, and the line says why."""
    release = threading.Event()
    llm_settings.queue(Reply(text="慢慢地说一段很长的回答，" * 4, chunk_size=4, hold_after_chunks=2, release=release))
    key = api_key_create(user=user, name="log test")[1]
    try:
        with openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=key, max_retries=0) as sdk:
            raw = sdk.chat.completions.with_raw_response.create(
                model=agent.slug, messages=[{"role": "user", "content": "慢慢说"}], stream=True)
            request_id = raw.headers["x-request-id"]
            stream = raw.parse()
            next(iter(stream))
            stream.close()  # the connection goes away
        line = _one_info_line(records, request_id)
    finally:
        release.set()
    assert (line["outcome"], line["reason"]) == ("stopped", "client_gone")


@pytest.mark.parametrize("who", ["signed in", "nobody"])
def test_a_refused_turn_keeps_its_request_line(live_asgi, llm_settings, agent, auth_headers, records, who):
    """No turn ran, so no turn line: the request's `←` with its status stays at INFO, whether the view
    refused it (an empty question) or the intake did before reading its body (no caller)."""
    headers, status = (auth_headers, 400) if who == "signed in" else ({}, 401)
    with httpx.Client(base_url=live_asgi, timeout=10) as client:
        response = client.post("/api/v1/chat", json={"message": ""}, headers=headers)
    assert response.status_code == status
    infos = [r["message"] for r in records.of(response.headers["x-request-id"], "INFO")]
    assert len(infos) == 1 and infos[0].startswith(f"← POST /api/v1/chat status={status} cost_ms=")


def test_a_turn_cut_by_its_budget_writes_one_info_line(live_asgi, llm_settings, agent, auth_headers, settings,
                                                       records):
    settings.KEYWORD_FALLBACK_ENABLED = False
    settings.TURN_BUDGET_SEC = 1.0
    llm_settings.queue(Reply(text="第一段。第二段。第三段。第四段。", chunk_size=4, hang_after_chunks=2))
    result = chat(live_asgi, {"message": "讲讲"}, headers=auth_headers)
    assert result.frames[-1]["interrupted"] is True

    request_id = result.headers["x-request-id"]
    line = _one_info_line(records, request_id)
    assert (line["outcome"], line["reason"], line["errors"]) == ("interrupted", "budget", [50003])
    assert line["total_ms"] >= 1000


def test_a_blocked_question_writes_one_info_line_without_the_word(live_asgi, llm_settings, agent, auth_headers,
                                                                  records):
    politics = WordList.objects.create(name="涉政", category="涉政", action="block", answer=False)
    ListWord.objects.create(word_list=politics, word="法轮")
    result = chat(live_asgi, {"message": "法轮今天开吗"}, headers=auth_headers)
    assert result.types[1] == "moderation"

    line = _one_info_line(records, result.headers["x-request-id"])
    assert (line["outcome"], line["reason"]) == ("blocked", "question:涉政")
    assert line["moderation"] == ["question:block:涉政"] and line["question"] == "<blocked: 涉政>"
    assert "法轮" not in line["question"]


def test_a_turn_that_waits_for_a_person_writes_a_line_at_its_pause_and_at_its_end(
    live_asgi, llm_settings, agent, sub_agent, auth_headers, subagent_server, records
):
    """Its run is two runs of the engine (the pause stored, then resumed by the answer): each writes
    its line, under the turn's request id; the answer's own request logs as any request does."""
    sub_agent.approval_policy = "ask"
    sub_agent.save()
    llm_settings.reply_tool_calls(("call_canteen", {"message": "帮我订一份午饭"}))
    llm_settings.reply_text("已经为你订好了。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            request_id = response.headers["x-request-id"]
            raw = ""
            for text in response.iter_text():
                raw += text
                frames = parse_events(raw[: raw.rfind("\n\n") + 2])[0]
                if frames and frames[-1]["type"] == "approval_required":
                    break
        paused = _one_info_line(records, request_id)
        assert (paused["outcome"], paused["reason"], paused["tools"]) == ("paused", "call_canteen", ["call_canteen"])

        asked = frames[-1]
        answer = client.post(f"/api/v1/runs/{frames[0]['run_id']}/approvals", headers=auth_headers,
                             json={"call_id": asked["call_id"], "decision": "approve"})
        assert answer.status_code == 200
    records.turn_lines(request_id, 2)
    assert [r["message"] for r in records.of(request_id, "INFO")] == [r["message"] for r in records.turn_lines(request_id, 2)]
    resumed = records.turn_lines(request_id, 2)[1]["extra"]
    assert (resumed["outcome"], resumed["resumed"], resumed["tools"]) == ("ok", True, ["call_canteen"])
    assert resumed["admit_ms"] is None and resumed["chars"] == len("已经为你订好了。")


def test_a_run_cancelled_by_a_shutdown_writes_its_line(live_asgi_session, live_asgi, llm_settings, agent,
                                                       auth_headers, records):
    """A worker that stops cancels its runs (as the test server's reset does): each stores its partial
    reply and writes its line on the way out."""
    release = threading.Event()
    try:
        request_id = _held_story_left_after_its_first_chunk(live_asgi, llm_settings, auth_headers, release)
        live_asgi_session.tasks_cancel(everything=True)
    finally:
        release.set()
    line = _one_info_line(records, request_id)
    assert (line["outcome"], line["reason"]) == ("cancelled", "shutdown")
