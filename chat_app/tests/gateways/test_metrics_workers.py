"""/metrics over two worker processes (issue 25 point 1): with PROMETHEUS_MULTIPROC_DIR, a scrape
of either worker reports the host's sum — a turn on A and a turn on B count two runs on both."""
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.processes import asgi_processes

TOKEN = "metrics-s3cret"


@pytest.fixture
def metric_workers(worker_env, tmp_path):
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {**worker_env, "PROMETHEUS_MULTIPROC_DIR": str(shared), "METRICS_TOKEN": TOKEN}
    with asgi_processes("uvicorn", env=env, count=2) as (a, b):
        yield a, b


def _runs(base: str) -> float:
    answer = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert answer.status_code == 200, answer.text
    return sum(sample.value for family in text_string_to_metric_families(answer.text)
               for sample in family.samples if sample.name == "campus_agent_runs_total")


def test_a_scrape_of_either_worker_sums_both(metric_workers, llm_server):
    (a_url, _), (b_url, _) = metric_workers
    answer = httpx.post(f"{a_url}/api/v1/auth/token", json={"username": "20230001", "password": "s3cret-Pass!"})
    token = {"Authorization": f"Bearer {answer.json()['access_token']}"}
    for url in (a_url, b_url):
        llm_server.reply_text("好的。")
        with httpx.Client(timeout=20) as client:
            body = client.post(f"{url}/api/v1/chat", json={"message": "你好"}, headers=token).text
        assert '"type":"done"' in body
    assert _runs(a_url) == _runs(b_url) == 2
