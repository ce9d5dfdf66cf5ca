"""What may appear of a secret or of user text in a log line."""

TEXT_LOG_LIMIT = 50


def mask_token(token: str | None) -> str:
    """`abcd...wxyz` for a token; a short one is fully masked, since its ends are most of it."""
    if not token:
        return "<none>"
    if len(token) <= 12:
        return "***"
    return f"{token[:4]}...{token[-4:]}"


def clip_text(text: str | None, limit: int = TEXT_LOG_LIMIT) -> str:
    """User text cut to `limit` characters, on one line."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


_SENSITIVE_HEADERS = {"authorization", "cookie", "x-campus-token", "proxy-authorization"}


def redact_headers(headers: dict) -> dict:
    return {k: ("***" if k.lower() in _SENSITIVE_HEADERS else v) for k, v in headers.items()}
