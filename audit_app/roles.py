"""The three staff roles (docs/staff.md; 等保 2.0 level 3 separates them): each a group holding
exactly its permissions, made by migrations/0003_staff_roles.py. The admin shows a member only
the pages of their role's permissions.

A role is given by a superuser only: a member of staff who is not one (a 安全管理员 with the
right to change users and groups) can neither make someone a superuser, nor give a role or a
permission of their own choosing to anyone, themselves included — else the security
administrator could make themselves the auditor, and the roles would separate nothing.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.db.models.signals import m2m_changed, pre_delete, pre_save
from django.dispatch import receiver
from simple_history.models import HistoricalRecords

SYSTEM_ADMIN = "系统管理员"
SECURITY_ADMIN = "安全管理员"
AUDITOR = "审计员"

ALL = ("add", "change", "delete", "view")
# role → {(app label, model): actions}
ROLES: dict[str, dict[tuple[str, str], tuple[str, ...]]] = {
    SYSTEM_ADMIN: {  # the catalog: agents (their prompts and fallbacks), providers, MCP services, sub-agents, routing cases
        ("agents_app", "agent"): ALL,
        ("agents_app", "agentfallback"): ALL,
        ("agents_app", "provider"): ALL,
        ("agents_app", "mcpservice"): ALL,
        ("subagents_app", "subagent"): ALL,
        ("insights_app", "routingcase"): ALL,
        ("insights_app", "routingargexpectation"): ALL,
        ("insights_app", "routingcheck"): ("view",),
    },
    SECURITY_ADMIN: {  # accounts and credentials, the moderation word lists and model, the reports of answers
        ("auth", "user"): ALL,
        ("auth", "group"): ALL,
        ("chat_app", "apikey"): ("view", "change"),  # change: the revoke action
        ("chat_app", "authsession"): ("view", "delete"),  # delete: revokes the JWT
        ("chat_app", "campusidentity"): ("view",),
        ("chat_app", "groupmapping"): ALL,  # campus attributes → groups
        ("chat_app", "campusgroupgrant"): ("view",),  # the memberships the mapping gave (read-only)
        ("chat_app", "grouplimits"): ALL,  # a group's quota and rate
        ("safety_app", "wordlist"): ALL,
        ("safety_app", "listword"): ALL,
        ("safety_app", "answerreport"): ("view", "change"),  # change: the status and the outcome
        # Not add: a new moderation model needs an address, a superuser's field (safety_app.admin).
        ("safety_app", "moderationmodel"): ("view", "change", "delete"),
    },
    AUDITOR: {
        ("audit_app", "auditevent"): ("view", "export"),
    },
}
ROLE_NAMES = tuple(ROLES)


def role_codenames(role: str) -> set[tuple[str, str]]:
    """(app label, codename) of every permission the role holds."""
    return {(app, f"{action}_{model}") for (app, model), actions in ROLES[role].items() for action in actions}


def roles_apply(*, group_model=Group, permission_model=None) -> None:
    """Makes each role's group, holding exactly its permissions (the migration passes its
    historical models). Raises RuntimeError when a permission does not exist."""
    from django.contrib.auth.models import Permission

    permission_model = permission_model or Permission
    known = {(p.content_type.app_label, p.codename): p for p in permission_model.objects.select_related("content_type")}
    for role in ROLES:
        wanted = role_codenames(role)
        if missing := wanted - known.keys():
            raise RuntimeError(f"{role}: no such permission {sorted(missing)}")
        group, _ = group_model.objects.get_or_create(name=role)
        group.permissions.set([known[key] for key in wanted])


# --- only a superuser gives a role ---------------------------------------------------------------

User = get_user_model()
MSG_ROLES_SUPERUSER_ONLY = "只有超级用户可以管理员工账号、授予超级用户身份、员工角色（{roles}）或单独的权限。"


def _acting_staff():
    """The signed-in user of the request being served (simple_history's middleware keeps it), when
    they are not a superuser; None outside a request (a command, a migration) or for a superuser."""
    request = getattr(HistoricalRecords.context, "request", None)
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or user.is_superuser:
        return None
    return user


def _refuse() -> None:
    raise PermissionDenied(MSG_ROLES_SUPERUSER_ONLY.format(roles="、".join(ROLE_NAMES)))


def _staff_account(user_pk) -> bool:
    """A superuser or a holder of a role: an account only a superuser manages (its password
    included: changing the auditor's password is becoming the auditor)."""
    return User.objects.filter(pk=user_pk).filter(Q(is_superuser=True) | Q(groups__name__in=ROLE_NAMES)).exists()


@receiver(pre_save, sender=User, dispatch_uid="roles_user_save")
def _user_save_checked(sender, instance, **kwargs) -> None:
    acting = _acting_staff()
    if acting is None:
        return
    if instance.is_superuser or (instance.pk and instance.pk != acting.pk and _staff_account(instance.pk)):
        _refuse()


@receiver(pre_delete, sender=User, dispatch_uid="roles_user_delete")
def _user_delete_checked(sender, instance, **kwargs) -> None:
    if _acting_staff() is not None and _staff_account(instance.pk):
        _refuse()


@receiver(pre_save, sender=Group, dispatch_uid="roles_group_save")
@receiver(pre_delete, sender=Group, dispatch_uid="roles_group_delete")
def _role_group_kept(sender, instance, **kwargs) -> None:
    if _acting_staff() is None or instance.pk is None:
        return
    before = Group.objects.filter(pk=instance.pk).values_list("name", flat=True).first()
    if before in ROLE_NAMES and (kwargs.get("signal") is pre_delete or instance.name != before):
        _refuse()


@receiver(m2m_changed, sender=User.groups.through, dispatch_uid="roles_groups")
def _role_groups_kept(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    if action not in ("pre_add", "pre_remove", "pre_clear") or _acting_staff() is None:
        return
    if reverse:  # a group's members changed
        touched = [instance.name]
    elif action == "pre_clear":
        touched = list(instance.groups.values_list("name", flat=True))
    else:
        touched = list(Group.objects.filter(pk__in=pk_set).values_list("name", flat=True))
    if set(touched) & set(ROLE_NAMES):
        _refuse()


@receiver(m2m_changed, sender=User.user_permissions.through, dispatch_uid="roles_user_permissions")
@receiver(m2m_changed, sender=Group.permissions.through, dispatch_uid="roles_group_permissions")
def _permissions_kept(sender, action, **kwargs) -> None:
    if action in ("pre_add", "pre_remove", "pre_clear") and _acting_staff() is not None:
        _refuse()
