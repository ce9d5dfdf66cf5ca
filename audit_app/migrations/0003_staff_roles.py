"""The three staff roles as groups with exactly their permissions (audit_app/roles.py,
docs/staff.md). Run again, it puts each role back to exactly its list."""
from django.contrib.auth.management import create_permissions
from django.db import migrations

from audit_app.roles import ROLES, roles_apply


def roles_make(apps, schema_editor):
    # Permissions are made after the last migration (post_migrate); a fresh database has none yet.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    roles_apply(group_model=apps.get_model("auth", "Group"), permission_model=apps.get_model("auth", "Permission"))


def roles_remove(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("audit_app", "0002_append_only"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("agents_app", "0016_allowed_groups"),
        ("subagents_app", "0009_allowed_groups"),
        ("insights_app", "0002_usage_provider"),
        ("chat_app", "0020_group_limits"),
    ]

    operations = [migrations.RunPython(roles_make, roles_remove)]
