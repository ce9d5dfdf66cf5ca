"""The three staff roles as groups with exactly their permissions (audit_app/roles.py,
docs/staff.md). Run again, it puts each role back to exactly its list."""
from django.contrib.auth.management import create_permissions
from django.db import migrations

from audit_app.roles import ROLES, role_codenames


def roles_make(apps, schema_editor):
    # Permissions are made after the last migration (post_migrate); a fresh database has none yet.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role in ROLES:
        wanted = role_codenames(role)
        permissions = [p for p in Permission.objects.select_related("content_type")
                       if (p.content_type.app_label, p.codename) in wanted]
        missing = wanted - {(p.content_type.app_label, p.codename) for p in permissions}
        if missing:
            raise RuntimeError(f"{role}: no such permission {sorted(missing)}")
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(permissions)


def roles_remove(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("audit_app", "0002_append_only"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("agents_app", "0015_text_line_endings"),
        ("subagents_app", "0008_history"),
        ("insights_app", "0002_usage_provider"),
        ("chat_app", "0018_run_one_active_per_conversation"),
    ]

    operations = [migrations.RunPython(roles_make, roles_remove)]
