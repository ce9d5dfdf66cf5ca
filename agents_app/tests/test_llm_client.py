"""The LLM client: URL normalisation and one reused client per endpoint."""
import pytest

from agents_app.runtime.llm import llm_base_url_normalise, llm_client


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "https://dashscope.aliyuncs.com/compatible-mode/v1"),
        ("https://dashscope.aliyuncs.com/compatible-mode/v1/", "https://dashscope.aliyuncs.com/compatible-mode/v1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://llm.example.edu.cn/V1", "http://llm.example.edu.cn/V1"),
        ("http://llm.example.edu.cn/api", "http://llm.example.edu.cn/api/v1"),
    ],
)
def test_base_url_is_normalised(raw, expected):
    assert llm_base_url_normalise(raw) == expected


async def test_one_client_per_endpoint_is_reused(settings):
    settings.LLM_BASE_URL = "http://127.0.0.1:9/"
    settings.LLM_API_KEY = "k1"
    first = llm_client()
    assert llm_client() is first
    assert str(first.base_url).rstrip("/") == "http://127.0.0.1:9/v1"
    assert first.max_retries == 0 and first.timeout == settings.LLM_TIMEOUT
    settings.LLM_API_KEY = "k2"
    assert llm_client() is not first


@pytest.mark.django_db(transaction=True)
async def test_client_is_reused_across_turns_against_the_server(llm_settings, agent):
    from agents_app.runtime.context import RunContext
    from agents_app.runtime.loop import run_turn

    ctx = RunContext(request_id="0123456789abcdef", conversation_id="c")
    llm_settings.reply_text("一")
    llm_settings.reply_text("二")
    before = None
    for _ in range(2):
        [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "hi"}], ctx=ctx)]
        client = llm_client()
        assert before is None or client is before
        before = client
    assert len(llm_settings.requests) == 2
