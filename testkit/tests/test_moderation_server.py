"""The scripted moderation server (testkit/moderation_server.py): each endpoint answers a scripted
verdict in its own format, and a reset forgets the script and ends a hung answer."""
import threading

import httpx

from testkit.moderation_server import FakeModeration


def test_each_endpoint_answers_in_its_format_and_a_reset_forgets_everything():
    with FakeModeration() as server:
        server.flag("violence").flag("violence").hang().flag()
        moderated = httpx.post(f"{server.url}/moderations", json={"model": "m", "input": "x"}, timeout=10).json()
        guarded = httpx.post(f"{server.url}/chat/completions", json={"model": "g", "messages": []}, timeout=10).json()
        assert moderated["results"][0]["flagged"] is True and moderated["results"][0]["categories"]["violence"] is True
        assert guarded["choices"][0]["message"]["content"] == "Safety: Unsafe\nCategories: Violent"

        server.asked.clear()  # set by the two answered: wait for the hung one
        ended = threading.Event()

        def hung() -> None:
            try:
                httpx.post(f"{server.url}/moderations", json={}, timeout=30)
            except httpx.HTTPError:
                pass
            ended.set()

        threading.Thread(target=hung, daemon=True).start()
        assert server.asked.wait(10)
        assert not ended.is_set()
        server.reset()
        assert ended.wait(10)  # the hung answer was ended by the reset
        assert server.requests == [] and not server.asked.is_set()
        unscripted = httpx.post(f"{server.url}/moderations", json={"model": "m", "input": "x"}, timeout=10).json()
        assert unscripted["results"][0]["flagged"] is False  # the last scripted flag is gone
