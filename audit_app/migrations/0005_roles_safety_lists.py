"""The 安全管理员 role gets the moderation word lists (audit_app/roles.py): the roles applied again
once safety_app's tables exist (0003's step, run again; it puts each role back to exactly its list)."""

from importlib import import_module

from django.db import migrations

roles_make = import_module("audit_app.migrations.0003_staff_roles").roles_make


class Migration(migrations.Migration):
    dependencies = [
        ("audit_app", "0004_request_id_index"),
        ("safety_app", "0001_word_lists"),
    ]

    operations = [migrations.RunPython(roles_make, migrations.RunPython.noop)]
