"""Which ALLOWED_HOSTS mean "this machine only": the rule for what a local demo may default to.

Used by settings (the development SECRET_KEY) and by `load_demo` (demo logins with well-known
passwords); it imports nothing from Django so settings.py can use it.
"""
from collections.abc import Iterable

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1", "testserver"})


def hosts_local_only(hosts: Iterable[str]) -> bool:
    """True when every host is a loopback name (or Django's test client host)."""
    return set(hosts) <= LOCAL_HOSTS
