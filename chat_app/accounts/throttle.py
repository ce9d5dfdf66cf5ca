"""Login throttling: failed password and campus-token logins counted per client IP and per username.

Every login form and endpoint (`/api/v1/auth/token`, `/api/v1/auth/sso`, `/login/`,
`/admin/login/`) admits an attempt before checking the credential and settles it afterwards:

- `login_attempt_admit` counts the attempt in each of its counters first (so a burst of parallel
  guesses cannot all pass a check made before any of them failed) and refuses it with
  `LoginThrottled` when a counter is past its limit: more than LOGIN_MAX_FAILURES_PER_USERNAME
  for the username, LOGIN_MAX_FAILURES_PER_IP for the client address, within
  LOGIN_FAILURE_WINDOW_SEC. A refused attempt is taken back out: it was never checked;
- a failed attempt needs nothing more: it stays counted;
- `login_attempt_succeeded` takes the attempt back out of the IP counter (students behind one
  campus NAT share it; only failures count there) and clears the username's counter (the
  owner proved the password). A success never clears the IP counter: an attacker holding one
  valid account could otherwise reset it between guesses at other accounts;
- `login_attempt_void` takes the attempt out of every counter (the credential was never judged:
  the campus SSO was down, for instance).

The window is fixed from a counter's first failure (the expiry is set by `add` only, never
extended), so a lock ends at most LOGIN_FAILURE_WINDOW_SEC after it began, however many refused
attempts follow: whoever locks an account or an address out has to fail again every window to keep
it locked, and every such failure is one more attempt counted against them.

The counters live in the Django cache, which is Redis when REDIS_URL is set: every worker sees
the same counts (`add` and `incr` are atomic there). The client address is REMOTE_ADDR, which
the ASGI server sets from nginx's X-Forwarded-For only when told to trust it (uvicorn
`--forwarded-allow-ips`, daphne `--proxy-headers`; docs/operations.md). IPv6 addresses count
per /64, the block one machine usually holds.
"""
import hashlib
import ipaddress
import math
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache

from campus_agent.base.errors import MSG_LOGIN_THROTTLED
from campus_agent.base.windows import window_count

KEY_PREFIX = "login:failures"


class LoginThrottled(Exception):
    """`first`: the address's first refusal of this window, the one worth an audit row (a bot
    hammering a locked address writes one row a window, not one per try)."""

    def __init__(self, retry_after: int, *, first: bool = True):
        super().__init__(f"retry after {retry_after} s")
        self.retry_after = retry_after
        self.first = first

    @property
    def message(self) -> str:
        """What the student reads (the API's `message`, the login pages' form error)."""
        return MSG_LOGIN_THROTTLED.format(minutes=max(1, math.ceil(self.retry_after / 60)))


@dataclass
class LoginAttempt:
    ip_key: str
    username_key: str | None
    counted: list[str] = field(default_factory=list)


def _digest(text: str) -> str:
    # Hashed: cache keys stay short and ASCII whatever a client sends as a username.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def client_ip_bucket(ip: str) -> str:
    """The address a failure is counted against: the IPv4 address, or the IPv6 /64."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return ip or "unknown"
    if address.version == 6:
        if address.ipv4_mapped is not None:  # ::ffff:1.2.3.4 is the IPv4 client 1.2.3.4
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def client_ip(request) -> str:
    return request.META.get("REMOTE_ADDR") or ""


def _limit(key: str) -> int:
    if key.startswith(f"{KEY_PREFIX}:user:"):
        return settings.LOGIN_MAX_FAILURES_PER_USERNAME
    return settings.LOGIN_MAX_FAILURES_PER_IP


def _count(key: str, window: int) -> int:
    # The deadline key is written first and with the same expiry, so a counter always has one
    # (it answers Retry-After: the cache API has no portable "time to live").
    cache.add(f"{key}:until", time.time() + window, window)
    count = window_count(key, window)
    if count == 1:  # perhaps a new window, opened after the deadline above expired
        cache.add(f"{key}:until", time.time() + window, window)
    return count


def _uncount(key: str) -> None:
    try:
        cache.decr(key)
    except ValueError:  # the window ended meanwhile: nothing left to take back
        pass


def _retry_after(keys: list[str], window: int) -> int:
    deadlines = cache.get_many([f"{key}:until" for key in keys])
    left = [deadline - time.time() for deadline in deadlines.values()]
    return max(1, math.ceil(max(left))) if left else window


def login_attempt_admit(*, ip: str, username: str | None = None) -> LoginAttempt:
    """Counts one login attempt; raises LoginThrottled (with seconds to wait) past a limit."""
    window = settings.LOGIN_FAILURE_WINDOW_SEC
    name = (username or "").strip().casefold()  # `Alice` and `alice ` are the same guesses
    attempt = LoginAttempt(
        ip_key=f"{KEY_PREFIX}:ip:{_digest(client_ip_bucket(ip))}",
        username_key=f"{KEY_PREFIX}:user:{_digest(name)}" if name else None,
    )
    over = []
    for key in filter(None, (attempt.ip_key, attempt.username_key)):
        attempt.counted.append(key)
        if _count(key, window) > _limit(key):
            over.append(key)
    if over:
        login_attempt_void(attempt=attempt)
        first = cache.add(f"{attempt.ip_key}:refused", 1, timeout=window)
        raise LoginThrottled(_retry_after(over, window), first=first)
    return attempt


def login_attempt_succeeded(*, attempt: LoginAttempt) -> None:
    """The credential was right: only failures count against the address, and the username starts over."""
    if attempt.ip_key in attempt.counted:
        _uncount(attempt.ip_key)
    if attempt.username_key in attempt.counted:
        cache.delete_many([attempt.username_key, f"{attempt.username_key}:until"])
    attempt.counted.clear()


def login_attempt_void(*, attempt: LoginAttempt) -> None:
    """The credential was not judged: the attempt counts nowhere."""
    for key in attempt.counted:
        _uncount(key)
    attempt.counted.clear()
