"""agents_app's import drawing has no circle (DESIGN §2: dependencies point one way).

The graph is read from the source with `ast`, every `import` counted, also those inside a
function: a deferred import hides a circle from Python, not from the design.
"""
import ast
from pathlib import Path

from django.conf import settings

APP = "agents_app"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path) -> dict[str, Path]:
    return {_module_name(path, root): path for path in sorted((root / APP).rglob("*.py"))}


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


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the agents_app modules it imports (and their parent packages, which run first)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _imported(node, name, path.name == "__init__.py"):
                parts = target.split(".")
                targets |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()
        graph[name] = targets - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _components(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same graph with each module folded into its part of the app (`agents_app.runtime`,
    `agents_app.mcp`, `agents_app.models` …)."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    folded: dict[str, set[str]] = {}
    for module, targets in graph.items():
        folded.setdefault(part(module), set()).update(part(t) for t in targets if part(t) != part(module))
    return folded


def test_the_graph_reader_sees_imports_inside_functions_and_relative_ones(tmp_path):
    package = tmp_path / APP / "pkg"
    package.mkdir(parents=True)
    (tmp_path / APP / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from agents_app.pkg import b\n")
    (package / "b.py").write_text("from . import a\n")
    graph = import_graph(tmp_path)
    assert graph[f"{APP}.pkg.a"] >= {f"{APP}.pkg.b"} and graph[f"{APP}.pkg.b"] >= {f"{APP}.pkg.a"}
    assert find_cycle(graph) in ([f"{APP}.pkg.a", f"{APP}.pkg.b", f"{APP}.pkg.a"],
                                 [f"{APP}.pkg.b", f"{APP}.pkg.a", f"{APP}.pkg.b"])


def test_no_module_of_agents_app_imports_itself_in_a_circle():
    graph = import_graph(Path(settings.BASE_DIR))
    assert f"{APP}.runtime.loop" in graph  # the graph really is the app's
    assert find_cycle(graph) is None


def test_runtime_uses_mcp_and_mcp_knows_nothing_of_the_runtime():
    graph = _components(import_graph(Path(settings.BASE_DIR)))
    assert f"{APP}.mcp" in graph[f"{APP}.runtime"]
    assert f"{APP}.runtime" not in graph[f"{APP}.mcp"]
    assert find_cycle({part: targets for part, targets in graph.items() if part != f"{APP}.tests"}) is None
