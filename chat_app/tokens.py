"""The API's JWTs (DESIGN §7): PyJWT, HS256 only, `exp`/`iat`/`iss` required.

Claims: `sub` (user id as a string), `roles`, `sid` (the AuthSession row). Nothing secret goes
in: a JWT payload is readable by whoever holds the token.
"""
from datetime import datetime

import jwt
from django.conf import settings

ALGORITHM = "HS256"
REQUIRED_CLAIMS = ["exp", "iat", "iss", "sub", "sid"]


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
    except jwt.PyJWTError as exc:
        raise TokenInvalid(type(exc).__name__) from None
    if not isinstance(claims.get("sub"), str) or not claims["sub"].isdigit() or not isinstance(claims.get("sid"), str):
        raise TokenInvalid("claims")
    return claims
