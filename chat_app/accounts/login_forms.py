"""The login forms of the page (`/login/`) and the admin (`/admin/login/`), throttled like the API's
token endpoints: failed logins count per client address and per username
(services/login_throttle.py); past a limit the form answers a Chinese error and checks nothing."""
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from audit_app.chain import Event, Outcome, audit_record
from audit_app.receivers import sign_in_via
from chat_app.accounts.throttle import (
    LoginThrottled,
    client_ip,
    login_attempt_admit,
    login_attempt_succeeded,
)


class ThrottledLoginMixin:
    """For AuthenticationForm subclasses; `throttled` holds the refusal, if any, for the view."""

    throttled: LoginThrottled | None = None

    def clean(self):
        username, password = self.cleaned_data.get("username"), self.cleaned_data.get("password")
        if not (username and password):  # a field is missing: nothing was tried, nothing counts
            return super().clean()
        try:
            attempt = login_attempt_admit(ip=client_ip(self.request), username=username)
        except LoginThrottled as refused:
            self.throttled = refused
            if refused.first:
                self._refused(username, "throttled")
            raise ValidationError(refused.message, code="throttled") from None
        try:
            return super().clean()
        except ValidationError:
            if self.user_cache is not None:  # the password was right, the account refused (inactive, not staff);
                self._refused(username, "not_allowed")  # a wrong password is audited by authenticate()'s signal
            raise
        finally:
            # authenticate() found the user: the password was right, even when this form then
            # refuses the account (the admin's form refuses non-staff). Else it stays a failure.
            if self.user_cache is not None:
                login_attempt_succeeded(attempt=attempt)

    def _refused(self, username: str, reason: str) -> None:
        via = sign_in_via(self.request)
        audit_record(event=Event.SIGN_IN, outcome=Outcome.REFUSED, request=self.request, actor_username=username,
                     target=via, details={"via": via, "reason": reason})


class LoginForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class AdminLoginForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass
