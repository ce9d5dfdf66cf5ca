"""The application's error family and the API's error vocabulary (docs/design.md#the-chat-stream): the codes of the
chat contract, the codes that complete it for the answers it leaves open (docs/api.md lists them
all), the messages users read, and the JSON body `{"code": …, "message": …}` they are sent in."""
from django.http import JsonResponse
from django.utils.translation import gettext_lazy as _

TOKEN_INVALID = 40101
INVALID_BODY = 40001
CAMPUS_TOKEN_EXPIRED = 40102
SUBAGENT_INTERNAL = 50001
GENERAL = 50002
DOWNSTREAM = 50003


class ApplicationError(Exception):
    """An error with a contract code and a message a user may read."""

    code = GENERAL
    status = 500

    def __init__(self, message: str, *, code: int | None = None, status: int | None = None):
        message = str(message)  # a lazy translation: in the language of the request raising it
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status


# --- the API's answers before any streaming: the contract fixes 40001, 40101 and the 5xxxx codes
# above; these complete it for the answers it leaves open (docs/api.md).

INVALID_CREDENTIALS = 40103
CSRF_FAILED = 40301
NOT_FOUND = 40401
METHOD_NOT_ALLOWED = 40501
TOO_MANY_STREAMS = 42901
RATE_LIMITED = 42902
LOGIN_THROTTLED = 42903
TOO_MANY_FOLLOWERS = 42905
BODY_TOO_LARGE = 41301
UNSUPPORTED_MEDIA_TYPE = 41501

# 401 messages are fixed machine-readable words (docs/design.md#the-chat-stream), not prose.
TOKEN_MISSING_MESSAGE = "token_missing"
TOKEN_INVALID_MESSAGE = "token_invalid"

MSG_BODY_TOO_LARGE = _("请求体过大（上限 64 KB）。")
MSG_BODY_NOT_JSON = _("请求体必须是 JSON 对象。")
MSG_CONTENT_TYPE = _("请求体必须是 JSON，请使用 Content-Type: application/json（UTF-8）。")
MSG_MESSAGE_MISSING = _("message 不能为空。")
MSG_MESSAGE_TOO_LONG = _("message 不能超过 8000 个字符。")
MSG_FIELD_TYPE = _("{field} 的类型不正确。")
MSG_NUL_CHARACTER = _("{field} 不能包含空字符（\\u0000）。")
MSG_CONVERSATION_ID = _("conversation_id 不是有效的对话 ID。")
MSG_AGENT_UNKNOWN = _("智能体不存在或已停用。")
MSG_HINT_DOMAIN_UNKNOWN = _("hint_domain 不是这个智能体可用的业务域（可用：{domains}）。")
MSG_HINT_DOMAIN_NONE = _("这个智能体没有可用的业务域，hint_domain 请留空。")
MSG_NO_AGENT = _("暂无可用的智能体，请联系管理员。")
MSG_NOT_FOUND = _("对话不存在。")
MSG_CSRF = _("CSRF 校验失败，请刷新页面后重试。")
MSG_TOO_MANY_STREAMS = _("同时进行的对话太多，请等当前回答结束后再试。")
MSG_RATE_LIMITED = _("发送太频繁，请稍后再试。")
MSG_TOO_MANY_FOLLOWERS = _("同时打开的回答流太多（最多 {limit} 个），请关闭一些页面或标签页后再试。")
MSG_LOGIN_THROTTLED = _("登录失败次数过多，请 {minutes} 分钟后再试。")
MSG_BAD_CREDENTIALS = _("用户名或密码错误。")
MSG_SSO_NOT_CONFIGURED = _("未配置校园统一认证，暂不能用校园令牌登录。")
MSG_SSO_UNAVAILABLE = _("校园统一认证暂时不可用，请稍后重试。")
MSG_METHOD = _("不支持该请求方法。")
MSG_INTERNAL = _("服务内部错误，请稍后重试。")


class ApiError(ApplicationError):
    """An error answered before any streaming, as a JSON body with its HTTP status."""

    def __init__(self, message: str, *, code: int, status: int, headers: dict | None = None):
        super().__init__(message, code=code, status=status)
        self.headers = headers or {}


def token_missing() -> ApiError:
    return ApiError(TOKEN_MISSING_MESSAGE, code=TOKEN_INVALID, status=401, headers={"WWW-Authenticate": "Bearer"})


def token_invalid() -> ApiError:
    return ApiError(TOKEN_INVALID_MESSAGE, code=TOKEN_INVALID, status=401, headers={"WWW-Authenticate": "Bearer"})


def invalid_body(message: str) -> ApiError:
    return ApiError(message, code=INVALID_BODY, status=400)


def not_found() -> ApiError:
    return ApiError(MSG_NOT_FOUND, code=NOT_FOUND, status=404)


def error_response(error: ApiError) -> JsonResponse:
    response = JsonResponse(  # readable Chinese for curl users, as the DRF answers are
        {"code": error.code, "message": error.message}, status=error.status, json_dumps_params={"ensure_ascii": False}
    )
    for name, value in error.headers.items():
        response[name] = value
    return response


MSG_NO_SUCH_RESOURCE = _("请求的资源不存在。")
