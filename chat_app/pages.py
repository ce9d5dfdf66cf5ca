"""The student chat page (server-rendered). Streaming itself goes through POST /api/v1/chat.

The page renders its first state (the user's conversations, the enabled agents, the open
conversation's stored messages) on the server, so a reload shows the stored history without
waiting for an API round trip; the browser script only adds what streams in afterwards.
"""
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import Http404
from django.shortcuts import render

from chat_app.chat_input import MESSAGE_MAX
from chat_app.login_forms import LoginForm
from chat_app.models import Conversation, Message, Run
from chat_app.page_catalog import agent_catalogs, tool_labels
from chat_app.selectors import (
    agent_list,
    conversation_get,
    conversation_list,
    feedback_by_answer,
    message_list,
    run_active_get,
)

SIDEBAR_LIMIT = 100  # the sidebar is a recent list, not an archive
HISTORY_LIMIT = 500  # rows shown for one conversation; older ones stay in the database
MESSAGE_FIELDS = ("id", "role", "content", "meta", "chart", "created_at", "superseded")


def _stored_messages(*, conversation: Conversation, active_run: Run | None) -> list[dict]:
    messages = message_list(conversation=conversation)
    if active_run is not None:
        # The run in progress is replayed whole by re-attaching (its finished tool rounds are
        # stored already): show only its question here, not the same rounds twice.
        messages = messages.exclude(Q(request_id=active_run.request_id) & ~Q(role=Message.Role.USER))
    rows = list(messages.reverse().values(*MESSAGE_FIELDS)[:HISTORY_LIMIT])
    rows.reverse()
    # A window that starts at a tool row would show a chip without its call: start at a turn.
    while rows and rows[0]["role"] != "user":
        rows.pop(0)
    return rows


def _selected_agent(*, agents: list[dict], conversation: Conversation | None) -> str | None:
    slugs = [a["slug"] for a in agents]
    if conversation is not None and conversation.agent is not None and conversation.agent.slug in slugs:
        return conversation.agent.slug
    return slugs[0] if slugs else None  # agent_list() puts the default first


@login_required
def chat_page(request, conversation_id=None):
    """`/` (a new conversation) and `/c/<id>/` (a stored one of the signed-in user; 404 otherwise)."""
    conversation = None
    if conversation_id is not None:
        conversation = conversation_get(user=request.user, conversation_id=conversation_id)
        if conversation is None:
            raise Http404("对话不存在")
    enabled_agents = agent_list()
    agents = list(enabled_agents.values("slug", "name"))
    active_run = run_active_get(conversation_id=conversation.id) if conversation else None
    state = {
        "conversation_id": str(conversation.id) if conversation else None,
        "agent": _selected_agent(agents=agents, conversation=conversation),
        "messages": _stored_messages(conversation=conversation, active_run=active_run) if conversation else [],
        # The page re-attaches to an answer still being written (DESIGN §4a).
        "active_run_id": str(active_run.id) if active_run else None,
        "feedback": feedback_by_answer(user=request.user, conversation=conversation) if conversation else {},
        "tools": tool_labels(),
        "catalogs": agent_catalogs(agents=enabled_agents),
        "message_max": MESSAGE_MAX,
    }
    context = {
        "conversations": conversation_list(user=request.user).values("id", "title", "updated_at")[:SIDEBAR_LIMIT],
        "agents": agents,
        "conversation": conversation,
        "state": state,
    }
    return render(request, "chat/page.html", context)


class LoginPage(auth_views.LoginView):
    """`/login/`: Django's login view with the throttled form. A refused attempt answers 429 with
    `Retry-After`, the page showing why in Chinese (form.throttled)."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True
    authentication_form = LoginForm

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.throttled is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.throttled.retry_after)
        return response
