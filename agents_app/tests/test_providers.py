"""Several model providers and the fallback chain (agents_app/runtime/providers.py), over real
sockets: two scripted OpenAI-compatible servers on loopback stand for two providers."""
import asyncio
import time
from datetime import timedelta
from email.utils import format_datetime

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from loguru import logger

from agents_app.models import Provider
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk, Done, Error
from agents_app.runtime.llm import LlmProvider, llm_client
from agents_app.runtime.loop import MODEL_INTERRUPTED_TEXT, MODEL_REFUSED_TEXT
from agents_app.runtime.providers import thinking_options
from agents_app.runtime.tracing import ATTEMPT_EVENT
from agents_app.runtime.turn import turn_stream
from campus_agent.base.errors import DOWNSTREAM
from testkit.model.fake_llm import Reply

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="0123456789abcdef", conversation_id="conv-providers", user_id=1,
                 campus_token="campus-token-abc")
PRIMARY_KEY = "sk-primary-0123456789secret"
BACKUP_KEY = "sk-backup-9876543210secret"


async def collect(agent, question: str = "你好", ctx: RunContext = CTX) -> list:
    history = [{"role": "user", "content": question}]
    return [event async for event in turn_stream(agent=agent, history=history, ctx=ctx)]


@pytest.fixture
def retries(settings, llm_settings):
    """Retries on, with a short backoff (a test that measures a wait sets its own)."""
    settings.LLM_RETRIES = 2
    settings.LLM_RETRY_BASE_SEC = 0.01
    return settings


@pytest.fixture
def two_providers(llm_settings, llm_server_second, agent, provider_factory, agent_fallbacks_set):
    """The agent on provider 主 (the first server), falling back to 备用 (the second)."""
    primary = provider_factory(name="主", base_url=llm_settings.url, key=PRIMARY_KEY, default_model="fake-model")
    backup = provider_factory(name="备用", base_url=llm_server_second.url, key=BACKUP_KEY,
                              default_model="backup-model")
    agent.provider = primary
    agent.save()
    agent_fallbacks_set(agent, [backup])
    return primary, backup


async def test_a_429_with_retry_after_is_retried_after_the_wait(retries, llm_settings, agent):
    llm_settings.fail(429, headers={"Retry-After": "1"})
    llm_settings.reply_text("好的，马上查。")

    events = await collect(agent)

    first, second = llm_settings.requests
    assert second.at - first.at >= 1.0  # the header's wait, not the 10 ms backoff
    done = events[-1]
    assert (done.full_text, done.provider, done.model, done.interrupted) == ("好的，马上查。", "default", "fake-model", False)
    assert done.frame(message_id="m")["provider"] == "default"


async def test_a_provider_down_is_retried_then_the_next_provider_answers(retries, llm_settings, llm_server_second,
                                                                        two_providers):
    agent = await sync_to_async(lambda: two_providers[0].agents.get())()
    llm_settings.fail(503, times=3)
    llm_server_second.reply_text("备用模型的回答")

    events = await collect(agent)

    assert len(llm_settings.requests) == 3  # one attempt and LLM_RETRIES=2 retries
    assert len(llm_server_second.requests) == 1
    assert llm_settings.requests[0].headers["authorization"] == f"Bearer {PRIMARY_KEY}"
    assert llm_server_second.last_request.headers["authorization"] == f"Bearer {BACKUP_KEY}"
    assert llm_server_second.last_request.body["model"] == "backup-model"  # the fallback's own model
    done = events[-1]
    assert (done.full_text, done.provider, done.model) == ("备用模型的回答", "备用", "backup-model")
    frame = done.frame(message_id="m")
    assert (frame["provider"], frame["model"]) == ("备用", "backup-model")


async def test_every_provider_down_is_answered_by_keyword_routing(llm_settings, llm_server_second, two_providers,
                                                                 subagent_server):
    agent = await sync_to_async(lambda: two_providers[0].agents.get())()
    llm_settings.fail(500)
    llm_server_second.fail(502)

    events = await collect(agent, "今天中午吃什么")

    assert (len(llm_settings.requests), len(llm_server_second.requests)) == (1, 1)
    done = events[-1]
    assert done.fallback and done.provider is None
    assert all(e.fallback for e in events if isinstance(e, Chunk))
    assert subagent_server.last_request.body["message"] == "今天中午吃什么"


@pytest.mark.parametrize("retry_after", ["99999999", "9"])
async def test_a_retry_after_past_the_budget_is_not_waited_for(retries, llm_settings, agent, subagent_server,
                                                               retry_after):
    """The turn has 8 s left: neither a wait far past LLM_RETRY_MAX_WAIT_SEC nor one of 9 s (within LLM_RETRY_MAX_WAIT_SEC, past the budget) runs,
    nor does the turn sit out its budget (a margin a busy machine cannot eat)."""
    llm_settings.fail(429, headers={"Retry-After": retry_after})
    ctx = RunContext(request_id=CTX.request_id, conversation_id=CTX.conversation_id, campus_token=CTX.campus_token,
                     deadline=asyncio.get_running_loop().time() + 8)
    started = time.monotonic()

    events = await collect(agent, "今天中午吃什么", ctx=ctx)

    assert time.monotonic() - started < 6
    assert len(llm_settings.requests) == 1
    assert events[-1].fallback  # keyword routing answered, at once


@pytest.mark.parametrize("header", ["soon, maybe", "-3", "nan", "9" * 400])
async def test_a_garbage_retry_after_falls_back_to_the_backoff(retries, llm_settings, agent, header):
    retries.LLM_RETRY_BASE_SEC = 0.2
    llm_settings.fail(429, headers={"Retry-After": header})
    llm_settings.reply_text("好")

    events = await collect(agent)

    first, second = llm_settings.requests
    assert 0.2 <= second.at - first.at < 5
    assert events[-1].full_text == "好"


async def test_a_retry_after_http_date_is_honoured(retries, llm_settings, agent):
    # An HTTP date has whole seconds, so `due` is 2–3 s from now; the wait is measured against the
    # date itself, not against the first request (which a loaded machine may send a second late).
    due = (timezone.now() + timedelta(seconds=3)).replace(microsecond=0)
    llm_settings.fail(503, headers={"Retry-After": format_datetime(due, usegmt=True)})
    llm_settings.reply_text("好")

    events = await collect(agent)

    wall_minus_monotonic = time.time() - time.monotonic()
    first, second = llm_settings.requests
    assert second.at + wall_minus_monotonic >= due.timestamp() - 0.05  # the clocks' offset, read twice
    assert events[-1].full_text == "好"


async def test_an_error_in_the_stream_before_any_output_is_retried(retries, llm_settings, agent):
    llm_settings.queue(Reply(text="不会出现", error_after_chunks=1))  # the role-only delta, then an error chunk
    llm_settings.reply_text("重试后的回答")

    events = await collect(agent)

    assert len(llm_settings.requests) == 2
    assert [e.content for e in events if isinstance(e, Chunk)] == ["重试后的", "回答"]


async def test_a_failure_after_the_first_token_is_not_retried(retries, llm_settings, llm_server_second,
                                                              two_providers):
    agent = await sync_to_async(lambda: two_providers[0].agents.get())()
    llm_settings.queue(Reply(text="这是一段会被切断的回答", drop_after_chunks=3))

    events = await collect(agent)

    assert len(llm_settings.requests) == 1 and llm_server_second.requests == []
    assert [e for e in events if isinstance(e, Error)] == [Error(DOWNSTREAM, MODEL_INTERRUPTED_TEXT)]
    done = events[-1]
    assert done.interrupted and done.full_text == "这是一段会被切断" and done.provider == "主"


async def test_a_401_is_not_retried(retries, llm_settings, agent):
    llm_settings.fail(401)

    events = await collect(agent)

    assert len(llm_settings.requests) == 1
    assert events[-2:] == [Error(DOWNSTREAM, MODEL_REFUSED_TEXT.format(status=401)),
                           Done(full_text="", interrupted=True)]


async def test_a_401_goes_on_to_the_next_provider(retries, llm_settings, llm_server_second, two_providers):
    agent = await sync_to_async(lambda: two_providers[0].agents.get())()
    llm_settings.fail(401)
    llm_server_second.reply_text("备用")

    events = await collect(agent)

    assert (len(llm_settings.requests), len(llm_server_second.requests)) == (1, 1)
    assert (events[-1].full_text, events[-1].provider) == ("备用", "备用")


async def test_a_disabled_provider_is_skipped(llm_settings, llm_server_second, two_providers):
    primary, _ = two_providers
    await Provider.objects.filter(pk=primary.pk).aupdate(enabled=False)
    agent = await sync_to_async(lambda: primary.agents.get())()
    llm_server_second.reply_text("备用")

    events = await collect(agent)

    assert llm_settings.requests == [] and events[-1].provider == "备用"


async def test_an_admin_edit_applies_to_the_next_turn(llm_settings, llm_server_second, two_providers):
    primary, _ = two_providers
    agent = await sync_to_async(lambda: primary.agents.get())()
    llm_settings.reply_text("一")
    assert (await collect(agent))[-1].full_text == "一"

    def edit():
        primary.base_url = llm_server_second.url
        primary.api_key_store("sk-rotated-key-000")
        primary.save()

    await sync_to_async(edit)()
    llm_server_second.reply_text("二")

    assert (await collect(agent))[-1].full_text == "二"
    assert llm_server_second.last_request.headers["authorization"] == "Bearer sk-rotated-key-000"
    assert len(llm_settings.requests) == 1


async def test_a_client_per_provider_is_reused_until_the_row_changes(settings):
    one = LlmProvider(name="p", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=5, slot="provider:1",
                      version="2026-12-01T00:00:00")
    client = llm_client(one)
    assert llm_client(one) is client and client.max_retries == 0 and client.timeout == 5
    edited = LlmProvider(name="p", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=5, slot="provider:1",
                         version="2026-12-01T00:00:01")
    assert llm_client(edited) is not client
    assert llm_client() is not llm_client(edited)  # the default provider has a client of its own
    assert "k" not in repr(one).replace("name=", "")  # the key is left out of the repr


@pytest.mark.parametrize(
    ("kind", "thinking", "expected"),
    [
        ("dashscope", "off", {"enable_thinking": False}),
        ("dashscope", "on", {"enable_thinking": True}),
        ("vllm", "off", {"chat_template_kwargs": {"enable_thinking": False}}),
        ("openai", "on", {"reasoning_effort": "medium"}),
        ("openai", "off", {}),
        ("ollama", "off", {"reasoning_effort": "none"}),
        ("other", "on", {}),
        ("dashscope", "", {}),
    ],
)
async def test_the_thinking_switch_reaches_the_request_by_kind(llm_settings, agent, provider_factory, kind,
                                                              thinking, expected):
    def setup():
        agent.provider = provider_factory(name=f"p-{kind}", base_url=llm_settings.url, kind=kind)
        agent.thinking = thinking
        agent.save()

    await sync_to_async(setup)()
    llm_settings.reply_text("好")

    await collect(agent)

    body = llm_settings.last_request.body
    sent = {key: body[key] for key in ("enable_thinking", "chat_template_kwargs", "reasoning_effort", "think")
            if key in body}
    assert sent == expected
    assert thinking_options(kind=kind, thinking=thinking) in ({}, {"extra_body": expected}, expected)


async def test_attempts_are_traced_on_the_round(retries, llm_settings, agent, spans):
    llm_settings.fail(429)
    llm_settings.reply_text("好")

    await collect(agent)

    [span] = spans.named("chat ")
    attempts = [e for e in span.events if e.name == ATTEMPT_EVENT]
    assert [(e.attributes["campus.model.attempt"], e.attributes["campus.model.outcome"][:21]) for e in attempts] == [
        (1, "RateLimitError HTTP 4"), (2, "ok")]
    assert attempts[0].attributes["campus.model.retry_in_sec"] == 0.01
    assert (span.attributes["campus.model.provider"], span.attributes["gen_ai.response.model"]) == (
        "default", "fake-model")
    assert span.attributes["campus.model.attempts"] == 2


async def test_attempts_are_logged_and_the_key_never_is(retries, llm_settings, llm_server_second, two_providers):
    agent = await sync_to_async(lambda: two_providers[0].agents.get())()
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG", format="{message} {extra}")
    try:
        llm_settings.fail(500, times=3)
        llm_server_second.reply_text("备用")
        await collect(agent)
    finally:
        logger.remove(sink)
    text = "\n".join(lines)
    assert text.count("model attempt failed provider='主'") == 3
    assert "model attempt answered provider='备用' model='backup-model' attempt=1" in text
    assert PRIMARY_KEY not in text and BACKUP_KEY not in text


@pytest.mark.parametrize("url", ["file:///etc/passwd", "javascript:alert(1)", "ftp://llm.example.edu.cn/v1",
                                 "http://", "http://llm example/v1", "http://llm.example.edu.cn/v1\n", "llm/v1", ""])
def test_a_base_url_that_is_not_http_is_refused(url):
    from django.core.exceptions import ValidationError

    provider = Provider(name="x", base_url=url, default_model="m")
    with pytest.raises(ValidationError) as caught:
        provider.full_clean()
    assert "base_url" in caught.value.error_dict


async def test_an_agent_with_a_provider_needs_no_llm_base_url(settings, llm_settings, agent, provider_factory):
    settings.LLM_BASE_URL = ""

    def setup():
        agent.provider = provider_factory(name="主", base_url=llm_settings.url, key=PRIMARY_KEY)
        agent.save()

    await sync_to_async(setup)()
    llm_settings.reply_text("好")

    assert (await collect(agent))[-1].provider == "主"


async def test_no_enabled_provider_is_keyword_routing_saying_no_model_is_configured(settings, llm_settings, agent,
                                                                                  provider_factory, subagent_server):
    from agents_app.runtime.fallback import UNCONFIGURED_NOTICE

    def setup():
        agent.provider = provider_factory(name="主", base_url=llm_settings.url, enabled=False)
        agent.save()

    await sync_to_async(setup)()

    events = await collect(agent, "今天中午吃什么")

    assert llm_settings.requests == []
    assert events[0].content == UNCONFIGURED_NOTICE.format(tool="食堂助手") and events[-1].fallback


async def test_a_key_the_provider_echoes_is_never_logged(llm_settings, agent, subagent_server):
    """The provider's own words are logged (and become LlmUnavailable's reason): a key it echoes
    in them is blanked first."""
    key = "sk-test-0123456789abcdef"  # llm_settings' LLM_API_KEY
    llm_settings.queue(Reply(raw_chunks=[{"error": {"message": f"Incorrect API key provided: {key}"}}]))
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG", format="{message}")
    try:
        events = await collect(agent, "今天中午吃什么")
    finally:
        logger.remove(sink)
    assert events[-1].fallback
    assert any("Incorrect API key provided: ***" in line for line in lines)
    assert not any(key in line for line in lines)
