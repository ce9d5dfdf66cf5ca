"""/v1/… routes: the OpenAI-compatible API (docs/design.md#other-clients, docs/clients.md)."""
from django.urls import path

from chat_app.gateways.openai.views import chat_completions, model_detail, models

urlpatterns = [
    path("models", models, name="openai-models"),
    path("models/<str:model_id>", model_detail, name="openai-model"),
    path("chat/completions", chat_completions, name="openai-chat-completions"),
]
