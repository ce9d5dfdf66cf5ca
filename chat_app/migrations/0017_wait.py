"""One model for a run that waits for a person (issue 40 point 2): ToolApproval becomes Wait. What
the person is asked moves from the per-kind columns (mcp_service, service_label, url, question)
into `ask`, shaped by its kind (chat_app/runs/wait.py); an A2A sub-agent's question, until now an
elicitation whose question carried `resume`, becomes its own kind; Run.pause_kind (one value,
"approval", whatever the run waited for) goes."""
from django.db import migrations, models


def _ask(row) -> tuple[str, dict]:
    """(kind, ask) of a row as it was."""
    if row.kind == "authorization":
        return row.kind, {"service_id": row.mcp_service_id, "service": row.service_label, "url": row.url}
    if row.kind != "elicitation":
        return row.kind, {}
    question = row.question or {}
    if question.get("resume"):
        return "question", {"service": row.service_label, "message": question.get("message", ""),
                            "schema": question.get("schema") or {}, "resume": question["resume"]}
    return row.kind, {"service": row.service_label, "message": question.get("message", ""),
                      "mode": question.get("mode", "form"), "schema": question.get("schema") or {},
                      "defaults": question.get("defaults") or {}, "url": row.url}


def asks_forward(apps, schema_editor):
    Wait = apps.get_model("chat_app", "Wait")
    for row in Wait.objects.exclude(kind="approval").iterator():
        row.kind, row.ask = _ask(row)
        row.save(update_fields=["kind", "ask"])


def asks_backward(apps, schema_editor):
    Wait = apps.get_model("chat_app", "Wait")
    for row in Wait.objects.exclude(kind="approval").iterator():
        ask = row.ask or {}
        row.service_label, row.url = str(ask.get("service", ""))[:64], str(ask.get("url", ""))
        if row.kind == "authorization":
            row.mcp_service_id = ask.get("service_id")
        else:
            row.question = {key: ask[key] for key in ("message", "mode", "schema", "defaults", "resume") if key in ask}
            row.kind = "elicitation"
        row.save(update_fields=["kind", "service_label", "url", "mcp_service", "question"])


class Migration(migrations.Migration):

    dependencies = [
        ("agents_app", "0012_catalog_stamp"),
        ("chat_app", "0016_run_language"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="toolapproval", name="toolapproval_run_call_pause"),
        migrations.RemoveIndex(model_name="toolapproval", name="toolapproval_status_expiry"),
        migrations.RenameModel(old_name="ToolApproval", new_name="Wait"),
        migrations.AddField(
            model_name="wait",
            name="ask",
            field=models.JSONField(blank=True, default=dict, help_text="随等待的种类而定：连接账号为服务与授权页面，回答问题为问题、表单与续接信息。", verbose_name="问的内容"),
        ),
        migrations.AlterField(
            model_name="wait",
            name="kind",
            field=models.CharField(choices=[("approval", "批准调用"), ("authorization", "连接账号"), ("elicitation", "回答服务的问题"), ("question", "回答子 Agent 的问题")], default="approval", max_length=16, verbose_name="等待"),
        ),
        migrations.RunPython(asks_forward, asks_backward),
        migrations.RemoveField(model_name="wait", name="mcp_service"),
        migrations.RemoveField(model_name="wait", name="service_label"),
        migrations.RemoveField(model_name="wait", name="url"),
        migrations.RemoveField(model_name="wait", name="question"),
        migrations.AlterField(
            model_name="wait",
            name="run",
            field=models.ForeignKey(on_delete=models.deletion.CASCADE, related_name="waits", to="chat_app.run", verbose_name="运行"),
        ),
        migrations.AlterModelOptions(
            name="wait",
            options={"ordering": ["created_at", "id"], "verbose_name": "等待学生的调用", "verbose_name_plural": "等待学生的调用"},
        ),
        migrations.AddConstraint(
            model_name="wait",
            constraint=models.UniqueConstraint(fields=("run", "call_id", "pause_seq"), name="wait_run_call_pause"),
        ),
        migrations.AddIndex(
            model_name="wait",
            index=models.Index(fields=["status", "expires_at"], name="wait_status_expiry"),
        ),
        migrations.RemoveField(model_name="run", name="pause_kind"),
    ]
