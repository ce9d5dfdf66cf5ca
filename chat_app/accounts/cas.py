"""Campus login with CAS 2.0/3.0, the 统一身份认证 most Chinese campuses run
(docs/design.md#campus-identity-and-audit), beside OIDC and local accounts; on when CAS_SERVER_URL is set.

django-cas-ng (over python-cas) does the protocol: the CAS login and logout URLs, the service URL
(CAS_ROOT_PROXIED_AS, else the request's scheme and Host, which Django takes from proxy headers
only where settings trust them), ticket validation at CAS_SERVER_URL for CAS 2 or 3, the SAML
logoutRequest's parsing, and the ticket ↔ session table single logout needs. What is ours, as for
OIDC (chat_app/accounts/oidc.py): the user is found through CampusIdentity, never by username
(django-cas-ng's backend would log the CAS user `admin` in as the local `admin`), attributes are
mapped through CAS_ATTRIBUTE_MAP, and `next` is checked to stay on this site.

A ticket is validated at the configured server only (an absolute URL: settings refuse a relative
one, which django-cas-ng would complete with the request's Host) and for our service URL; the CAS
server refuses a ticket it did not issue, one used before, or one issued for another service.
"""

from importlib import import_module
from urllib.parse import urljoin
from xml.etree.ElementTree import ParseError

import requests
from cas import SingleLogoutMixin
from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model
from django.utils.translation import gettext_lazy as _
from django_cas_ng.models import SessionTicket
from django_cas_ng.utils import get_cas_client, get_service_url
from loguru import logger

from audit_app.chain import Event, audit_record
from chat_app.accounts.campus_groups import campus_attributes_kept
from chat_app.accounts.oidc import campus_sub_usable

NEXT_KEY = "campus_cas_next"  # where to go after the CAS login; its presence: this browser started one
LOGIN_KEY = "campus_cas"  # set in a session a CAS login made: its logout ends the CAS sign-on too
TICKET_MAX = 256  # CAS 3.0 spec: at least 32 characters, should take up to 256
LOGOUT_REQUEST_MAX = 16_384  # a SAML logoutRequest is a few hundred bytes
MSG_NUMBER_UNUSABLE = _("统一身份认证没有给出可用的学号 / 工号。请联系学校统一身份认证的管理员。")


class CasLoginFailed(Exception):
    """The ticket was refused, or the CAS server could not be asked or answered nonsense;
    `message`, when set, is what the login page says instead of the general text."""

    def __init__(self, message: str | None = None):
        super().__init__(message or "")
        self.message = message


def cas_login_enabled() -> bool:
    return bool(settings.CAS_SERVER_URL)


class _TimedSession(requests.Session):
    """python-cas asks the CAS server with no timeout: a server that hangs would hold a worker."""

    def request(self, *args, **kwargs):
        kwargs.setdefault("timeout", settings.CAS_TIMEOUT)
        return super().request(*args, **kwargs)


def _client(request):
    client = get_cas_client(service_url=get_service_url(request), request=request)
    client.session = _TimedSession()
    return client


def login_begin(*, request, next_url: str) -> str:
    """The CAS server's login URL for our service; `next_url` (already checked) waits in the
    session, which marks this browser as the one that started the login."""
    request.session[NEXT_KEY] = next_url
    return _client(request).get_login_url()


def ticket_validate(*, request, ticket: str) -> tuple[dict, str]:
    """Validates `ticket` at CAS_SERVER_URL for our service URL: the profile sso_user_upsert
    takes, and where to go next. Raises CasLoginFailed.

    A ticket is taken only in the session that started the login (its `next` is there, and used
    once): CAS has no `state` parameter, and without this a link carrying a ticket the attacker
    got for their own account would sign the victim in as the attacker (login CSRF), and what the
    victim then asks would land in the attacker's history."""
    next_url = request.session.pop(NEXT_KEY, None)
    if next_url is None:
        logger.info("CAS: ticket refused: this session started no CAS login")
        raise CasLoginFailed()
    if not ticket or len(ticket) > TICKET_MAX or not (ticket.isascii() and ticket.isprintable()):
        raise CasLoginFailed()
    client = _client(request)
    try:
        user, attributes, _pgtiou = client.verify_ticket(ticket)
    except (requests.RequestException, ParseError, IndexError, AttributeError, ValueError) as exc:
        logger.warning("CAS: validating a ticket failed: {}", type(exc).__name__)
        raise CasLoginFailed() from None
    finally:
        client.session.close()
    if not user:
        logger.info("CAS: ticket refused by the CAS server")
        raise CasLoginFailed()
    return _profile(user, campus_attributes_kept(attributes or {})), next_url


def _profile(user: str, attributes: dict[str, list[str]]) -> dict:
    mapping = settings.CAS_ATTRIBUTE_MAP

    def first(field: str) -> str:
        values = attributes.get(mapping.get(field) or "", [])
        return values[0] if values else ""

    number = campus_sub_usable(first("number") if mapping.get("number") else user)
    if number is None:
        logger.warning("CAS: ticket refused: unusable student / staff number")
        raise CasLoginFailed(MSG_NUMBER_UNUSABLE)
    return {
        "sub": number,
        "name": first("name")[:150],
        "roles": [],
        "college": first("college"),
        "identity_type": first("identity_type"),
        "attributes": attributes,
    }


def session_ticket_record(*, session, ticket: str) -> None:
    """After login(): which session this ticket opened, for the CAS server's single logout."""
    session[LOGIN_KEY] = True
    if not session.session_key:
        session.save()
    SessionTicket.objects.update_or_create(session_key=session.session_key, defaults={"ticket": ticket})


def session_ticket_forget(*, session) -> None:
    if session.session_key:
        SessionTicket.objects.filter(session_key=session.session_key).delete()


def single_logout(*, logout_request: str, request=None) -> int:
    """The CAS server's logoutRequest (a SAML document naming the ticket of a sign-on that ended
    there): the sessions that ticket opened end, each a sign-out in the audit log (`request`: the
    CAS server's, for its address). Returns how many."""
    if len(logout_request) > LOGOUT_REQUEST_MAX:
        return 0
    indexes = SingleLogoutMixin.get_saml_slos(logout_request.encode()) or []
    tickets = [index.text.strip() for index in indexes if index.text and len(index.text) <= TICKET_MAX]
    store = import_module(settings.SESSION_ENGINE).SessionStore
    ended = 0
    for row in SessionTicket.objects.filter(ticket__in=tickets):
        session = store(session_key=row.session_key)
        user = get_user_model().objects.filter(pk=session.get(SESSION_KEY)).first()
        session.delete()
        row.delete()
        ended += 1
        if user is not None:
            audit_record(event=Event.SIGN_OUT, request=request, actor=user, target="cas",
                         details={"via": "cas_single_logout"})
    logger.info("CAS single logout: {} session(s) ended", ended)
    return ended


def session_logout_begin(*, session) -> bool:
    """Before a logout: forgets the session's ticket; whether a CAS login made the session."""
    session_ticket_forget(session=session)
    return bool(session.get(LOGIN_KEY))


def logout_url(*, request, back_to: str) -> str:
    """The CAS server's logout URL (it ends the student's campus sign-on, and with it the other
    services' sessions), coming back to the path `back_to` of this site."""
    root = settings.CAS_ROOT_PROXIED_AS
    back = urljoin(root, back_to) if root else request.build_absolute_uri(back_to)
    return _client(request).get_logout_url(back)
