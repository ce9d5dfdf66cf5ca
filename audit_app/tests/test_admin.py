"""The audit log in admin: nobody adds, changes or deletes a row (a superuser included); filters;
the export (CSV, JSON lines) is itself an audit row."""

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit_app.chain import Event, Outcome, audit_record, audit_verify
from audit_app.models import AuditEvent

LIST = reverse("admin:audit_app_auditevent_changelist")


@pytest.fixture
def rows(db):
    return [
        audit_record(event=Event.SIGN_IN, actor_username="alice", target="page"),
        audit_record(event=Event.SIGN_IN, outcome=Outcome.REFUSED, actor_username='=HYPERLINK("x")', target="page"),
    ]


@pytest.mark.django_db
def test_a_superuser_can_read_rows_but_never_add_change_or_delete_one(staff_client, rows):
    row = rows[0]

    assert staff_client.get(LIST).status_code == 200
    page = staff_client.get(reverse("admin:audit_app_auditevent_change", args=[row.id]))
    assert page.status_code == 200 and 'name="target"' not in page.content.decode()  # shown, not editable
    assert staff_client.get(reverse("admin:audit_app_auditevent_add")).status_code == 403
    assert (
        staff_client.post(reverse("admin:audit_app_auditevent_change", args=[row.id]), {"target": "x"}).status_code
        == 403
    )
    assert (
        staff_client.post(reverse("admin:audit_app_auditevent_delete", args=[row.id]), {"post": "yes"}).status_code
        == 403
    )
    staff_client.post(LIST, {"action": "delete_selected", "_selected_action": [row.id]})  # no such action
    assert AuditEvent.objects.filter(id__in=[r.id for r in rows]).count() == 2
    assert audit_verify()[1] == []


@pytest.mark.django_db
def test_the_list_filters_by_actor_event_outcome_and_date(staff_client, rows):
    def shown(query: dict) -> list[int]:
        return [r.id for r in staff_client.get(LIST, query).context["cl"].result_list]

    assert shown({"actor_username": "alice"}) == [rows[0].id]
    assert shown({"outcome": "refused"}) == [rows[1].id]
    assert {rows[0].id, rows[1].id} <= set(shown({"event": "sign_in"}))
    assert shown({"event": "rollback"}) == []
    day = timezone.localtime(rows[0].time).replace(hour=0, minute=0, second=0, microsecond=0)
    in_range = {"time__gte": day.isoformat(), "time__lt": (day + timedelta(days=1)).isoformat()}
    assert {rows[0].id, rows[1].id} <= set(shown(in_range))
    assert shown({"time__gte": (day + timedelta(days=1)).isoformat()}) == []


@pytest.mark.django_db
def test_an_export_writes_every_field_and_is_itself_audited(staff_client, staff_user, rows):
    ids = [r.id for r in rows]

    response = staff_client.post(LIST + "?outcome=refused", {"action": "export_jsonl", "_selected_action": ids})

    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [line["id"] for line in lines] == [rows[1].id] and lines[0]["hash"] == rows[1].hash  # selected ∩ filter
    export = AuditEvent.objects.order_by("-id").first()
    assert (export.event, export.actor_username, export.target) == (Event.AUDIT_EXPORT, staff_user.username, "jsonl")
    assert export.details["count"] == 1 and export.details["filters"] == {"outcome": "refused"}

    csv_text = b"".join(staff_client.post(LIST, {"action": "export_csv", "_selected_action": ids}).streaming_content)
    text = csv_text.decode("utf-8-sig")
    assert text.splitlines()[0].startswith("id,time,actor_id,actor_username")
    assert "'=HYPERLINK" in text  # a formula a spreadsheet would run is written as text
    assert audit_verify()[1] == []


@pytest.mark.django_db
def test_the_export_command_writes_a_file_and_is_audited(tmp_path, rows):
    from django.core.management import call_command

    out = tmp_path / "audit.jsonl"
    call_command("audit_export", "--format", "jsonl", "--actor", "alice", "--output", str(out))

    assert [json.loads(line)["actor_username"] for line in out.read_text().splitlines()] == ["alice"]
    export = AuditEvent.objects.order_by("-id").first()
    assert export.event == Event.AUDIT_EXPORT and export.actor_username.startswith("manage.py audit_export")
    assert export.details["filters"] == {"actor": "alice"}


@pytest.mark.django_db
def test_the_search_finds_an_account_or_a_request_id_exactly_and_the_count_comes_from_the_ids(staff_client, rows):
    from campus_agent.base.request_id import NO_REQUEST_ID, request_id_set

    request_id_set("0123456789abcdef")
    try:
        tagged = audit_record(event=Event.SIGN_OUT, actor_username="bob")
    finally:
        request_id_set(NO_REQUEST_ID)

    def shown(query: dict):
        return staff_client.get(LIST, query).context["cl"]

    assert [r.id for r in shown({"q": "alice"}).result_list] == [rows[0].id]
    assert [r.id for r in shown({"q": "ali"}).result_list] == []  # exactly, not a substring
    assert [r.id for r in shown({"q": "0123456789abcdef"}).result_list] == [tagged.id]
    everything = shown({})
    assert everything.result_count == AuditEvent.objects.count()  # from the ids, no COUNT(*)
    assert shown({"outcome": "refused"}).result_count == 1
