"""A refused request is answered in the shape of the API it was made to (docs/security.md#hosts-and-error-shapes).

Under the API prefixes every error is JSON: OpenAI's `{"error": {"message", "type", "param",
"code"}}` under /v1/ (its clients parse that), the project's `{"code", "message"}` under /api/,
/mcp, /a2a, /.well-known/ (the A2A card, the MCP metadata) and the demo's sub-agents. Elsewhere
(the page, the admin) a page. A path is classed after its leading slashes are folded (`//mcp` is
asked of the MCP server's prefix, and answered 404 as JSON).

Django answers some requests before (or instead of) a view: a Host outside ALLOWED_HOSTS, a
multipart form of too many fields (TooManyFieldsSent), a body over DATA_UPLOAD_MAX_MEMORY_SIZE
read as a form (RequestDataTooBig), a failed CSRF check, a 404, a 500. Its handlers for them
are the ones here (the URLconf's handler400/403/404/500, settings.CSRF_FAILURE_VIEW), so none of
them is Django's HTML page on an API path; a view's own HTML error (Django's 405 of
`require_http_methods`, a DRF view that renders HTML such as the API docs) is made JSON by
campus_agent.middleware.ApiErrorShapeMiddleware with `status_error`. campus_agent/intake.py
refuses with `refusal_response` too, before Django has the request.
"""

from django.core.exceptions import DisallowedHost, RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.shortcuts import render
from django.utils.translation import gettext_lazy as _
from django.views import csrf, defaults

from campus_agent.base import errors
from campus_agent.base.json_body import too_large
from chat_app.gateways.openai import wire

API_PREFIXES = ("/api/", "/mcp/", "/a2a/", "/.well-known/", "/demo/")
# Pages under an API prefix: where an MCP service's authorization server sends the student's
# browser back (chat_app.gateways.page.mcp_oauth) is read by a person, not a client.
PAGE_PREFIXES = ("/mcp/oauth/",)
OPENAI_PREFIX = "/v1/"

MSG_BAD_REQUEST = _("请求无效。")
MSG_HOST_NOT_ALLOWED = _("请求的主机名（Host）不是本站的。")
MSG_TOO_MANY_FIELDS = _("表单的字段或文件太多。")
MSG_FORBIDDEN = _("没有权限执行这个操作。")
MSG_REFUSED = _("请求未被接受。")

# An error status → its code and message, where nothing more precise is known.
_STATUS_ERRORS = {
    400: (errors.INVALID_BODY, MSG_BAD_REQUEST),
    401: (errors.TOKEN_INVALID, errors.TOKEN_INVALID_MESSAGE),
    403: (errors.CSRF_FAILED, MSG_FORBIDDEN),
    404: (errors.NOT_FOUND, errors.MSG_NO_SUCH_RESOURCE),
    405: (errors.METHOD_NOT_ALLOWED, errors.MSG_METHOD),
    413: (errors.BODY_TOO_LARGE, errors.MSG_BODY_TOO_LARGE),
    415: (errors.UNSUPPORTED_MEDIA_TYPE, errors.MSG_CONTENT_TYPE),
}


def api_family(path: str) -> str | None:
    """ "openai" under /v1/, "api" under the other API prefixes, None elsewhere (a page)."""
    path = "/" + path.lstrip("/") + "/"  # "//mcp" → "/mcp/"
    if path.startswith(OPENAI_PREFIX):
        return "openai"
    return "api" if path.startswith(API_PREFIXES) and not path.startswith(PAGE_PREFIXES) else None


def refusal_response(request, error: errors.ApiError):
    """`error` in the shape of the request's API; on a page path, a page in the site's look."""
    family = api_family(request.path_info)
    if family == "openai":
        return wire.error_response(error)
    if family == "api":
        return errors.error_response(error)
    response = render(request, "refused.html", {"status": error.status, "message": error.message}, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def status_error(status: int) -> errors.ApiError:
    """The API's error for an HTTP error status, when nothing more precise is known."""
    if status >= 500:
        return errors.ApiError(errors.MSG_INTERNAL, code=errors.GENERAL, status=status)
    code, message = _STATUS_ERRORS.get(status, (status * 100 + 1, MSG_REFUSED))
    return errors.ApiError(message, code=code, status=status)


def _bad_request_error(exception) -> errors.ApiError:
    if isinstance(exception, RequestDataTooBig):
        refused = too_large()
        return errors.ApiError(refused.message, code=refused.code, status=refused.status)
    if isinstance(exception, DisallowedHost):
        message = MSG_HOST_NOT_ALLOWED
    elif isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
        message = MSG_TOO_MANY_FIELDS
    else:
        message = MSG_BAD_REQUEST
    return errors.invalid_body(message)


def bad_request(request, exception=None):
    """handler400: what Django refuses as a SuspiciousOperation or BadRequest."""
    if api_family(request.path_info) is None:
        return defaults.bad_request(request, exception)
    return refusal_response(request, _bad_request_error(exception))


def permission_denied(request, exception=None):
    """handler403."""
    if api_family(request.path_info) is None:
        return defaults.permission_denied(request, exception)
    return refusal_response(request, status_error(403))


def page_not_found(request, exception=None):
    """handler404."""
    if api_family(request.path_info) is None:
        return defaults.page_not_found(request, exception)
    return refusal_response(request, status_error(404))


def server_error(request):
    """handler500 (the exception is logged by Django, with its traceback)."""
    if api_family(request.path_info) is None:
        return defaults.server_error(request)
    return refusal_response(request, status_error(500))


def csrf_failure(request, reason=""):
    """settings.CSRF_FAILURE_VIEW: a cookie-authenticated POST without its token."""
    if api_family(request.path_info) is None:
        return csrf.csrf_failure(request, reason)
    return refusal_response(request, errors.ApiError(errors.MSG_CSRF, code=errors.CSRF_FAILED, status=403))
