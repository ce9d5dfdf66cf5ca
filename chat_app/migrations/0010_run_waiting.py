"""A waiting run says what it waits for (`pause_kind`); `awaiting_approval` becomes `waiting`."""
from django.db import migrations, models


def forwards(apps, schema_editor):
    Run = apps.get_model("chat_app", "Run")
    Run.objects.filter(status="awaiting_approval").update(status="waiting", pause_kind="approval")


def backwards(apps, schema_editor):
    Run = apps.get_model("chat_app", "Run")
    Run.objects.filter(status="waiting").update(status="awaiting_approval")


class Migration(migrations.Migration):
    dependencies = [("chat_app", "0009_tool_approval")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="pause_kind",
            field=models.CharField(blank=True, choices=[("approval", "工具审批")], default="", max_length=20,
                                   verbose_name="等待内容"),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[("running", "进行中"), ("waiting", "等待用户"), ("finished", "已完成"), ("interrupted", "已中断")],
                default="running", max_length=20, verbose_name="状态",
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
