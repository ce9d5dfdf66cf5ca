"""GET /metrics (docs/design.md#cross-cutting-rules, issue 25 point 1): Prometheus text behind METRICS_TOKEN (404 without
it or with a wrong one); runs by agent and outcome, tool calls by tool, kind and outcome, active
runs, the first-chunk and model-request histograms, breaker states, approvals waiting. Figures are
read as the difference a turn makes (the counters are the process's)."""
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.model.fake_llm import Reply
from testkit.web.sse import chat, read_until

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "metrics-s3cret"


def samples(base: str) -> dict[tuple, float]:
    answer = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _value(found, metric, **labels) -> float:
    return found.get((metric, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def token_set(settings):
    settings.METRICS_TOKEN = TOKEN


def test_no_token_setting_means_no_endpoint(live_asgi, settings):
    settings.METRICS_TOKEN = ""
    assert httpx.get(f"{live_asgi}/metrics", headers={"Authorization": "Bearer x"}).status_code == 404


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer " + "x" * 10_000])
def test_a_wrong_token_is_404(live_asgi, token_set, header):
    headers = {"Authorization": header} if header else {}
    assert httpx.get(f"{live_asgi}/metrics", headers=headers).status_code == 404


def test_a_turn_with_a_tool_call_is_counted(live_asgi, llm_settings, agent, auth_headers, subagent_server, token_set):
    before = samples(live_asgi)
    llm_settings.reply_tool_calls(("call_canteen", {"message": "菜单"}))
    llm_settings.queue(Reply(reasoning="想一想", text="一食堂有红烧肉。"))
    result = chat(live_asgi, {"message": "今天吃什么"}, headers=auth_headers)
    assert result.frames[-1]["full_text"] == "一食堂有红烧肉。"
    after = samples(live_asgi)

    def grew(metric, **labels):
        return _value(after, metric, **labels) - _value(before, metric, **labels)

    assert grew("campus_agent_runs_total", agent=agent.slug, outcome="completed") == 1
    assert grew("campus_agent_tool_calls_total", tool="call_canteen", kind="subagent", outcome="ok") == 1
    assert grew("campus_agent_first_chunk_seconds_count") == 1
    assert grew("campus_agent_llm_request_seconds_count") == 2  # two model rounds
    assert _value(after, "campus_agent_active_runs") == 0
    assert _value(after, "campus_agent_approvals_waiting") == 0
    assert _value(after, "campus_agent_breaker_state", kind="subagent", name="canteen") == 0


def test_a_model_made_tool_name_is_counted_as_unknown(live_asgi, llm_settings, agent, auth_headers, token_set):
    before = samples(live_asgi)
    llm_settings.reply_tool_calls(("no_such_tool_x1", {}))
    llm_settings.reply_text("好的。")
    chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    after = samples(live_asgi)
    assert not any("no_such_tool_x1" in str(key) for key in after)
    key = ("campus_agent_tool_calls_total", (("kind", "unknown"), ("outcome", "failed"), ("tool", "unknown")))
    assert after.get(key, 0) - before.get(key, 0) == 1


def test_an_approval_waiting_is_a_gauge(live_asgi, llm_settings, agent, auth_headers, subagent_server, token_set):
    agent.sub_agents.update(approval_policy="ask")
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订一份"}))
    with httpx.Client(base_url=live_asgi, timeout=15) as client, client.stream(
            "POST", "/api/v1/chat", json={"message": "帮我订午饭"}, headers=auth_headers) as response:
        read_until(response, lambda f: f["type"] == "approval_required")  # the run waits: the stream stays open
    found = samples(live_asgi)
    assert _value(found, "campus_agent_approvals_waiting") == 1
    assert _value(found, "campus_agent_runs_total", agent=agent.slug, outcome="paused") >= 1


def test_the_grafana_dashboard_reads_only_metrics_that_exist():
    """docs/grafana-dashboard.json: valid JSON whose every query names one of our metrics."""
    import json
    import re
    from pathlib import Path

    from django.conf import settings

    dashboard = json.loads((Path(settings.BASE_DIR) / "docs" / "grafana-dashboard.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    known = {"campus_agent_runs_total", "campus_agent_tool_calls_total", "campus_agent_active_runs",
             "campus_agent_first_chunk_seconds_bucket", "campus_agent_llm_request_seconds_bucket",
             "campus_agent_breaker_state", "campus_agent_approvals_waiting"}
    named = {name for expr in exprs for name in re.findall(r"campus_agent_[a-z_]+", expr)}
    assert named and named <= known


@pytest.mark.no_database
def test_an_empty_multiprocess_dir_writes_no_files_into_the_working_directory(tmp_path):
    """`PROMETHEUS_MULTIPROC_DIR=` (empty, as an .env line left blank) means one process: the
    client is not left to take it as the current directory and write its files there."""
    import os
    import subprocess
    import sys

    from django.conf import settings

    code = ("import django; django.setup(); from campus_agent.base.metrics import RUNS, MULTIPROCESS; "
            "RUNS.labels(agent='a', outcome='completed').inc(); print(MULTIPROCESS)")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": "", "DJANGO_SETTINGS_MODULE": "campus_agent.settings",
           "PYTHONPATH": str(settings.BASE_DIR), "LOG_DIR": str(tmp_path / "logs")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert not list(tmp_path.glob("*.db"))
