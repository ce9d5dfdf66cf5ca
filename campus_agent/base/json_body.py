"""The one place where a JSON request body is accepted or refused (docs/design.md#the-chat-stream, #cross-cutting-rules).

Every JSON endpoint goes through `json_object_decode`: the async chat view and the demo
sub-agents by `json_object_read(request)`, the DRF views by `JsonObjectParser` (the default
parser). A body is refused, before any of it is used, when it is

- not sent as `application/json` (or with a charset other than UTF-8) → 415, code 41501;
- over `DATA_UPLOAD_MAX_MEMORY_SIZE` (64 KB) → 413, code 41301;
- not UTF-8, nested deeper than `JSON_MAX_DEPTH`, not JSON, or not a JSON object; holding a
  duplicate key, `NaN`/`Infinity` or a number that overflows to infinity, or a lone UTF-16
  surrogate escape (`"\\ud800"`: no valid text holds one, and PostgreSQL and the SSE encoder
  refuse it later) → 400, code 40001.

Why a depth check of our own: `json.loads` recurses once per level and raises RecursionError
(a 500) near 1,000 levels, which fits in a few KB. The check runs on the raw bytes before the
parser, in C-speed steps, and costs nothing for the flat bodies the API takes.
"""
import json
import math
import re
from itertools import accumulate

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.utils.http import parse_header_parameters
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from rest_framework.parsers import JSONParser

from campus_agent.base.errors import (
    BODY_TOO_LARGE,
    INVALID_BODY,
    MSG_BODY_NOT_JSON,
    MSG_BODY_TOO_LARGE,
    MSG_CONTENT_TYPE,
    UNSUPPORTED_MEDIA_TYPE,
    ApplicationError,
)

JSON_MAX_DEPTH = 32
JSON_MEDIA_TYPE = "application/json"
_UTF8_CHARSETS = ("utf-8", "utf8")

MSG_BODY_TOO_LARGE_OF = _("请求体过大（上限 {limit} KB）。")
MSG_NOT_UTF8 = _("请求体必须是 UTF-8 编码的 JSON。")
MSG_TOO_DEEP = format_lazy(_("JSON 嵌套层数过多（上限 {limit} 层）。"), limit=JSON_MAX_DEPTH)
MSG_DUPLICATE_KEY = _("JSON 对象中有重复的字段名。")
MSG_NOT_FINITE = _("JSON 数字必须是有限值（不接受 NaN、Infinity 或溢出的数）。")
MSG_LONE_SURROGATE = _("请求体含有无效的 Unicode 字符（不成对的代理项 \\ud800–\\udfff）。")


class JsonBodyRefused(ApplicationError):
    """A request body refused before it is used; `status` 400, 413 or 415 with its code."""


def _refused(message: str, *, code: int = INVALID_BODY, status: int = 400) -> JsonBodyRefused:
    return JsonBodyRefused(message, code=code, status=status)


def too_large(max_bytes: int | None = None) -> JsonBodyRefused:
    message = MSG_BODY_TOO_LARGE if max_bytes is None else MSG_BODY_TOO_LARGE_OF.format(limit=max_bytes // 1024)
    return _refused(message, code=BODY_TOO_LARGE, status=413)


def unsupported_media_type() -> JsonBodyRefused:
    return _refused(MSG_CONTENT_TYPE, code=UNSUPPORTED_MEDIA_TYPE, status=415)


def json_content_type_check(content_type: str | None) -> None:
    """Raises 415 unless the header is `application/json` with no charset or a UTF-8 one
    (RFC 8259: JSON exchanged between systems is UTF-8)."""
    media_type, params = parse_header_parameters(content_type or "")
    if media_type.lower() != JSON_MEDIA_TYPE:
        raise unsupported_media_type()
    charset = params.get("charset")
    if charset is not None and charset.strip().lower() not in _UTF8_CHARSETS:
        raise unsupported_media_type()


# A JSON string, escapes included (the "unrolled loop" form: linear, no backtracking blow-up).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def json_depth_exceeds(raw: bytes, limit: int = JSON_MAX_DEPTH) -> bool:
    """Whether the brackets outside strings nest deeper than `limit`.

    Exact for valid JSON; for invalid JSON it reads the same tokens the parser would read up to
    its error, so nothing the parser would recurse into is missed.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # cannot nest deeper than its number of openers: the usual, flat body
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


class _DuplicateKey(ValueError):
    pass


class _NotFinite(ValueError):
    pass


def _object_without_duplicates(pairs: list) -> dict:
    # Two values for one key read differently by different parsers (first wins, last wins):
    # refuse the ambiguity instead of picking one.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey
    return obj


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite  # 1e999 parses to inf, which no JSON encoder writes back
    return value


def _constant(name: str):
    raise _NotFinite  # NaN, Infinity, -Infinity: Python's extensions, not JSON


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _holds_lone_surrogate(value) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_holds_lone_surrogate(k) or _holds_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_lone_surrogate(item) for item in value)
    return False


def json_object_decode(raw: bytes, *, max_bytes: int | None = None) -> dict:
    """The JSON object in `raw`. Raises JsonBodyRefused (400 / 413) with a message for people.
    `max_bytes`: a cap of the endpoint's own instead of DATA_UPLOAD_MAX_MEMORY_SIZE."""
    if max_bytes is not None:
        if len(raw) > max_bytes:
            raise too_large(max_bytes)
    elif len(raw) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise too_large()
    try:
        text = raw.decode("utf-8")  # strict: also refuses UTF-8-encoded surrogates
    except UnicodeDecodeError:
        raise _refused(MSG_NOT_UTF8) from None
    if json_depth_exceeds(raw):
        raise _refused(MSG_TOO_DEEP)
    try:
        body = json.loads(
            text,
            object_pairs_hook=_object_without_duplicates,
            parse_float=_finite_float,
            parse_constant=_constant,
        )
    except _DuplicateKey:
        raise _refused(MSG_DUPLICATE_KEY) from None
    except _NotFinite:
        raise _refused(MSG_NOT_FINITE) from None
    except (ValueError, RecursionError):  # RecursionError: cannot happen past the depth check
        raise _refused(MSG_BODY_NOT_JSON) from None
    if not isinstance(body, dict):
        raise _refused(MSG_BODY_NOT_JSON)
    # Only a `\ud8xx`–`\udfxx` escape can make a surrogate (strict UTF-8 refused the raw ones);
    # pairs are joined by the parser, so what is left in a string is a lone one.
    if _SURROGATE_ESCAPE.search(raw) and _holds_lone_surrogate(body):
        raise _refused(MSG_LONE_SURROGATE)
    return body


def json_object_read(request, *, max_bytes: int | None = None) -> dict:
    """The JSON object a Django request carries: Content-Type first (no body read for a 415),
    then size, then `json_object_decode`. Raises JsonBodyRefused.

    `max_bytes`: an endpoint whose bodies are larger by nature (the OpenAI-compatible API takes
    the client's whole history) gets a cap of its own; its body is read past Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE check, up to that cap and no further."""
    json_content_type_check(request.META.get("CONTENT_TYPE"))
    if max_bytes is not None:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > max_bytes:
            raise too_large(max_bytes)
        return json_object_decode(request.read(max_bytes + 1), max_bytes=max_bytes)
    try:
        raw = request.body  # Django refuses past DATA_UPLOAD_MAX_MEMORY_SIZE (length or actual size)
    except RequestDataTooBig:
        raise too_large() from None
    return json_object_decode(raw)


class JsonObjectParser(JSONParser):
    """DRF's default parser here (settings.REST_FRAMEWORK): the same checks as the chat view.

    A JSONParser subclass, so DRF hands it `request.body` (size-checked by Django; the 413 is
    answered by the exception handler) rather than the raw stream. Other media types never reach
    it: DRF answers them with UnsupportedMediaType (415).
    """

    def parse(self, stream, media_type=None, parser_context=None):
        json_content_type_check(media_type)
        return json_object_decode(stream.read())
