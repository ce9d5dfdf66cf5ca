"""The labels an AI answer carries (《人工智能生成合成内容标识办法》, GB 45438-2025; docs/safety.md#labels-内容由-ai-生成).

- The visible label, `LABEL_TEXT` (「内容由 AI 生成」): shown under each answer on the page, added to
  what its copy button copies, written beside each AI message of the data export.
- The implicit label, `aigc_label(...)`: GB 45438's text metadata under the key `AIGC` (here `aigc`,
  as the JSON around it spells its keys), the seven fields of the standard and, beside them, the
  provider and model that answered. The data export, `/v1`, MCP and A2A answers carry it.

One builder, so every channel says the same; it reads nothing but a setting.
"""
from django.conf import settings
from django.utils.translation import gettext_lazy as _

LABEL_TEXT = _("内容由 AI 生成")
AIGC_KEY = "aigc"
# GB 45438's `Label`: "1" the content is AI-generated ("2" may be, "3" suspected to be: a
# propagation platform's findings, never ours).
LABEL_AI_GENERATED = "1"


def aigc_label(*, produce_id: str, provider: str | None = None, model: str | None = None) -> dict:
    """The implicit label of one answer: `produce_id` is its stored message's id (what the `done`
    frame calls `message_id`), `provider` and `model` what answered (the `done` frame's, or the
    final message's `meta`; empty for an answer by keyword routing). The producer is us
    (AIGC_CONTENT_PRODUCER); the propagator's fields are left empty for a platform that passes the
    answer on, and the reserved codes are not used."""
    return {
        "Label": LABEL_AI_GENERATED,
        "ContentProducer": settings.AIGC_CONTENT_PRODUCER,
        "ProduceID": str(produce_id),
        "ReservedCode1": "",
        "ContentPropagator": "",
        "PropagateID": "",
        "ReservedCode2": "",
        "provider": provider or "",
        "model": model or "",
    }
