"""No import circle anywhere in the project, and the apps' dependencies point one way (docs/design.md#layout-and-layers).

The graph is read from the source with `ast`, every `import` counted: also those inside a
function or under `if TYPE_CHECKING`: a deferred import hides a circle from Python, not from the
design. (A dotted path in a string, as settings and `include()` name modules, is no import.)

The levels, lowest first; a module imports from its own level or lower ones, never upwards:

    campus_agent.base ← audit_app ← safety_app ← knowledge_app ← subagents_app ← agents_app ← chat_app ← insights_app
        ← demo_app ← campus_agent's start-up ← test code

- campus_agent.base is the shared base (errors, SSE encoder, logging, tracing …): all may use
  it, it uses no app.
- audit_app (the audit log and the staff roles) uses only the base: every app records its
  events through it, and it hears sign-ins and staff changes through Django's and
  django-simple-history's signals.
- safety_app (the moderation word lists and their matcher) uses only the base; chat_app
  checks questions with it.
- knowledge_app (the knowledge base: collections, documents, passages, their parsing and
  search) uses the base (and the audit log); agents_app offers each collection as a tool.
- insights_app (staff insight: routing checks through the runtime, the usage rollup and
  report) reads agents_app, subagents_app and chat_app, and no app imports it: chat_app tells it
  about stored turns with a signal, and it registers its admin extensions in its AppConfig.
- demo_app (the demo the keyless run serves: its sub-agents, MCP server, catalog and routing
  cases) registers rows of every app; nothing imports it but the start-up, which mounts it.
- campus_agent's start-up (settings, `urls.py`, `asgi.py`, the stream handler, the middleware,
  `/healthz`, `/metrics`: every module of campus_agent outside `base`) puts the apps together:
  it may import any app, and only test code imports it.
- Test code (`<app>.tests`, and `testkit`: the fixtures and fake servers the root conftest
  registers, outside INSTALLED_APPS; and `bench`, the benchmark scripts) drives the whole stack;
  nothing else imports it. It is in the circle check too: it has no circle.

Inside an app, its parts (`agents_app.runtime`, `agents_app.mcp`, `chat_app.runs` …: each
module folded into the app's sub-package or module it belongs to) form no circle either, and
chat_app's rooms are layered: gateways → runs → conversations → accounts → models.
"""
import ast
from pathlib import Path

from django.conf import settings

APPS = ("audit_app", "safety_app", "knowledge_app", "subagents_app", "agents_app", "chat_app", "insights_app", "demo_app")  # above the base, lowest first
# Packages of test code only (the `tests` of each app are test code too); the benchmark scripts
# sit at its level: they drive the whole stack with testkit's servers, and nothing imports them.
TEST_CODE = ("testkit", "bench")
PACKAGES = ("campus_agent", *APPS, *TEST_CODE)
BASE = "campus_agent.base"
# The rooms of an app that are layered too, lowest first: a room imports from its own or lower ones.
ROOMS = {"chat_app": ("chat_app.models", "chat_app.accounts", "chat_app.conversations", "chat_app.runs",
                      "chat_app.gateways")}



def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path, packages) -> dict[str, Path]:
    return {_module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: from . import x / from ..y import z
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    # `from package import name` imports the submodule `package.name` when there is one.
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> the first-party modules it imports (and their parent packages, which run first)."""
    modules = _modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _imported(node, name, path.name == "__init__.py"):
                parts = target.split(".")
                targets |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()
        graph[name] = targets - {name}
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm: the parts of the graph in which every node reaches every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while (member := stack.pop()) != node:
                component.add(member)
            found.append(component | {node})

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return found


def circles(graph: dict[str, set[str]], limit: int = 100) -> set[tuple[str, ...]]:
    """Every elementary circle (each from its smallest node, back to it), at most `limit`. A
    circle lies inside one strongly connected part, so only those are walked."""
    found: set[tuple[str, ...]] = set()
    for component in _strongly_connected(graph):
        for start in sorted(component):
            allowed = {node for node in component if node >= start}  # each circle once, from its smallest node
            paths = [[start]]
            while paths and len(found) < limit:
                path = paths.pop()
                for nxt in sorted(graph[path[-1]] & allowed):
                    if nxt == start:
                        found.add((*path, start))
                    elif nxt not in path:
                        paths.append([*path, nxt])
    return found


def _is_test(module: str) -> bool:
    return module.split(".")[0] in TEST_CODE or module.split(".")[1:2] == ["tests"]


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _parts(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same graph with each module of an app folded into its part (`agents_app.runtime`,
    `chat_app.runs`, `chat_app.runs.lease` …); imports between apps and tests left out."""
    folded: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if _is_test(module) or _part(module) == module.split(".")[0]:
            continue  # tests, and an app's own __init__
        folded.setdefault(_part(module), set()).update(
            _part(t) for t in targets
            if t.split(".")[0] == module.split(".")[0] and _part(t) not in (_part(module), t.split(".")[0])
            and not _is_test(t)
        )
    return folded


def _level(module: str) -> int:
    if _is_test(module):
        return len(APPS) + 2
    top = module.split(".")[0]
    if top == "campus_agent":  # the base at the bottom, the start-up above every app
        return 0 if module in ("campus_agent", BASE) or module.startswith(BASE + ".") else len(APPS) + 1
    return APPS.index(top) + 1


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) pairs where the imported module's level is above the importer's."""
    return {(module, target) for module, targets in graph.items() for target in targets if _level(target) > _level(module)}


def _project_graph() -> dict[str, set[str]]:
    graph = import_graph(Path(settings.BASE_DIR), PACKAGES)
    assert {"agents_app.runtime.loop", "chat_app.runs.engine", "insights_app.usage"} <= graph.keys()
    return graph


# --- the reader ------------------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_graph_reader_sees_imports_inside_functions_relative_ones_and_other_apps(tmp_path):
    root = _tree(tmp_path, {
        "campus_agent/__init__.py": "",
        "campus_agent/base.py": "",
        "agents_app/__init__.py": "",
        "agents_app/pkg/__init__.py": "",
        "agents_app/pkg/a.py": "def f():\n    from agents_app.pkg import b\n",
        "agents_app/pkg/b.py": "from . import a\nfrom campus_agent import base\n",
    })
    graph = import_graph(root, ("campus_agent", "agents_app"))
    assert graph["agents_app.pkg.a"] >= {"agents_app.pkg.b"}
    assert graph["agents_app.pkg.b"] >= {"agents_app.pkg.a", "campus_agent", "campus_agent.base"}
    assert circles(graph) == {("agents_app.pkg.a", "agents_app.pkg.b", "agents_app.pkg.a")}


def test_every_circle_is_found_once_from_its_smallest_node():
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert circles(graph) == {("a", "b", "a"), ("a", "b", "c", "a"), ("e", "e2", "e")}
    assert circles({"x": {"y"}, "y": {"z"}, "z": set()}) == set()


def test_the_level_reader_finds_upward_imports():
    graph = {
        "campus_agent.base.text": {"chat_app.models"},  # up
        "campus_agent.urls": {"chat_app.accounts.login_forms", "campus_agent.health"},  # an entry point
        "subagents_app.client": {"campus_agent.base.text"},
        "agents_app.tools": {"subagents_app.client", "insights_app.usage"},  # the second is up
        "chat_app.views": {"campus_agent.asgi", "testkit.model.fake_llm"},  # both up
        "testkit.fixtures.base": {"campus_agent.asgi"},  # test code: the top
        "campus_agent.tests.test_x": {"testkit.web.sse", "insights_app.usage"},
    }
    assert upward_imports(graph) == {
        ("campus_agent.base.text", "chat_app.models"),
        ("agents_app.tools", "insights_app.usage"),
        ("chat_app.views", "campus_agent.asgi"),
        ("chat_app.views", "testkit.model.fake_llm"),
    }


# --- the project -----------------------------------------------------------------------------


def test_every_first_party_package_is_read():
    packages = {path.parent.name for path in Path(settings.BASE_DIR).glob("*/__init__.py")}
    assert packages == set(PACKAGES)


def test_no_import_circle_between_modules_nor_between_the_parts_of_an_app():
    graph = _project_graph()
    assert sorted(circles(graph)) == [], "import circles between modules"
    assert sorted(circles(_parts(graph))) == [], "import circles between parts of an app (e.g. chat_app.runs)"


def test_nothing_imports_upwards():
    assert sorted(upward_imports(_project_graph())) == []


def test_the_rooms_of_an_app_point_one_way():
    """chat_app: gateways → runs → conversations → accounts → models; nothing loose at its top but
    models, admin, apps and urls (and Django's migrations and management commands)."""
    parts = _parts(_project_graph())
    for app, rooms in ROOMS.items():
        upward = {(room, target) for room in rooms for target in parts.get(room, ())
                  if target in rooms and rooms.index(target) > rooms.index(room)}
        assert sorted(upward) == [], f"{app}: a room imports a higher one"
    loose = {path.stem for path in (Path(settings.BASE_DIR) / "chat_app").glob("*.py")}
    assert loose == {"__init__", "models", "admin", "apps", "urls"}


def test_runtime_uses_mcp_and_mcp_knows_nothing_of_the_runtime():
    parts = _parts(_project_graph())
    assert "agents_app.mcp" in parts["agents_app.runtime"]
    assert "agents_app.runtime" not in parts["agents_app.mcp"]
