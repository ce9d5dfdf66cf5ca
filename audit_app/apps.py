from django.apps import AppConfig


class AuditAppConfig(AppConfig):
    """The audit log (docs/design.md#campus-identity-and-audit) and the three staff roles.

    Other apps write to it through audit_app.chain.audit_record; sign-in and sign-out reach it
    through django.contrib.auth's signals (audit_app.receivers). It imports no other app."""

    name = "audit_app"
    verbose_name = "审计"

    def ready(self) -> None:
        from audit_app import (  # noqa: F401 - their receivers
            receivers,  # the audit rows of sign-in, sign-out and staff changes
            roles,  # only a superuser gives a staff role
        )
