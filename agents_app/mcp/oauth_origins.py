"""Where an MCP service's OAuth requests may go
(docs/security.md#outbound-requests-oauth-discovery-and-private-addresses).

The MCP server says, in its 401 and its metadata, where the gateway looks next: the protected
resource metadata, the authorization server's metadata, its registration, token and revocation
endpoints, and the page the student is sent to. A hostile server could name an address inside the
school's network (127.0.0.1, 10.x, 169.254.169.254), which the gateway would fetch, register with
and hand to students. So each of those URLs must be http(s) and

- on the service's own origin (scheme, host and port of its config `url`: staff chose it, and
  the MCP requests go there anyway), or on an origin staff listed in the service's
  `oauth_origins` (允许的授权服务器; `*`: any);
- off the service's own origin, not at an internal address (campus_agent/base/addresses.py:
  loopback, private, link-local … unless OUTBOUND_PRIVATE_NETWORKS holds it).

A URL that is not is refused before anything is sent to it (McpOAuthRefused, logged with the
reason for staff); the session does not open, and the student reads that the service's
authorization is set up wrongly (tools.py).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx2
from loguru import logger

from agents_app.validation import ANY_ORIGIN
from campus_agent.base.addresses import ahost_internal, host_internal, url_origin

if TYPE_CHECKING:
    from agents_app.models import McpService

MAX_SHOWN_URL = 200
# For staff (the log): what was refused and what to change.
NOT_LISTED_REASON = "授权流程要访问 {url}，它不在本服务的源（{own}）和“允许的授权服务器”之中，已拒绝"
INTERNAL_REASON = (
    "授权流程要访问 {url}，它指向内网地址 {address}（回环、私有或链路本地），已拒绝；"
    "确需访问请把它所在的网段加入 OUTBOUND_PRIVATE_NETWORKS"
)
NOT_HTTP_REASON = "授权流程要访问 {url}，只允许 http 和 https 地址，已拒绝"


class McpOAuthRefused(Exception):
    """A request of a service's OAuth flow would go where it may not; `str()` says why (staff)."""


def _shown(url: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in url[:MAX_SHOWN_URL])


def _by_origin(service: McpService, url: str) -> tuple[str | None, str | None]:
    """(the reason `url` is refused on its origin alone, the host still to check for an internal
    address); (None, None) for the service's own origin."""
    origin = url_origin(url)
    if origin is None:
        return NOT_HTTP_REASON.format(url=_shown(url)), None
    own = url_origin(str((service.config or {}).get("url", "")))
    if origin == own:
        return None, None
    allowed = service.oauth_origins if isinstance(service.oauth_origins, list) else []
    if ANY_ORIGIN not in allowed and origin not in {url_origin(str(entry)) for entry in allowed}:
        return NOT_LISTED_REASON.format(url=_shown(url), own=own), None
    return None, urlsplit(url).hostname


def _refused(service: McpService, reason: str) -> McpOAuthRefused:
    logger.warning("MCP OAuth request refused service={} reason={}", service.name, reason)
    return McpOAuthRefused(reason)


def oauth_url_check(service: McpService, url: str) -> None:
    """Raises McpOAuthRefused when the service's OAuth flow may not send a request (or a
    student) to `url` (module docstring). Blocks while a host name resolves."""
    reason, host = _by_origin(service, url)
    if reason is None and host is not None and (address := host_internal(host)) is not None:
        reason = INTERNAL_REASON.format(url=_shown(url), address=address)
    if reason is not None:
        raise _refused(service, reason)


async def aoauth_url_check(service: McpService, url: str) -> None:
    """See oauth_url_check()."""
    reason, host = _by_origin(service, url)
    if reason is None and host is not None and (address := await ahost_internal(host)) is not None:
        reason = INTERNAL_REASON.format(url=_shown(url), address=address)
    if reason is not None:
        raise _refused(service, reason)


class OriginGuard:
    """Put before one of the SDK's OAuth providers (an httpx2.Auth): every request its flow makes
    besides the one it authenticates — discovery, registration, token, refresh — is checked
    before it is sent."""

    def __init__(self, *args, service: McpService, **kwargs):
        self.guarded_service = service
        super().__init__(*args, **kwargs)

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = super().async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                if outgoing is not request:
                    await aoauth_url_check(self.guarded_service, str(outgoing.url))
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()
