"""Audit rows from other apps' front doors (docs/design.md#campus-identity-and-audit):

- django.contrib.auth's signals: every sign-in through Django's login() (the page, the admin,
  the campus OIDC callback), every refused password (authenticate() fails, whatever form or
  endpoint asked), every sign-out through logout(). The API's token endpoints, which issue a JWT
  without login(), record their accepted sign-ins themselves (chat_app.gateways.api.auth).
- django-simple-history's post_create_historical_record: a staff change to the catalog, with
  the version it made; a rollback when the version's reason says so.
- the admin's LogEntry: a staff change to anything without a history (users, groups, …). Its
  bulk delete writes its LogEntries without a signal, so the deletion of a user or a group is
  recorded from the model's own post_delete instead (during a request: not a command's).
"""

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from simple_history.models import HistoricalRecords
from simple_history.signals import post_create_historical_record

from audit_app.chain import Event, Outcome, audit_record
from campus_agent.base.history import ROLLBACK_REASON

# How a sign-in came, by the path that served it (what calls login() or authenticate()).
VIA_BY_PATH = (
    ("/admin/", "admin"),
    ("/login/campus/", "oidc"),
    ("/accounts/cas/", "cas"),
    ("/login/", "password"),
    ("/api/v1/auth/token", "password_api"),
)
ROLLBACK_PREFIX = ROLLBACK_REASON.split("{")[0]
ACTIONS = {ADDITION: "add", CHANGE: "change", DELETION: "delete"}
HISTORY_TYPES = {"+": "add", "~": "change", "-": "delete"}
ACCOUNT_MODELS = (get_user_model(), Group)  # their deletions: from post_delete (above)


def sign_in_via(request) -> str:
    path = getattr(request, "path", "") or ""
    return next((via for prefix, via in VIA_BY_PATH if path.startswith(prefix)), "session")


@receiver(user_logged_in, dispatch_uid="audit_sign_in")
def _signed_in(sender, request, user, **kwargs) -> None:
    audit_record(
        event=Event.SIGN_IN,
        request=request,
        actor=user,
        target=sign_in_via(request),
        details={"via": sign_in_via(request)},
    )


@receiver(user_login_failed, dispatch_uid="audit_sign_in_refused")
def _sign_in_refused(sender, credentials, request=None, **kwargs) -> None:
    username = str(credentials.get("username", ""))  # the password is already masked by Django
    audit_record(
        event=Event.SIGN_IN,
        outcome=Outcome.REFUSED,
        request=request,
        actor_username=username,
        target=sign_in_via(request),
        details={"via": sign_in_via(request), "reason": "credentials"},
    )


@receiver(user_logged_out, dispatch_uid="audit_sign_out")
def _signed_out(sender, request, user, **kwargs) -> None:
    if user is not None:  # logging out without a session records nothing
        audit_record(event=Event.SIGN_OUT, request=request, actor=user, target="page")


def _current_request():
    """The request simple_history's middleware is serving in this thread, if any."""
    return getattr(HistoricalRecords.context, "request", None)


@receiver(post_create_historical_record, dispatch_uid="audit_catalog_change")
def _catalog_changed(sender, instance, history_instance, **kwargs) -> None:
    request = _current_request()
    if request is None:  # a command or a migration, not a staff member
        return
    reason = history_instance.history_change_reason or ""
    rollback = reason.startswith(ROLLBACK_PREFIX)
    audit_record(
        event=Event.ROLLBACK if rollback else Event.STAFF_CHANGE,
        request=request,
        actor=history_instance.history_user,
        target=f"{instance._meta.label_lower}:{instance.pk}",
        details={
            "model": instance._meta.label_lower,
            "object": str(instance)[:200],
            "action": HISTORY_TYPES.get(history_instance.history_type, history_instance.history_type),
            "version": history_instance.history_id,
            **({"reason": reason} if reason else {}),
        },
    )


@receiver(post_save, sender=LogEntry, dispatch_uid="audit_admin_change")
def _admin_changed(sender, instance: LogEntry, created: bool, **kwargs) -> None:
    model = instance.content_type.model_class() if instance.content_type_id else None
    if not created or model is None or hasattr(model, "history"):  # the catalog: its version's row above
        return
    if instance.action_flag == DELETION and model in ACCOUNT_MODELS:
        return
    audit_record(
        event=Event.STAFF_CHANGE,
        request=_current_request(),
        actor=instance.user,
        target=f"{model._meta.label_lower}:{instance.object_id}",
        details={
            "model": model._meta.label_lower,
            "object": instance.object_repr,
            "action": ACTIONS.get(instance.action_flag, str(instance.action_flag)),
            "change": instance.get_change_message()[:500],
        },
    )


@receiver(post_delete, sender=get_user_model(), dispatch_uid="audit_user_deleted")
@receiver(post_delete, sender=Group, dispatch_uid="audit_group_deleted")
def _account_deleted(sender, instance, **kwargs) -> None:
    request = _current_request()
    if request is None:
        return
    label = sender._meta.label_lower
    audit_record(
        event=Event.STAFF_CHANGE,
        request=request,
        target=f"{label}:{instance.pk}",
        details={"model": label, "object": str(instance)[:200], "action": "delete"},
    )
