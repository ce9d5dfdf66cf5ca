"""What may appear of a secret, of user text or of a person's numbers in a log line or a trace."""
import re

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


# Personal numbers (PIPL; docs/design.md#cross-cutting-rules Logging), masked wherever they appear in a log line or a trace
# attribute: a mainland mobile number (optionally +86, spaces or dashes in 3-4-4) keeps its first
# three and last four digits, `138****5678`; a resident ID number (18 characters with a valid
# birth date) its region and its last four, `110105********002X`. Not next to other digits or
# letters, so order numbers and hashes are left alone.
_RESIDENT_ID = re.compile(
    r"(?<![0-9A-Za-z])(\d{6})((?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01]))(\d{3}[0-9Xx])(?![0-9A-Za-z])"
)
_MOBILE = re.compile(r"(?<![0-9A-Za-z])((?:\+?86[- ]?)?1[3-9]\d)[- ]?(\d{4})[- ]?(\d{4})(?![0-9A-Za-z])")
_FOUR_DIGITS = re.compile(r"\d{4}")  # in both kinds of number: a cheap first look


def personal_numbers_mask(text: str) -> str:
    """`text` with mobile and resident ID numbers masked (the same object when it has none)."""
    if not _FOUR_DIGITS.search(text):
        return text
    masked = _RESIDENT_ID.sub(lambda m: f"{m.group(1)}{'*' * 8}{m.group(3)}", text)
    masked = _MOBILE.sub(lambda m: f"{m.group(1)}****{m.group(3)}", masked)
    return masked if masked != text else text
