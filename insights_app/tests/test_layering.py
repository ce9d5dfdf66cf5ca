"""Nothing depends on insights_app (DESIGN §2, docs/architecture.md): no other app imports it,
not even inside a function, so it can be removed without touching the chat path."""
import ast
from pathlib import Path

from django.conf import settings

OTHER_APPS = ("campus_agent", "subagents_app", "agents_app", "chat_app")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module or "")
    return names


def test_no_other_app_imports_insights_app():
    root = Path(settings.BASE_DIR)
    offenders = sorted(
        str(path.relative_to(root))
        for app in OTHER_APPS
        for path in (root / app).rglob("*.py")
        if any(name == "insights_app" or name.startswith("insights_app.") for name in _imports(path))
    )
    assert offenders == []


def test_insights_app_is_installed_after_what_it_extends():
    """Its admin extends the catalog admins, so those must be registered first."""
    apps = settings.INSTALLED_APPS
    assert apps.index("insights_app") > max(apps.index(app) for app in ("agents_app", "subagents_app", "chat_app"))
