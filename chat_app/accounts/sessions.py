"""Login sessions of the API (docs/design.md#cross-cutting-rules): made with a JWT naming them, checked, revoked; users from
the campus SSO."""
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from loguru import logger

from campus_agent.base.redaction import mask_token
from campus_agent.base.text import label_clean
from chat_app.accounts.campus_groups import campus_attributes_kept, campus_groups_apply
from chat_app.accounts.oidc import campus_sub_usable
from chat_app.accounts.tokens import jwt_encode
from chat_app.models import AuthSession, CampusIdentity

SSO_TIMEOUT_SEC = 10.0
USERNAME_MAX = 150


class SsoNotConfigured(Exception):
    pass


class SsoRejected(Exception):
    """The campus user-info endpoint did not accept the token (401/403)."""


class SsoUnavailable(Exception):
    """The campus user-info endpoint could not be asked or gave an unusable answer."""


@dataclass(frozen=True)
class IssuedToken:
    access_token: str
    expires_at: datetime
    session: AuthSession

    @property
    def expires_in(self) -> int:
        return int(_ttl().total_seconds())


def _ttl() -> timedelta:
    return timedelta(hours=settings.JWT_TTL_HOURS)


def user_roles(*, user) -> list[str]:
    return ["staff"] if user.is_staff else ["student"]


def auth_session_create(*, user, via: str, roles: list[str], campus_token: str = "") -> IssuedToken:
    """A new AuthSession row and the JWT that names it. The user's expired rows are dropped on the way."""
    now = timezone.now()
    expires_at = now + _ttl()
    with transaction.atomic():
        AuthSession.objects.filter(user=user, expires_at__lte=now).delete()
        session = AuthSession.objects.create(
            user=user,
            via=via,
            roles=roles,
            campus_token=campus_token,
            password_fingerprint=user.get_session_auth_hash(),  # a password change revokes the JWT
            expires_at=expires_at,
        )
    token = jwt_encode(user_id=user.pk, session_id=str(session.id), roles=roles, issued_at=now, expires_at=expires_at)
    logger.info("auth session created user={} via={} sid={}", user.pk, via, session.id)
    return IssuedToken(access_token=token, expires_at=expires_at, session=session)


def auth_session_revoke(*, session: AuthSession) -> None:
    """Deleting the row revokes every JWT whose `sid` names it."""
    AuthSession.objects.filter(pk=session.pk).delete()
    logger.info("auth session revoked user={} sid={}", session.user_id, session.id)


def campus_profile_fetch(*, campus_token: str) -> dict:
    """`GET CAMPUS_SSO_USERINFO_URL` with the campus token → `{"sub", "name", "roles"}`."""
    url = settings.CAMPUS_SSO_USERINFO_URL
    if not url:
        raise SsoNotConfigured()
    try:
        response = httpx.get(url, headers={"Authorization": f"Bearer {campus_token}"}, timeout=SSO_TIMEOUT_SEC)
    except httpx.HTTPError as exc:
        logger.warning("campus SSO unreachable: {}", type(exc).__name__)
        raise SsoUnavailable() from None
    if response.status_code in (401, 403):
        logger.info("campus SSO rejected token {}", mask_token(campus_token))
        raise SsoRejected()
    if response.status_code != 200:
        logger.warning("campus SSO answered HTTP {}", response.status_code)
        raise SsoUnavailable()
    try:
        profile = response.json()
    except ValueError:
        raise SsoUnavailable() from None
    sub = campus_sub_usable(profile.get("sub") if isinstance(profile, dict) else None)
    if sub is None:  # missing, blank, over 150 characters or holding a control character
        logger.warning("campus SSO answer without a usable sub")
        raise SsoUnavailable()
    roles = profile.get("roles")
    return {
        "sub": sub,
        "name": str(profile.get("name") or "")[:150],
        "roles": [str(r) for r in roles] if isinstance(roles, list) else [],
        "attributes": campus_attributes_kept(profile),
    }


def _free_username(*, sub: str) -> str:
    """`sub` when no user has that name, else `sub-2`, `sub-3` … (all within USERNAME_MAX)."""
    User = get_user_model()
    candidate, n = sub, 1
    while User.objects.filter(username=candidate).exists():
        n += 1
        suffix = f"-{n}"
        candidate = sub[: USERNAME_MAX - len(suffix)] + suffix
    return candidate


def sso_user_upsert(*, profile: dict, source: str = CampusIdentity.Source.OIDC):
    """The user linked to the campus subject `profile["sub"]` of `source` (CampusIdentity),
    created on its first login; then the group mapping is applied (chat_app/accounts/campus_groups.py).

    The link is never made by matching usernames: a `sub` equal to an existing local username
    (e.g. `admin`) gets a new user of its own, named `sub-2` or the like. Later logins refresh
    the name, the last campus roles and attributes. Campus roles go into the JWT and the session
    row; they never grant Django staff rights.

    `profile`: {"sub", "name", "roles"} and optionally "college", "identity_type" and
    "attributes" (as campus_attributes_kept returns them).
    """
    sub = profile["sub"]
    for _ in range(3):  # two first logins of one sub racing: the loser reads the winner's row
        identity = CampusIdentity.objects.select_related("user").filter(source=source, sub=sub).first()
        if identity is not None:
            user = _sso_user_refresh(identity=identity, profile=profile)
            break
        try:
            with transaction.atomic():
                user = get_user_model().objects.create(
                    username=_free_username(sub=sub), first_name=_shown_name(profile)
                )
                user.set_unusable_password()
                user.save(update_fields=["password"])
                CampusIdentity.objects.create(source=source, sub=sub, user=user, **_identity_fields(profile))
        except IntegrityError:
            continue
        logger.info("campus identity ({}) linked to new user={}", source, user.pk)
        break
    else:
        raise SsoUnavailable()
    campus_groups_apply(user=user, source=source, attributes=profile.get("attributes") or {})
    return user


def _shown_name(profile: dict) -> str:
    """The identity provider's name for the person, as the page shows it (a label: nothing that
    misleads, campus_agent.base.text.label_clean)."""
    return label_clean(profile["name"])[:150]


def _identity_fields(profile: dict) -> dict:
    return {
        "roles": profile["roles"],
        "college": label_clean(profile.get("college") or "")[:150],
        "identity_type": label_clean(profile.get("identity_type") or "")[:150],
        "attributes": profile.get("attributes") or {},
    }


def _sso_user_refresh(*, identity: CampusIdentity, profile: dict):
    user = identity.user
    name = _shown_name(profile)
    if name and user.first_name != name:
        user.first_name = name
        user.save(update_fields=["first_name"])
    fields = _identity_fields(profile)
    for field, value in fields.items():
        setattr(identity, field, value)
    identity.save(update_fields=[*fields, "updated_at"])
    return user


def auth_session_get_valid(*, session_id: str, user_id: int) -> AuthSession | None:
    """The unexpired row a JWT names, for an active user whose password has not changed since the
    row was made (Django's rule for page sessions); None when revoked or expired. One query."""
    try:
        sid = uuid.UUID(session_id)
    except ValueError:
        return None
    session = (
        AuthSession.objects.select_related("user")
        .filter(id=sid, user_id=user_id, user__is_active=True, expires_at__gt=timezone.now())
        .first()
    )
    if session is None or not constant_time_compare(session.password_fingerprint, session.user.get_session_auth_hash()):
        return None
    return session
