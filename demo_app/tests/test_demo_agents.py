"""The demo sub-agents: their answers, and the sub-agent contract (docs/design.md#sub-agents) through the real client over a socket."""
import json
import time

import httpx
import pytest

from campus_agent.base.json_body import (
    MSG_BODY_NOT_JSON,
    MSG_BODY_TOO_LARGE,
    MSG_CONTENT_TYPE,
    MSG_LONE_SURROGATE,
    MSG_NOT_UTF8,
    MSG_TOO_DEEP,
)
from demo_app.subagents.canteen import canteen_answer
from demo_app.subagents.catalog import DEMO_SUBAGENTS
from demo_app.subagents.course import course_answer
from demo_app.subagents.data import demo_data_load
from demo_app.subagents.views import AGENT_UNKNOWN, BODY_INVALID
from subagents_app.client import subagent_call, subagent_client_close
from subagents_app.health import subagent_health_check
from subagents_app.models import SubAgent
from testkit.processes import asgi_server, project_env

REQUEST_ID = "0123456789abcdef"


def _canteen(name: str) -> dict:
    return next(c for c in demo_data_load(name="canteen")["canteens"] if c["name"] == name)


def _courses() -> list[dict]:
    return demo_data_load(name="course")["courses"]


def assert_chart_shape(chart: dict) -> None:
    """The shape the chat page draws with chart.js."""
    assert chart["type"] in ("bar", "line", "pie")
    assert isinstance(chart["title"], str) and chart["title"]
    assert chart["labels"] and all(isinstance(label, str) for label in chart["labels"])
    for dataset in chart["datasets"]:
        assert isinstance(dataset["label"], str)
        assert len(dataset["data"]) == len(chart["labels"])
        assert all(isinstance(value, int | float) for value in dataset["data"])


# --- answers (pure functions of the question and the bundled data) ---------------------------


def test_canteen_named_meal_lists_that_menu_cheapest_first_and_charts_prices():
    dinner = sorted(_canteen("第二食堂")["menus"]["晚餐"], key=lambda dish: dish["price"])
    answer = canteen_answer(message="二食堂晚饭有什么便宜的")
    assert answer.chart["labels"] == [dish["name"] for dish in dinner]
    assert answer.chart["datasets"][0]["data"] == [dish["price"] for dish in dinner]
    assert_chart_shape(answer.chart)
    assert "第一食堂" not in answer.full_text
    assert f"最实惠：第二食堂的{dinner[0]['name']}" in answer.full_text
    assert len(answer.parts) > 3  # streamed in several chunks


def test_canteen_calorie_question_charts_calories_lowest_first():
    breakfast = sorted(_canteen("第一食堂")["menus"]["早餐"], key=lambda dish: dish["kcal"])
    answer = canteen_answer(message="想减肥，一食堂早餐热量低的有哪些")
    assert answer.chart["datasets"][0]["data"] == [dish["kcal"] for dish in breakfast]
    assert "千卡" in answer.chart["title"]
    assert f"热量最低：第一食堂的{breakfast[0]['name']}" in answer.full_text


def test_canteen_without_canteen_or_meal_compares_all_canteens_at_lunch():
    canteens = demo_data_load(name="canteen")["canteens"]
    answer = canteen_answer(message="食堂有什么好吃的")
    assert answer.chart["labels"] == [c["name"] for c in canteens]
    first_lunch = canteens[0]["menus"]["午餐"]
    assert answer.chart["datasets"][0]["data"][0] == round(sum(d["price"] for d in first_lunch) / len(first_lunch), 1)
    assert "你没有说哪一餐" in answer.full_text


def test_canteen_hours_question_answers_hours_without_chart():
    answer = canteen_answer(message="清真食堂几点开门")
    assert answer.chart is None
    assert _canteen("清真食堂")["hours"]["早餐"] in answer.full_text
    assert "第一食堂" not in answer.full_text


def test_canteen_reads_the_english_words_keyword_routing_sends_it():
    """Issue 42: an English question routed here by its English keywords gets the meal, the
    canteen and the concern it names (the demo's data, and so its answer, stay Chinese)."""
    dinner = sorted(_canteen("第二食堂")["menus"]["晚餐"], key=lambda dish: dish["price"])
    answer = canteen_answer(message="Cheap dinner at Canteen 2?")
    assert answer.chart["labels"] == [dish["name"] for dish in dinner] and "你没有说哪一餐" not in answer.full_text
    assert canteen_answer(message="When does the Halal canteen open?").full_text.startswith("食堂营业时间")
    assert "热量最低" in canteen_answer(message="low calorie breakfast").full_text


def test_course_filters_by_teacher_and_charts_remaining_seats():
    expected = [c for c in _courses() if c["teacher"] == "王芳"]
    answer = course_answer(message="王芳老师教什么课")
    assert answer.chart["labels"] == [c["name"] for c in expected]
    assert answer.chart["datasets"][0]["data"] == [max(c["capacity"] - c["enrolled"], 0) for c in expected]
    assert_chart_shape(answer.chart)


def test_course_combines_credits_and_category():
    expected = {c["name"] for c in _courses() if c["credits"] == 2 and "通识" in c["category"]}
    answer = course_answer(message="有哪些两学分的通识课")
    assert set(answer.chart["labels"]) == expected


def test_course_weekday_and_seat_question_sorts_by_remaining_seats():
    on_wednesday = [c for c in _courses() if "周三" in c["time"]]
    remaining = sorted((max(c["capacity"] - c["enrolled"], 0) for c in on_wednesday), reverse=True)
    answer = course_answer(message="星期三的课还有名额吗")
    assert answer.chart["datasets"][0]["data"] == remaining


def test_course_topic_prefers_the_longest_overlapping_keyword():
    answer = course_answer(message="数据结构还能选吗")
    assert answer.chart["labels"] == ["数据结构"]  # not every course tagged 数据
    assert "都已选满" in answer.full_text


def test_course_with_impossible_conditions_says_so_without_chart():
    answer = course_answer(message="王芳老师的体育课")
    assert answer.chart is None
    assert "没有找到" in answer.full_text


# --- the sub-agent contract over a real socket ---------------------------------------------------


def _row(base: str, name: str) -> SubAgent:
    demo = DEMO_SUBAGENTS[name]
    return SubAgent(name=name, description=demo.description, base_url=f"{base}/demo/subagents/{name}",
                    domain=demo.domain, timeout_sec=5)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("name", "question", "answer"),
    [("canteen", "今天中午一食堂吃啥", canteen_answer), ("course", "李明老师的课还有名额吗", course_answer)],
)
async def test_demo_subagent_passes_the_client_contract(live_asgi, name, question, answer):
    seen: list[tuple[float, str]] = []

    async def on_chunk(text: str) -> None:
        seen.append((time.perf_counter(), text))

    try:
        reply = await subagent_call(
            sub_agent=_row(live_asgi, name), message=question, request_id=REQUEST_ID,
            conversation_id="conv-1", campus_token="campus-token-abcdefghijklmnop", on_chunk=on_chunk,
        )
    finally:
        await subagent_client_close()
    expected = answer(message=question)
    assert reply.ok, reply.text
    assert [text for _, text in seen] == expected.parts
    assert reply.text == "".join(text for _, text in seen) == expected.full_text
    assert seen[-1][0] - seen[0][0] > 0.02  # streamed as it is produced, not in one piece
    assert reply.chart == expected.chart
    assert_chart_shape(reply.chart)


@pytest.mark.django_db(transaction=True)
def test_demo_stream_frames_and_headers(live_asgi):
    url = f"{live_asgi}/demo/subagents/canteen/api/v1/chat"
    body = {"message": "二食堂晚饭", "domain": "canteen"}
    with httpx.stream("POST", url, json=body, headers={"X-Request-Id": REQUEST_ID}, timeout=5) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        assert response.headers["x-request-id"] == REQUEST_ID
        raw = "".join(response.iter_text())
    frames = [json.loads(block.removeprefix("data: ")) for block in raw.split("\n\n") if block]
    kinds = [frame["type"] for frame in frames]
    assert kinds[0] == "session" and kinds[-1] == "done"
    assert {"tool_call", "tool_result"} <= set(kinds)
    assert kinds.count("chunk") > 3
    done = frames[-1]
    assert done["full_text"] == "".join(f["content"] for f in frames if f["type"] == "chunk")
    assert done["chart"]["labels"] == [d["name"] for d in _canteen("第二食堂")["menus"]["晚餐"]]


@pytest.mark.django_db(transaction=True)
def test_demo_rejects_bad_requests_with_json(live_asgi):
    url = f"{live_asgi}/demo/subagents/canteen/api/v1/chat"
    for body in (json.dumps({"message": "   "}).encode(), json.dumps({"message": 3}).encode(), b"{}"):
        response = httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=5)
        assert response.status_code == 400
        assert response.json() == {"code": 40001, "message": BODY_INVALID}
    unknown = httpx.post(f"{live_asgi}/demo/subagents/weather/api/v1/chat", json={"message": "天气"}, timeout=5)
    assert unknown.status_code == 404 and unknown.json() == {"code": 40401, "message": AGENT_UNKNOWN}
    get = httpx.get(url, timeout=5)
    assert (get.status_code, get.json()["code"], get.headers["Allow"]) == (405, 40501, "POST")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        (b"not json", "application/json", 400, MSG_BODY_NOT_JSON),
        (b"[]", "application/json", 400, MSG_BODY_NOT_JSON),
        (b"[" * 1200 + b"]" * 1200, "application/json", 400, MSG_TOO_DEEP),  # was a RecursionError: 500
        (b'{"message": "\\ud800"}', "application/json", 400, MSG_LONE_SURROGATE),
        (b"\xff\xfe", "application/json", 400, MSG_NOT_UTF8),
        (b'{"message": "' + b"x" * (65 * 1024) + b'"}', "application/json", 413, MSG_BODY_TOO_LARGE),
        (b'{"message": "hi"}', "text/plain", 415, MSG_CONTENT_TYPE),
    ],
    ids=["not-json", "array", "deep", "surrogate", "not-utf8", "huge", "text-plain"],
)
def test_demo_checks_bodies_as_the_gateway_does(live_asgi, body, content_type, status, message):
    url = f"{live_asgi}/demo/subagents/canteen/api/v1/chat"
    response = httpx.post(url, content=body, headers={"Content-Type": content_type}, timeout=5)
    assert response.status_code == status
    assert response.json()["message"] == message


@pytest.mark.django_db(transaction=True)
def test_demo_sub_agents_pass_the_admin_health_check(live_asgi):
    for name in DEMO_SUBAGENTS:
        assert subagent_health_check(sub_agent=_row(live_asgi, name)).ok, name
    missing = httpx.get(f"{live_asgi}/demo/subagents/weather/healthz", timeout=5)
    assert missing.status_code == 404


@pytest.mark.parametrize(("environment", "served"), [({}, False), ({"DEMO_ENABLED": "true"}, True)],
                         ids=["default", "enabled"])
def test_demo_sub_agents_are_mounted_only_when_demo_enabled(tmp_path, environment, served):
    """In a real server process, configured only by its environment (the suite itself mounts them)."""
    env = project_env(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", **environment)
    with asgi_server("uvicorn", env=env) as url:
        chat = httpx.post(f"{url}/demo/subagents/canteen/api/v1/chat", json={"message": "二食堂晚饭"}, timeout=10)
        health = httpx.get(f"{url}/demo/subagents/canteen/healthz", timeout=10)
    assert (chat.status_code, health.status_code) == ((200, 200) if served else (404, 404))
