"""/api/v1/… routes (chat stream, auth, REST, OpenAPI schema and docs)."""
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from chat_app.gateways.api import api_keys, auth, knowledge, me, reports, uploads
from chat_app.gateways.api import conversations as rest
from chat_app.gateways.api.runs import run_approvals, run_events, run_stop_view
from chat_app.gateways.api.stream import chat_stream

urlpatterns = [
    path("chat", chat_stream, name="chat-stream"),
    # The four async views are described in the OpenAPI document by chat_app.gateways.api.schema's hook.
    path("runs/<uuid:run_id>/events", run_events, name="run-events"),
    path("runs/<uuid:run_id>/stop", run_stop_view, name="run-stop"),
    path("runs/<uuid:run_id>/approvals", run_approvals, name="run-approvals"),
    path("uploads", uploads.UploadView.as_view(), name="upload-list"),
    path("uploads/<uuid:upload_id>", uploads.UploadFileView.as_view(), name="upload-detail"),
    path("auth/token", auth.TokenView.as_view(), name="auth-token"),
    path("auth/sso", auth.SsoView.as_view(), name="auth-sso"),
    path("auth/logout", auth.LogoutView.as_view(), name="auth-logout"),
    path("api-keys", api_keys.ApiKeyListView.as_view(), name="api-key-list"),
    path("api-keys/<uuid:key_id>", api_keys.ApiKeyDetailView.as_view(), name="api-key-detail"),
    path("me/export", me.MyDataExportView.as_view(), name="me-export"),
    path("me/conversations", me.MyConversationsView.as_view(), name="me-conversations"),
    path("me/accounts", me.MyAccountsView.as_view(), name="me-accounts"),
    path("me/accounts/<int:grant_id>", me.MyAccountView.as_view(), name="me-account"),
    path("agents", rest.AgentListView.as_view(), name="agent-list"),
    path("conversations", rest.ConversationListView.as_view(), name="conversation-list"),
    path("conversations/<uuid:conversation_id>", rest.ConversationDetailView.as_view(), name="conversation-detail"),
    path(
        "conversations/<uuid:conversation_id>/messages", rest.MessageListView.as_view(), name="conversation-messages"
    ),
    path(
        "conversations/<uuid:conversation_id>/last-turn/supersede",
        rest.LastTurnSupersedeView.as_view(),
        name="conversation-last-turn-supersede",
    ),
    path("messages/<uuid:message_id>/feedback", rest.AnswerFeedbackView.as_view(), name="answer-feedback"),
    path("messages/<uuid:message_id>/report", reports.AnswerReportView.as_view(), name="answer-report"),
    path("knowledge/documents/<int:document_id>/file", knowledge.KnowledgeDocumentFileView.as_view(),
         name="knowledge-document-file"),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's init script at docs?script= instead of inline: the CSP
    # allows no inline script.
    path("docs", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
]
