"""Whether a host is inside the school's (or this machine's) own networks: the check before the
gateway sends a request to an address that someone other than staff chose
(docs/security.md#outbound-requests-oauth-discovery-and-private-addresses).

An address is internal when it is not a global unicast address — loopback, private (10/8,
172.16/12, 192.168/16, fc00::/7), link-local (169.254/16, where cloud metadata answers;
fe80::/10), shared (100.64/10), reserved, unspecified, multicast — unless
settings.OUTBOUND_PRIVATE_NETWORKS names a network that holds it (a campus whose authorization
server is on 10.x; the tests, whose servers are on loopback). A host name is internal when any
address it resolves to is: the check resolves it as the request will (a name that resolves to
nothing is left to the request, which fails on its own). `url_origin` is what "the same place"
means for a URL: its scheme, host and port.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=8)
def _allowed(networks: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(network, strict=False) for network in networks)


def url_origin(url: str) -> str | None:
    """`scheme://host:port` of an http(s) URL, lower-case, the port written out; else None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in ("http", "https") or not host:
        return None
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port or (443 if scheme == 'https' else 80)}"


def address_internal(address: IpAddress) -> bool:
    """Whether the gateway keeps away from `address` (module docstring)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    # Python 3.11 counts public multicast as global: it is no host to send a request to.
    if address.is_global and not address.is_multicast:
        return False
    return not any(address in network for network in _allowed(tuple(settings.OUTBOUND_PRIVATE_NETWORKS)))


def _literal(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _first_internal(infos) -> str | None:
    for *_, sockaddr in infos:
        address = _literal(str(sockaddr[0]))
        if address is not None and address_internal(address):
            return str(address)
    return None


def host_internal(host: str) -> str | None:
    """The internal address `host` is or resolves to, else None. Blocks while it resolves."""
    literal = _literal(host)
    if literal is not None:
        return str(literal) if address_internal(literal) else None
    try:
        return _first_internal(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError):
        return None


async def ahost_internal(host: str) -> str | None:
    """See host_internal()."""
    literal = _literal(host)
    if literal is not None:
        return str(literal) if address_internal(literal) else None
    try:
        return _first_internal(await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError):
        return None
