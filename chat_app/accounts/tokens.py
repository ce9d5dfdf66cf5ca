"""The API's JWTs (docs/design.md#cross-cutting-rules): PyJWT, HS256 only, `exp`/`iat`/`iss` required.

Claims: `sub` (user id as a string), `roles`, `sid` (the AuthSession row). Nothing secret goes
in: a JWT payload is readable by whoever holds the token.

A signed token is still parsed strictly: the claims are exactly the shapes `jwt_encode` writes,
so a token minted with a leaked key, or by an older or buggy issuer, cannot reach the database
with a value it cannot hold (a 40-digit `sub` overflowed the integer query: a 500) or in a
spelling Python happens to accept (`int("١٢٣")` is 123, `uuid.UUID("{…}")` parses).
"""
import re
from datetime import datetime

import jwt
from django.conf import settings

ALGORITHM = "HS256"
REQUIRED_CLAIMS = ["exp", "iat", "iss", "sub", "sid", "roles"]
# ASCII only ([0-9], not \d, which matches any Unicode digit); no leading zero; 18 digits always
# fit the BigAutoField (its largest value has 19).
SUB_PATTERN = re.compile(r"[1-9][0-9]{0,17}", flags=re.ASCII)
# str(uuid.UUID): the only spelling jwt_encode writes (either case of hex is the same id).
SID_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", flags=re.ASCII | re.IGNORECASE)


class TokenInvalid(Exception):
    """Any reason a JWT is not accepted; the caller answers 401 token_invalid without detail."""


def _key() -> str:
    return settings.SECRET_KEY


def jwt_encode(*, user_id: int, session_id: str, roles: list[str], issued_at: datetime, expires_at: datetime) -> str:
    payload = {
        "sub": str(user_id),
        "sid": str(session_id),
        "roles": list(roles),
        "iss": settings.JWT_ISSUER,
        "iat": int(issued_at.timestamp()),
        "exp": int(expires_at.timestamp()),
    }
    return jwt.encode(payload, _key(), algorithm=ALGORITHM)


def jwt_decode(*, token: str) -> dict:
    """The verified claims. Only HS256 is accepted, so `alg: none` and RS/HS confusion fail."""
    try:
        claims = jwt.decode(
            token,
            _key(),
            algorithms=[ALGORITHM],
            issuer=settings.JWT_ISSUER,
            options={"require": REQUIRED_CLAIMS},
        )
    except (jwt.PyJWTError, ValueError, TypeError) as exc:  # any token a client sends is a 401, never a 500
        raise TokenInvalid(type(exc).__name__) from None
    if not _claims_well_formed(claims):
        raise TokenInvalid("claims")
    return claims


def _claims_well_formed(claims: dict) -> bool:
    sub, sid, roles = claims["sub"], claims["sid"], claims["roles"]
    return (
        isinstance(sub, str)
        and SUB_PATTERN.fullmatch(sub) is not None
        and isinstance(sid, str)
        and SID_PATTERN.fullmatch(sid) is not None
        and isinstance(roles, list)
        and all(isinstance(role, str) for role in roles)
    )
