"""The suite's servers run for the whole session and are reset between tests
(testkit/servers.py, docs/testing.md): nothing one test did reaches the next."""
import threading

import httpx

from testkit.model.fake_llm import NO_SCRIPT_MESSAGE, FakeLlm, Reply
from testkit.polling import wait_for
from testkit.subagents.contract_agent import ContractAgent


def _post_in_thread(url: str, **kwargs) -> threading.Thread:
    def post() -> None:
        try:
            httpx.post(url, timeout=30, **kwargs)
        except httpx.HTTPError:
            pass  # the reset closes the connection: what a client of a stopped server sees

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def test_a_reset_double_forgets_its_script_records_and_settings_and_ends_what_was_in_flight():
    with FakeLlm() as llm:
        llm.reply_text("留给下一个测试？")
        llm.responder = lambda request: "不该出现"
        llm.model = "another-model"
        llm.added_by_a_test = True
        llm.stall(30)  # answered after a `reset`? the handler is cancelled instead
        llm.queue(Reply(text="慢"))
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        first = httpx.post(f"{llm.url}/chat/completions", json=body, timeout=10)  # takes the first reply
        assert first.status_code == 200
        hung = _post_in_thread(f"{llm.url}/chat/completions", json=body)
        wait_for(lambda: len(llm.requests) == 2, what="the stalled request to arrive")

        llm.reset()

        hung.join(timeout=5)
        assert not hung.is_alive()  # the stalled reply was ended, not left to answer later
        assert llm.requests == [] and llm.pending == 0 and llm.responder is None
        assert llm.model == "fake-model" and not hasattr(llm, "added_by_a_test")
        answer = httpx.post(f"{llm.url}/chat/completions", json=body, timeout=10)
        assert answer.status_code == 500 and answer.json()["error"]["message"] == NO_SCRIPT_MESSAGE


def test_a_reset_sub_agent_answers_in_its_default_mode_with_fresh_events():
    with ContractAgent(name="canteen") as agent:
        cut_before = agent.stream_cut
        agent.default_mode = "timeout"
        agent.chunk_delay = 0.5
        agent.stream_cut.set()
        hung = _post_in_thread(f"{agent.url}/api/v1/chat", json={"message": "你好"})
        wait_for(lambda: agent.requests, what="the request to arrive")

        agent.reset()

        hung.join(timeout=5)
        assert not hung.is_alive()
        assert agent.requests == [] and agent.default_mode == "normal" and agent.chunk_delay == 0.02
        assert agent.stream_cut is not cut_before and not agent.stream_cut.is_set()
        answer = httpx.post(f"{agent.url}/api/v1/chat", json={"message": "你好"}, timeout=10)
        assert answer.status_code == 200 and '"type": "done"' in answer.text
