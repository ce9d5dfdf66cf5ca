"""Two audit events for reports of answers (举报 filed by a student, handled by staff), and the
安全管理员 role given the reports (audit_app/roles.py): the roles applied again once safety_app's
table exists (0003's step, as 0005 did for the word lists)."""

from importlib import import_module

from django.db import migrations, models

roles_make = import_module("audit_app.migrations.0003_staff_roles").roles_make


class Migration(migrations.Migration):

    dependencies = [
        ('audit_app', '0006_moderation_hit_event'),
        ('safety_app', '0002_answer_reports'),
    ]

    operations = [
        migrations.AlterField(
            model_name='auditevent',
            name='event',
            field=models.CharField(choices=[('sign_in', '登录'), ('sign_out', '退出登录'), ('api_key_created', '创建 API 密钥'), ('api_key_revoked', '吊销 API 密钥'), ('staff_change', '后台修改'), ('rollback', '回滚'), ('data_export', '导出个人数据'), ('data_deletion', '删除个人数据'), ('approval_decision', '审批决定'), ('audit_export', '导出审计日志'), ('audit_purge', '清理过期审计日志'), ('moderation_hit', '内容安全命中'), ('report_filed', '举报回答'), ('report_handled', '处理举报')], max_length=32, verbose_name='事件'),
        ),
        migrations.RunPython(roles_make, migrations.RunPython.noop),
    ]
