"""A chat turn whose agent's provider is down: the fallback provider answers, the `done` frame
names it, and the stored reply records it (meta.provider / meta.model, Message.model) so usage
is summed per provider and model."""
import pytest
from django.db.models import Sum

from chat_app.models import Message
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_fallback_provider_answers_and_is_recorded(live_asgi, llm_settings, llm_server_second, agent,
                                                       auth_headers, provider_factory, agent_fallbacks_set):
    primary = provider_factory(name="主", base_url=llm_settings.url, key="sk-primary-0001")
    backup = provider_factory(name="备用", base_url=llm_server_second.url, key="sk-backup-0002",
                              default_model="backup-model")
    agent.provider = primary
    agent.save()
    agent_fallbacks_set(agent, [backup])
    llm_settings.fail(503)
    llm_server_second.reply_text("备用模型回答。", usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})

    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)

    [done] = result.of("done")
    assert (done["full_text"], done["provider"], done["model"]) == ("备用模型回答。", "备用", "backup-model")
    assert "sk-backup-0002" not in result.raw and "sk-primary-0001" not in result.raw
    reply = Message.objects.get(id=done["message_id"])
    assert (reply.meta["provider"], reply.meta["model"], reply.model) == ("备用", "backup-model", "backup-model")
    # usage per provider: the rows' meta.provider (docs/runtime.md, "Providers")
    per_provider = (Message.objects.filter(role="assistant", meta__has_key="provider")
                    .values("meta__provider").annotate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")))
    assert list(per_provider) == [{"meta__provider": "备用", "prompt": 7, "completion": 3}]
