"""Helpers of the routing and usage tests."""
import json
import re

from django.forms.models import model_to_dict

from testkit.model.fake_llm import RecordedRequest, Reply, ScriptedCall

CANTEEN_DESCRIPTION = "食堂助手：食堂、菜单、吃什么、二食堂、晚饭。"
COURSE_DESCRIPTION = "选课助手：课程、选课、老师、学分、名额。"
GREETING = "你好，我是校园小智。"


def route_by_description(request: RecordedRequest) -> Reply | str:
    """Calls the first offered tool whose description names a word of the question (with the
    question as `message`); answers in words when none does."""
    question = request.messages[-1]["content"]
    for tool in request.tools:
        words = [w for w in re.split(r"[、，。：:\s]+", tool["function"]["description"]) if len(w) >= 2]
        if any(word in question for word in words):
            return Reply(tool_calls=[ScriptedCall(tool["function"]["name"], {"message": question})])
    return GREETING


def form_post_data(obj, **changes) -> dict:
    """What the admin change form of `obj` posts, with `changes` applied (M2M as pk lists,
    unchecked booleans left out, None as empty)."""
    data = {}
    for name, value in {**model_to_dict(obj), **changes}.items():
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif isinstance(value, list):
            data[name] = [getattr(item, "pk", item) for item in value]
        elif isinstance(value, dict):
            data[name] = json.dumps(value)
        elif value is not None:
            data[name] = value
    return data
