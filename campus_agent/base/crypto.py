"""Secrets kept in the database, encrypted (a model provider's API key): Fernet (the maintained
`cryptography` package), its key derived from settings.PROVIDER_KEY_SECRET, else SECRET_KEY.

Rotating the secret the key is derived from makes every stored secret unreadable: `secret_decrypt`
then returns None (and the caller asks staff to enter it again), it never raises.
"""
import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

# Keeps this key apart from anything else derived from SECRET_KEY.
_KEY_LABEL = b"campus-agent stored secrets v1\x00"


def _fernet() -> Fernet:
    secret = settings.PROVIDER_KEY_SECRET or settings.SECRET_KEY
    digest = hashlib.sha256(_KEY_LABEL + secret.encode("utf-8")).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def secret_encrypt(text: str) -> str:
    """The Fernet token (ASCII) of `text`; a new token each time (random IV)."""
    return _fernet().encrypt(text.encode("utf-8")).decode("ascii")


def secret_decrypt(token: str) -> str | None:
    """The text of a token made by `secret_encrypt`; None when it cannot be read (another
    secret made it, or it is damaged)."""
    if not token:
        return None
    try:
        return _fernet().decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError, ValueError):
        return None
