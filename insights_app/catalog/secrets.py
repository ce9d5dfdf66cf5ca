"""Secrets of MCP service configs in the catalog file: environment-variable references.

A file never holds a secret's value. It holds `${ENV:NAME}` (NAME: letters, digits and "_", not
starting with a digit), alone or inside a string (`"Bearer ${ENV:CANVAS_TOKEN}"`), in a header
value, an env value, an `oauth` value (a pre-registered client's secret) or the url of a
service's `config` (anywhere else it is an error: `command`,
`args` and `cwd` are shown in a dry run's diff). `import_catalog` replaces each reference with the
variable's value from its own environment when it runs, and stores the value, as admin stores a
value typed into the form; a variable that is not set is an error and nothing is imported.

Only variables staff allow may be read (`env_read_refusals`): a name CATALOG_ENV_ALLOWED lists or
whose prefix it lists, and never one of the server's own settings or a model provider's key
variable. A file names the address its service connects to, so without this rule a file someone
handed staff sends SECRET_KEY, the model's key or the metrics token there on the next turn
(docs/security.md, "Catalog files and environment variables").

References are not kept for the running server to resolve at connect time: that would let
whoever can edit a config read any variable of the server's environment (the secret key, the
database password) by naming it in a header sent to a host of their choice, and a missing
variable would surface as a failed tool call in a student's turn instead of an import error. The
price: a stored value does not remember that it came from a reference, so export finds the
secrets by their names again; import warns of a reference in a place export would write in clear.

Export turns every secret-looking value into a reference to a suggested variable name,
`MCP_<SERVICE>_<KEY>`, and warns: headers named Authorization, X-Api-Key or anything with
token, secret, key, password, auth, cookie or credential in the name; env variables named like
that; a password in the URL and URL query parameters named like that. An `Authorization` value's
scheme ("Bearer ", "Basic ", "Token ") is kept in front of the reference. A value that already
contains a reference is written as it is.
"""
import re
from collections.abc import Iterable, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from django.conf import settings

from agents_app.models import Provider

REFERENCE = re.compile(r"\$\{ENV:([A-Za-z_][A-Za-z0-9_]*)\}")
REFERENCE_SYNTAX = "${ENV:变量名}"
# The config's maps whose values may be secrets (`oauth`: a pre-registered client's secret).
SECRET_SECTIONS = ("headers", "env", "oauth")
SECRET_WORDS = ("authorization", "auth", "token", "secret", "key", "password", "passwd", "cookie", "credential")
AUTH_SCHEMES = ("Bearer ", "Basic ", "Token ")
SECRET_MASK = "（密钥，值不显示）"
# Read by the server's libraries whatever its settings say (OpenTelemetry's exporter headers may
# carry a token): as much the server's own as SETTINGS_ENV_NAMES.
SERVER_ENV_PREFIXES = ("OTEL_",)
ENV_NOT_ALLOWED = ("{where}: 不能读取环境变量 {name}：目录文件只能读取 CATALOG_ENV_ALLOWED 允许的变量"
                   "（现为 {allowed}），请改用允许的变量名或请运维人员把它加进 CATALOG_ENV_ALLOWED")
ENV_SERVER_SETTING = "{where}: 不能读取环境变量 {name}：它是本服务器自己的设置，即使 CATALOG_ENV_ALLOWED 列出它也不行"
ENV_PROVIDER_KEY = "{where}: 不能读取环境变量 {name}：它保存着模型提供方的密钥，即使 CATALOG_ENV_ALLOWED 列出它也不行"


def reference(name: str) -> str:
    return "${ENV:" + name + "}"


def secret_looking(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def suggested_name(*, service: str, key: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", f"MCP_{service}_{key}".upper()).strip("_")


def _reference_for(value: str, *, service: str, key: str) -> str:
    scheme = next((s for s in AUTH_SCHEMES if value.startswith(s)), "")
    return scheme + reference(suggested_name(service=service, key=key))


def _url_for_file(url: str, *, service: str, warn) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user, password = userinfo.split(":", 1)
            if password and not REFERENCE.search(password):
                variable = suggested_name(service=service, key="url_password")
                warn(f"url 中的密码 → {reference(variable)}")
                netloc = f"{user}:{reference(variable)}@{host}"
    pieces = []
    for piece in parts.query.split("&") if parts.query else []:
        name, sep, value = piece.partition("=")
        if sep and value and secret_looking(unquote(name)) and not REFERENCE.search(value):
            variable = suggested_name(service=service, key=f"url_{unquote(name)}")
            warn(f"url 参数 {unquote(name)} → {reference(variable)}")
            value = reference(variable)
        pieces.append(name + sep + value)
    return urlunsplit((parts.scheme, netloc, parts.path, "&".join(pieces), parts.fragment))


def config_for_file(*, service: str, config, warn) -> object:
    """The config as the file holds it: secret-looking values replaced by references.
    `warn(text)` is told of each replaced value (where, and which variable to set)."""
    if not isinstance(config, dict):
        return config
    result = dict(config)
    for section in SECRET_SECTIONS:
        values = config.get(section)
        if not isinstance(values, dict):
            continue
        masked = {}
        for key, value in values.items():
            if isinstance(value, str) and value and secret_looking(str(key)) and not REFERENCE.search(value):
                value = _reference_for(value, service=service, key=str(key))
                warn(f"{section}.{key} 像是密钥 → {value}")
            masked[key] = value
        result[section] = masked
    if isinstance(config.get("url"), str):
        result["url"] = _url_for_file(config["url"], service=service, warn=warn)
    return result


def _url_unmasked_part(url: str) -> str:
    """The URL without the places export turns into references (password, secret-looking query
    values): what an export writes in clear."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = userinfo.split(":", 1)[0] + "@" + host
    query = "&".join(
        name + sep + ("" if secret_looking(unquote(name)) else value)
        for name, sep, value in (piece.partition("=") for piece in parts.query.split("&") if piece)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def references_in(item, path: str) -> list[tuple[str, str]]:
    """(path, variable name) of every reference in `item`, wherever it is, in order."""
    if isinstance(item, str):
        return [(path, match.group(1)) for match in REFERENCE.finditer(item)]
    if isinstance(item, dict):
        return [found for key, inner in item.items() for found in references_in(inner, f"{path}.{key}" if path else key)]
    if isinstance(item, list):
        return [found for i, inner in enumerate(item) for found in references_in(inner, f"{path}[{i}]")]
    return []


def _env_name_allowed(name: str, allowed: Iterable[str]) -> bool:
    return any(name.startswith(entry[:-1]) if entry.endswith("*") else name == entry for entry in allowed)


def env_read_refusals(reads: Iterable[tuple[str, str]]) -> list[str]:
    """Why each (where, variable name) a catalog file reads may not be read, in order: the rule
    of the module docstring. Empty: every read is allowed."""
    reads = list(reads)
    provider_keys = set(Provider.objects.filter(api_key_env__in={name for _, name in reads})
                        .values_list("api_key_env", flat=True))
    allowed = settings.CATALOG_ENV_ALLOWED
    refusals = []
    for where, name in reads:
        if name in settings.SETTINGS_ENV_NAMES or name.startswith(SERVER_ENV_PREFIXES):
            refusals.append(ENV_SERVER_SETTING.format(where=where, name=name))
        elif name in provider_keys:
            refusals.append(ENV_PROVIDER_KEY.format(where=where, name=name))
        elif not _env_name_allowed(name, allowed):
            refusals.append(ENV_NOT_ALLOWED.format(where=where, name=name, allowed=", ".join(allowed) or "空：不允许任何变量"))
    return refusals


def _resolve(text: str, *, path: str, environ: Mapping[str, str], problems: list[str]) -> str:
    def substitute(match: re.Match) -> str:
        name = match.group(1)
        if name not in environ:
            problems.append(f"{path}: 环境变量 {name} 未设置（文件里写的是 {match.group(0)}）")
            return match.group(0)
        return environ[name]

    return REFERENCE.sub(substitute, text)


def _references_elsewhere(item, path: str) -> list[str]:
    places = dict.fromkeys(where for where, _ in references_in(item, path))
    return [f"{where}: 只有 headers、env 的值和 url 里可以写 {REFERENCE_SYNTAX}" for where in places]


def config_resolve(config, *, service: str, environ: Mapping[str, str]):
    """The file's config with each `${ENV:NAME}` replaced from `environ` (the variables the import
    may read, already checked by env_read_refusals), as (config, problems, warnings). References
    are resolved in header values, env values, oauth values and the url only (elsewhere: a
    problem, as is an unset variable). Warned of: a secret written in clear in the file, and a
    reference in a place export does not turn back into one (its value would be exported in
    clear)."""
    if not isinstance(config, dict):
        return config, [], []
    problems: list[str] = []
    warnings: list[str] = []
    config_for_file(service=service, config=config,
                    warn=lambda text: warnings.append(f"config.{text.split(' ', 1)[0]}: 文件里写的是明文，"
                                                      f"请改为 {REFERENCE_SYNTAX} 引用"))
    result = dict(config)
    for key, value in config.items():
        if key in SECRET_SECTIONS and isinstance(value, dict):
            resolved = {}
            for name, text in value.items():
                if isinstance(text, str) and REFERENCE.search(text):
                    if not secret_looking(str(name)):
                        warnings.append(f"config.{key}.{name}: 名称不像密钥，导出时这个值会以明文写出")
                    text = _resolve(text, path=f"config.{key}.{name}", environ=environ, problems=problems)
                resolved[name] = text
            result[key] = resolved
        elif key == "url" and isinstance(value, str):
            if REFERENCE.search(_url_unmasked_part(value)):
                warnings.append("config.url: 引用不在密码或像密钥的参数里，导出时它的值会以明文写出")
            result[key] = _resolve(value, path="config.url", environ=environ, problems=problems)
        else:
            problems += _references_elsewhere(value, f"config.{key}")
    return result, problems, warnings


def config_changes(old, new, *, service: str) -> list[str]:
    """Which parts of a config differ, for the dry-run diff: paths, with values shown only where
    no secret can be (never a header, env or oauth value; a URL with its secrets as references)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return ["config: 已修改"]
    lines = []
    for key in sorted(set(old) | set(new), key=str):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if key in SECRET_SECTIONS and isinstance(before or {}, dict) and isinstance(after or {}, dict):
            before, after = before or {}, after or {}
            for name in sorted(set(before) | set(after), key=str):
                if name not in before:
                    lines.append(f"config.{key}.{name}: 新增{SECRET_MASK}")
                elif name not in after:
                    lines.append(f"config.{key}.{name}: 去掉")
                elif before[name] != after[name]:
                    lines.append(f"config.{key}.{name}: 已修改{SECRET_MASK}")
        elif key == "url" and isinstance(before, str) and isinstance(after, str):
            def masked(url: str) -> str:
                return _url_for_file(url, service=service, warn=lambda _: None)

            lines.append(f"config.url: {masked(before)!r} → {masked(after)!r}")
        else:
            lines.append(f"config.{key}: {before!r} → {after!r}")
    return lines
