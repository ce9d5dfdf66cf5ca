"""Migration 0017 turns ToolApproval into Wait: what each row asked moves from the per-kind
columns into `ask`, an A2A agent's question becomes its own kind, and the way back restores the
columns (issue 40 point 2). The API and the frames read the migrated rows as before."""
from datetime import timedelta

import pytest
from django.utils import timezone

from chat_app.runs.wait import wait_ask
from testkit.migrations import migrate_to, migrate_to_newest, newest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

# agents_app stays at its newest migration (its rows are made with the columns the database has).
AGENTS_NOW = newest("agents_app")
BEFORE = [("chat_app", "0016_run_language"), AGENTS_NOW]
AFTER = [("chat_app", "0017_wait"), AGENTS_NOW]
FORM = {"type": "object", "properties": {"room": {"type": "string"}}}



def test_every_kind_of_waiting_call_keeps_what_it_asked_both_ways():
    old_apps = migrate_to(BEFORE)
    try:
        User = old_apps.get_model("auth", "User")
        Conversation = old_apps.get_model("chat_app", "Conversation")
        Run = old_apps.get_model("chat_app", "Run")
        ToolApproval = old_apps.get_model("chat_app", "ToolApproval")
        McpService = old_apps.get_model("agents_app", "McpService")
        student = User.objects.create(username="20230078")
        run = Run.objects.create(conversation=Conversation.objects.create(user=student, title="t"), user=student,
                                 status="waiting", pause_kind="approval", heartbeat_at=timezone.now())
        service = McpService.objects.create(name="library", protocol="streamable-http",
                                            config={"url": "https://lib.example/mcp"})
        expires = timezone.now() + timedelta(minutes=10)

        def row(call_id, **fields):
            return ToolApproval.objects.create(run=run, call_id=call_id, tool="t", args="{}", expires_at=expires, **fields)

        row("c1")
        row("c2", kind="authorization", mcp_service=service, service_label="图书馆", url="https://auth.example/a")
        row("c3", kind="elicitation", service_label="选课", url="",
            question={"message": "选哪间？", "mode": "form", "schema": FORM, "defaults": {"room": "A"}})
        row("c4", kind="elicitation", service_label="图书馆助手",
            question={"message": "哪一天？", "mode": "form", "schema": FORM, "defaults": {},
                      "resume": {"task_id": "t-1", "context_id": "x-1"}},
            answer={"action": "accept", "content": {"room": "周六"}}, status="approved")

        new_apps = migrate_to(AFTER)
        Wait = new_apps.get_model("chat_app", "Wait")
        waits = {w.call_id: w for w in Wait.objects.filter(run_id=run.id)}
        assert {c: w.kind for c, w in waits.items()} == {
            "c1": "approval", "c2": "authorization", "c3": "elicitation", "c4": "question"}
        assert waits["c1"].ask == {}
        assert waits["c2"].ask == {"service_id": service.pk, "service": "图书馆", "url": "https://auth.example/a"}
        assert waits["c3"].ask == {"service": "选课", "message": "选哪间？", "mode": "form", "schema": FORM,
                                   "defaults": {"room": "A"}, "url": ""}
        assert waits["c4"].ask == {"service": "图书馆助手", "message": "哪一天？", "schema": FORM,
                                   "resume": {"task_id": "t-1", "context_id": "x-1"}}
        assert waits["c4"].answer == {"action": "accept", "content": {"room": "周六"}}
        # Read back typed, and shown as the same frames as before the move.
        assert wait_ask(waits["c4"]).event(waits["c4"]).frame()["type"] == "elicitation_required"
        assert wait_ask(waits["c2"]).event(waits["c2"]).frame()["url"] == "https://auth.example/a"

        back_apps = migrate_to(BEFORE)
        ToolApproval = back_apps.get_model("chat_app", "ToolApproval")
        rows = {a.call_id: a for a in ToolApproval.objects.filter(run_id=run.id)}
        assert (rows["c2"].kind, rows["c2"].mcp_service_id, rows["c2"].service_label) == ("authorization", service.pk,
                                                                                         "图书馆")
        assert rows["c4"].kind == "elicitation" and rows["c4"].question["resume"] == {"task_id": "t-1",
                                                                                      "context_id": "x-1"}
        assert rows["c3"].question["defaults"] == {"room": "A"}
    finally:
        migrate_to_newest()
