"""Per-protocol checks of an McpService config, shared by admin (model clean) and imports."""
from urllib.parse import urlparse, urlsplit

from campus_agent.base.addresses import url_origin

STDIO_KEYS = {"command", "args", "env", "cwd"}
HTTP_KEYS = {"url", "headers", "oauth"}
# `oauth`: each student authorizes the service with their own account (agents_app/mcp/oauth.py).
# `"grant": "client_credentials"`: the gateway calls it with a credential of its own instead.
# What private_key_jwt may sign with: asymmetric keys only (a shared secret is client_secret's job).
SIGNING_ALGORITHMS = ("ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA")
OAUTH_KEYS = {"grant", "client_id", "client_secret", "scope", "private_key", "signing_algorithm", "issuer"}
# McpService.oauth_origins: origins its OAuth flow may go to besides its own (mcp/oauth_origins.py); "*": any.
ANY_ORIGIN = "*"
MAX_OAUTH_ORIGINS = 20


def _string_map_errors(value, field: str) -> list[str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return [f"“{field}” 必须是字符串到字符串的对象，如 {{\"KEY\": \"value\"}}。"]
    return []


def mcp_config_errors(*, protocol: str, config) -> list[str]:
    """Messages staff can act on; empty when the config is usable for the protocol."""
    if not isinstance(config, dict):
        return ["连接配置必须是 JSON 对象。"]
    errors: list[str] = []
    if protocol == "stdio":
        command = config.get("command")
        if not isinstance(command, str) or not command.strip():
            errors.append("stdio 需要 “command”：要运行的程序，字符串，如 \"python\"。")
        args = config.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            errors.append("“args” 必须是字符串列表，如 [\"-m\", \"my_server\"]。")
        if "env" in config:
            errors += _string_map_errors(config["env"], "env")
        if "cwd" in config and not isinstance(config["cwd"], str):
            errors.append("“cwd” 必须是目录路径字符串。")
        unknown = set(config) - STDIO_KEYS
    elif protocol in ("sse", "streamable-http"):
        url = config.get("url")
        parsed = urlparse(url) if isinstance(url, str) else None
        if not parsed or parsed.scheme not in ("http", "https") or not parsed.netloc:
            errors.append(f"{protocol} 需要 “url”：http:// 或 https:// 开头的地址。")
        if "headers" in config:
            errors += _string_map_errors(config["headers"], "headers")
        if "oauth" in config:
            errors += _oauth_errors(config["oauth"])
        unknown = set(config) - HTTP_KEYS
    else:
        return [f"未知协议 “{protocol}”。"]
    if unknown:
        errors.append(f"不认识的键：{', '.join(sorted(unknown))}。")
    return errors


def _oauth_errors(oauth) -> list[str]:
    if not isinstance(oauth, dict):
        return ['“oauth” 必须是 JSON 对象：{} 表示自动注册，或 {"client_id": "…", "client_secret": "…", "scope": "…"}。']
    errors = [f"“oauth.{key}” 必须是不超过 1000 个字符的字符串。" for key in sorted(OAUTH_KEYS & set(oauth))
              if not isinstance(oauth[key], str) or len(oauth[key]) > 1000]
    if unknown := set(oauth) - OAUTH_KEYS:
        errors.append(f"“oauth” 中不认识的键：{', '.join(sorted(unknown))}（可用 client_id、client_secret、scope）。")
    if "client_secret" in oauth and not oauth.get("client_id"):
        errors.append("填了 “oauth.client_secret” 就要填 “oauth.client_id”。")
    grant = oauth.get("grant", "authorization_code")
    if grant == "client_credentials":
        if not oauth.get("client_id") or bool(oauth.get("client_secret")) == bool(oauth.get("private_key")):
            errors.append("client_credentials 需要 “oauth.client_id”，以及 “oauth.client_secret” 或 “oauth.private_key”"
                          "（PEM 私钥，private_key_jwt）二者之一。")
    elif grant != "authorization_code":
        errors.append("“oauth.grant” 只能是 authorization_code（每位学生各自授权，默认）或 client_credentials"
                      "（网关用自己的凭据）。")
    elif "private_key" in oauth or "issuer" in oauth:
        errors.append("“oauth.private_key” 和 “oauth.issuer” 只用于 client_credentials。")
    if "signing_algorithm" in oauth and oauth["signing_algorithm"] not in SIGNING_ALGORITHMS:
        errors.append(f"“oauth.signing_algorithm” 只能是 {'、'.join(SIGNING_ALGORITHMS)} 之一。")
    return errors


def oauth_origins_errors(value) -> list[str]:
    """Problems of a service's allowed authorization servers: a list of origins, or "*"."""
    if not isinstance(value, list) or len(value) > MAX_OAUTH_ORIGINS:
        return [f'须是不超过 {MAX_OAUTH_ORIGINS} 项的 JSON 列表，如 ["https://idp.example.edu.cn"]；["*"] 表示任何授权服务器。']
    errors = []
    for entry in value:
        if entry == ANY_ORIGIN:
            continue
        parts = urlsplit(entry) if isinstance(entry, str) and len(entry) <= 200 else None
        if parts is None or url_origin(entry) is None or parts.path not in ("", "/") or parts.query \
                or parts.fragment or "@" in parts.netloc:
            errors.append(f"“{str(entry)[:64]}”不是一个源：写 https://主机 或 https://主机:端口，不带路径。")
    return errors[:5]


def tool_approvals_errors(value) -> list[str]:
    """Problems of an MCP service's per-tool approval map: {"<tool>": "auto" | "ask" | "never"}."""
    from campus_agent.base.approval import ApprovalPolicy

    if not isinstance(value, dict):
        return ['须是 JSON 对象，如 {"register_course": "ask"}。']
    errors = []
    for tool, policy in value.items():
        if not tool.strip() or len(tool) > 128:
            errors.append("工具名不能为空，最长 128 个字符。")
        elif policy not in ApprovalPolicy.values:
            errors.append(f"工具“{tool[:64]}”的取值须是 auto、ask 或 never。")
    return errors[:5]
