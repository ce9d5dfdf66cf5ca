"""The client the official MCP conformance suite (`@modelcontextprotocol/conformance`) runs:
`scripts/mcp-conformance-client URL` (scripts/mcp-conformance.sh drives the whole suite).

The suite starts a scripted server for one scenario, then this command with the server's URL
as its last argument, the scenario's name in `MCP_CONFORMANCE_SCENARIO`, scenario data (OAuth
settings, the tool calls to make) as JSON in `MCP_CONFORMANCE_CONTEXT` and the wire revision of
its leg in `MCP_CONFORMANCE_PROTOCOL_VERSION`; it judges what the client sent.

This is not a second client: it does what a turn does, through the project's own code — an
McpService row (built in memory, never saved), the tool list through the per-service cache
and the pooled session (`mcp_service_tool_infos`), each call through the runtime's MCP tool
(`McpTool.run`: the circuit breaker, `mcp_tool_call`, the result conversion), with a request
id as a turn has one. Nothing here picks the protocol revision per leg: the project connects
with the SDK's `mode="auto"` whatever the server, as in production (the SDK's own reference
client, `.github/actions/conformance/client.py` in python-sdk, pins `mode="legacy"` on the
handshake-era leg instead).

What each scenario calls is the reference client's script: list the tools, then call the tools
the scenario's server judges (`SCENARIO_CALLS`); scenarios not named there (`initialize`,
`json-schema-ref-no-deref`) only list. Progress text a tool streams goes to stderr, as the page
would show it in the tool's chip.

The `auth/*` scenarios run as a student's turn on a per-student service (agents_app/mcp/oauth.py):
the service's config has `oauth` (with the scenario's pre-registered client, when its context
names one), the student is a saved user, and the tokens and the registration land, encrypted,
in a database of this process's own (a copy of one the warm process migrated once). The person
who would visit the authorization page and fill in a server's form is `HeadlessPerson`, who
answers at once as the suite's scenarios expect (the reference client does the same).

Exit status: 0 when the listing (and the calls a scenario makes) went through the project's
path, whatever the tool results said (the suite judges the wire, not our verdict); 1 when the
service could not be reached, 2 on a usage error.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import sys
import uuid
from collections.abc import Callable


def _calls_add_numbers(infos, context) -> list[tuple[str, dict]]:
    return [("add_numbers", {"a": 5, "b": 3})]


def _calls_every_tool(infos, context) -> list[tuple[str, dict]]:
    # http-invalid-tool-headers: every tool the client kept (the SDK drops those whose
    # x-mcp-header annotations are malformed), each with the least its schema requires.
    return [(info.name, stub_arguments(info.input_schema or {})) for info in infos]


def _calls_from_context(infos, context) -> list[tuple[str, dict]]:
    # http-custom-headers: the suite names the exact arguments (edge cases of the header mirror).
    return [(call["name"], call.get("arguments") or {}) for call in context.get("toolCalls", [])]


def _calls_schema_echo(infos, context) -> list[tuple[str, dict]]:
    # json-schema-2020-12-preservation: send back the focal tool's inputSchema as the project
    # kept it from tools/list; the server diffs it against what it listed.
    focal = next(info for info in infos if info.name == "json_schema_2020_12_tool")
    return [("json_schema_echo", {"schema": focal.input_schema})]


def _calls_mrtr(infos, context) -> list[tuple[str, dict]]:
    return [(name, {}) for name in ("test_mrtr_echo_state", "test_mrtr_unrelated", "test_mrtr_no_state",
                                    "test_mrtr_no_result_type")]


def _calls_first_tool(infos, context) -> list[tuple[str, dict]]:
    # auth/*: the reference client calls the first tool listed, with no arguments.
    return [(infos[0].name, stub_arguments(infos[0].input_schema or {}))] if infos else []


SCENARIO_CALLS: dict[str, Callable] = {
    "tools_call": _calls_add_numbers,
    "request-metadata": _calls_add_numbers,
    "http-standard-headers": _calls_add_numbers,
    "sse-retry": lambda infos, context: [("test_reconnection", {})],
    "http-invalid-tool-headers": _calls_every_tool,
    "http-custom-headers": _calls_from_context,
    "json-schema-2020-12-preservation": _calls_schema_echo,
    "elicitation-sep1034-client-defaults": lambda infos, context: [("test_client_elicitation_defaults", {})],
    "sep-2322-client-request-state": _calls_mrtr,
}
_STUB_VALUES = {"string": "x", "integer": 0, "number": 0, "boolean": False, "object": {}, "array": [], "null": None}


def stub_arguments(schema: dict) -> dict:
    """The least arguments that satisfy a schema's `required` list."""
    properties = schema.get("properties") or {}
    return {name: _STUB_VALUES.get((properties.get(name) or {}).get("type"), "x") for name in schema.get("required", [])}


def scenario_plan(scenario: str) -> Callable | None:
    return SCENARIO_CALLS.get(scenario) or (_calls_first_tool if scenario.startswith("auth/") else None)


def conformance_service(url: str):
    """A streamable-HTTP McpService for the suite's server, in memory only (no database)."""
    from testkit.mcp.rows import mcp_service_in_memory

    # The suite's authorization servers listen on ports of their own, which no staff member could
    # list beforehand: any origin is allowed (its loopback address too: conformance_settings.py).
    return mcp_service_in_memory(name="conformance", protocol="streamable-http", config={"url": url},
                                 oauth_origins=["*"])


STUDENT_USERNAME = "conformance-student"


def oauth_service_saved(url: str, context: dict, scenario: str):
    """The scenario's service as a per-student one, saved (the tokens refer to it), and the
    student's user id; a pre-registered client from the scenario's context goes into the config,
    as staff would enter it. The client-credentials scenarios get a service the gateway calls with
    its own credential instead (and no student)."""
    from django.contrib.auth import get_user_model

    from agents_app.models import McpService

    if scenario.startswith("auth/client-credentials-"):  # the gateway's own credential: no student
        oauth = {"grant": "client_credentials", "client_id": context["client_id"]}
        if context.get("private_key_pem"):
            oauth.update(private_key=context["private_key_pem"],
                         signing_algorithm=context.get("signing_algorithm") or "ES256")
        else:
            oauth["client_secret"] = context["client_secret"]
    else:
        oauth = {key: context[key] for key in ("client_id", "client_secret") if context.get(key)}
    service = conformance_service(url)
    service.config = {"url": url, "oauth": oauth}
    service.save()
    saved = McpService.objects.get(pk=service.pk)
    if oauth.get("grant") == "client_credentials":
        return saved, None
    user, _ = get_user_model().objects.get_or_create(username=STUDENT_USERNAME)
    return saved, user.pk


class HeadlessPerson:
    """The person the suite's servers need (agents_app.mcp.person.McpPerson), answering at once
    as their scenarios expect: at the authorization page, which the suite's servers approve
    without a login, the page is fetched without following its redirect and the code, state and
    issuer are read from where it sends the browser; a form is accepted as the project's form
    shows it before anyone types, with the schema's defaults (SEP-1034, `elicitation_defaults`);
    a URL-mode request is accepted (the person opened the link)."""

    def __init__(self):
        self._answer = None

    async def authorization_redirect(self, authorization_url: str) -> None:
        from urllib.parse import parse_qs, urlparse

        import httpx2
        from mcp.shared.auth import AuthorizationCodeResult

        async with httpx2.AsyncClient(timeout=30) as client:
            response = await client.get(authorization_url, follow_redirects=False)
        location = response.headers.get("location") if response.is_redirect else None
        if not location:
            raise RuntimeError(f"the authorization page answered {response.status_code}, not a redirect")
        query = parse_qs(urlparse(location).query)
        if "code" not in query:
            raise RuntimeError(f"no code in the redirect: {location}")
        self._answer = AuthorizationCodeResult(code=query["code"][0], state=(query.get("state") or [None])[0],
                                               iss=(query.get("iss") or [None])[0])

    async def authorization_callback(self):
        answer, self._answer = self._answer, None
        if answer is None:
            raise RuntimeError("no authorization answer: authorization_redirect() did not run")
        return answer

    async def elicit(self, params):
        import mcp_types as types

        from agents_app.mcp.notifications import elicitation_defaults

        if getattr(params, "mode", None) == "url":
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content=elicitation_defaults(params.requested_schema or {}))


async def scenario_run(*, scenario: str, url: str, context: dict) -> int:
    """Lists the tools and makes the scenario's calls the way a turn does (module docstring)."""
    from loguru import logger

    from agents_app.mcp.person import person_use
    from agents_app.mcp.pool import McpUnavailable, mcp_pool_close
    from agents_app.mcp.tools import mcp_service_tool_infos
    from agents_app.runtime.context import RunContext
    from agents_app.runtime.mcp_tool import McpTool
    from campus_agent.base.asyncdb import db_call
    from campus_agent.base.request_id import request_id_set

    user_id = None
    if scenario.startswith("auth/"):
        service, user_id = await db_call(oauth_service_saved, url, context, scenario)
    else:
        service = conformance_service(url)
    ctx = RunContext(request_id=uuid.uuid4().hex[:16], conversation_id="mcp-conformance", user_id=user_id)
    request_id_set(ctx.request_id)

    async def emit(text: str) -> None:
        sys.stderr.write(f"[tool_chunk] {text}")

    try:
        try:
            with person_use(HeadlessPerson()):
                infos = await mcp_service_tool_infos(service=service, user_id=user_id)
        except McpUnavailable as exc:
            logger.error("conformance: the tools could not be listed: {}", exc)
            return 1
        logger.info("conformance: scenario={} tools={}", scenario, [info.name for info in infos])
        tools = {info.name: McpTool(service=service, info=info) for info in infos}
        plan = scenario_plan(scenario)
        for name, args in plan(infos, context) if plan else []:
            tool = tools.get(name)
            if tool is None:  # not listed, or dropped by the SDK (a malformed x-mcp-header)
                logger.info("conformance: {} is not offered, not called", name)
                continue
            with person_use(HeadlessPerson()):  # a call may step the scope up (403 insufficient_scope)
                outcome = await tool.run(args, ctx, emit)
            logger.info("conformance: {} ok={} text={}", name, outcome.ok, outcome.text[:200])
        return 0
    finally:
        await mcp_pool_close()


def _slot_take():
    """Waits for one of `MCP_CONFORMANCE_SLOTS` (default 2) slots, lock files in
    `MCP_CONFORMANCE_SLOTS_DIR`, when that is set (scripts/mcp-conformance.sh sets it), and holds
    it until the process ends. The suite starts every scenario's client at once; forty clients
    on two cores (cold: each importing Django and the SDK; warm: each still making its HTTP client,
    TLS context included) starve each other and the suite's servers until the scenarios fail on
    a timeout, not on what the client did."""
    slots_dir = os.environ.get("MCP_CONFORMANCE_SLOTS_DIR")
    if not slots_dir:
        return None
    import fcntl
    import time

    slots = max(1, int(os.environ.get("MCP_CONFORMANCE_SLOTS") or 2))
    while True:
        for slot in range(slots):
            handle = open(os.path.join(slots_dir, f"slot-{slot}"), "w")  # noqa: SIM115 - held until exit
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle
            except BlockingIOError:
                handle.close()
        time.sleep(0.05)


# The migrated database the scenarios copy (the warm process makes it once; a cold client itself).
_template_db: str | None = None


def _django_setup() -> None:
    # Nothing of a deployment's .env may steer this throwaway process: no Redis (the breaker keeps
    # its state in the process's memory), no database of a deployment (only the auth scenarios
    # store anything: a student's tokens, in a file of their own, `_database_own`), no tracing, no
    # log file.
    os.environ.update({"REDIS_URL": "", "DATABASE_URL": "sqlite:///:memory:", "OTEL_SDK_DISABLED": "true"})
    os.environ.setdefault("LOG_LEVEL", "DEBUG")  # the SDK's own lines too: the results keep stderr
    os.environ["DJANGO_SETTINGS_MODULE"] = "testkit.mcp.conformance_settings"
    import django
    from loguru import logger

    django.setup()
    from campus_agent.base.logging import LOG_FORMAT

    logger.remove()  # stdout is the suite's record of the client; the log goes to stderr
    logger.add(sys.stderr, level=os.environ.get("LOG_LEVEL", "DEBUG"), format=LOG_FORMAT, backtrace=False,
               diagnose=False)


def _template_make() -> str:
    """A migrated SQLite file (a temporary directory, removed at exit)."""
    import atexit
    import shutil
    import tempfile

    from django.core.management import call_command
    from django.db import connections

    folder = tempfile.mkdtemp(prefix="mcp-conformance-db-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = os.path.join(folder, "template.sqlite3")
    _database_point(path)
    call_command("migrate", verbosity=0, interactive=False)
    connections.close_all()
    return path


def _database_point(path: str) -> None:
    from django.conf import settings
    from django.db import connections

    connections.close_all()
    settings.DATABASES["default"]["NAME"] = path
    connections["default"].settings_dict["NAME"] = path


def _database_own() -> str:
    """This scenario's own database: a copy of the template (made here when there is none yet),
    so that scenarios running side by side never see each other's tokens; its path."""
    import shutil
    import tempfile

    global _template_db
    if _template_db is None:
        _template_db = _template_make()
    handle, path = tempfile.mkstemp(prefix="mcp-conformance-", suffix=".sqlite3")
    os.close(handle)
    shutil.copyfile(_template_db, path)
    _database_point(path)
    return path


def _scenario_main(argv: list[str]) -> int:
    """One scenario in this (already set-up) process: argv's last item is the URL."""
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    database = _database_own() if scenario.startswith("auth/") else None
    try:
        return _scenario_run_sync(scenario, argv)
    finally:
        if database is not None:
            from django.db import connections

            from campus_agent.base.asyncdb import db_connections_close

            db_connections_close()
            connections.close_all()
            os.unlink(database)


def _scenario_run_sync(scenario: str, argv: list[str]) -> int:
    try:
        context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    except ValueError:
        print("MCP_CONFORMANCE_CONTEXT is not JSON", file=sys.stderr)
        return 2
    return asyncio.run(scenario_run(scenario=scenario, url=argv[-1], context=context))


# --- the warm start (scripts/mcp-conformance.sh) --------------------------------------------------
#
# Each client start imports Django, the project and the mcp SDK: about 2.5 s of CPU, and the suite
# starts one per scenario, over a hundred a run. So the script starts one process that has done all
# that (`--serve SOCKET`), and each client it spawns hands it its stdin, stdout and stderr over a
# Unix socket (SCM_RIGHTS) with its argv and MCP_CONFORMANCE_* variables; the warm process forks a
# child that takes those as its own and runs the scenario, as a fresh process would, and sends back
# its exit status. Same code, same per-scenario process; only the imports are shared.

ZYGOTE_ENV = "MCP_CONFORMANCE_ZYGOTE"
_LENGTH = struct.Struct("!I")


def _zygote_child(conn: socket.socket, fds: list[int], payload: bytes) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for number, fd in enumerate(fds):  # the spawned client's stdin, stdout, stderr become ours
        os.dup2(fd, number)
        os.close(fd)
    request = json.loads(payload)
    os.environ.update(request["env"])
    slot = _slot_take()  # noqa: F841 - a forked child is cheap, forty at once on two cores are not
    try:
        status = _scenario_main(request["argv"])
    except BaseException:  # noqa: BLE001 - reported as the exit status, like a crash of a fresh process
        import traceback

        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    conn.sendall(_LENGTH.pack(status))
    os._exit(status)


def zygote_serve(path: str) -> None:
    """Sets up once, then forks a child per client that connects to `path` (see above)."""
    global _template_db
    _django_setup()
    _template_db = _template_make()
    import mcp.client.streamable_http  # noqa: F401

    import agents_app.mcp.tools  # noqa: F401 - the imports every child needs, made once
    import agents_app.runtime.mcp_tool  # noqa: F401

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(128)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print(f"conformance client ready at {path}", file=sys.stderr, flush=True)
    while True:
        conn, _ = server.accept()
        try:
            header, fds, _, _ = socket.recv_fds(conn, _LENGTH.size, 3)
            (size,) = _LENGTH.unpack(header)
            payload = b""
            while len(payload) < size:
                chunk = conn.recv(size - len(payload))
                if not chunk:
                    break
                payload += chunk
        except (OSError, struct.error):
            conn.close()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            _zygote_child(conn, fds, payload)
        conn.close()
        for fd in fds:
            os.close(fd)


def _zygote_run(path: str, argv: list[str]) -> int:
    """This client's run in a child of the warm process at `path`; its exit status."""
    env = {name: value for name, value in os.environ.items() if name.startswith("MCP_CONFORMANCE_")}
    payload = json.dumps({"argv": argv, "env": env}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        socket.send_fds(conn, [_LENGTH.pack(len(payload))], [0, 1, 2])
        conn.sendall(payload)
        answer = b""
        while len(answer) < _LENGTH.size:
            chunk = conn.recv(_LENGTH.size - len(answer))
            if not chunk:
                return 1  # the child died before it could say
            answer += chunk
    return _LENGTH.unpack(answer)[0]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"] and len(argv) == 2:
        zygote_serve(argv[1])
        return 0
    if not argv:
        print("usage: scripts/mcp-conformance-client URL  (scenario in MCP_CONFORMANCE_SCENARIO)", file=sys.stderr)
        return 2
    if os.environ.get(ZYGOTE_ENV):
        return _zygote_run(os.environ[ZYGOTE_ENV], argv)
    slot = _slot_take()  # noqa: F841 - held while the process runs
    _django_setup()
    return _scenario_main(argv)


if __name__ == "__main__":
    sys.exit(main())
