"""Nothing depends on insights_app (docs/design.md#layout-and-layers, docs/architecture.md): no other app imports it,
not even inside a function, so it can be removed without touching the chat path; and it extends
other apps' admin pages through their front door only."""
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


def test_the_catalog_admins_stay_their_owners_and_insights_extends_them_through_the_registry():
    """insights_app adds its routing checks through admin extensions registered in its ready()
    (campus_agent/base/admin_extensions.py), not by re-registering subclasses of another app's
    admin: the order of INSTALLED_APPS does not matter, and each app keeps its own class."""
    from django.contrib import admin

    from agents_app.admin import AgentAdmin, McpServiceAdmin
    from agents_app.models import Agent, McpService
    from campus_agent.base.admin_extensions import admin_extensions
    from chat_app.models import Message
    from subagents_app.admin import SubAgentAdmin
    from subagents_app.models import SubAgent

    registered = {model: type(admin.site.get_model_admin(model)) for model in (Agent, McpService, SubAgent)}
    assert registered == {Agent: AgentAdmin, McpService: McpServiceAdmin, SubAgent: SubAgentAdmin}
    assert [type(e).__name__ for e in admin_extensions(Agent)] == ["AgentRouting"]
    assert [type(e).__name__ for e in admin_extensions(SubAgent)] == ["SubAgentRouting"]
    assert [type(e).__name__ for e in admin_extensions(McpService)] == ["McpServiceRouting"]
    assert [type(e).__name__ for e in admin_extensions(Message)] == ["SaveAsCase"]


def test_no_app_unregisters_an_admin():
    root = Path(settings.BASE_DIR)
    calls = sorted(
        f"{path.relative_to(root)}:{node.lineno}"
        for app in (*OTHER_APPS, "insights_app", "demo_app")
        for path in (root / app).rglob("*.py") if "tests" not in path.parts
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "unregister"
    )
    assert calls == []
