"""All reads of `Agent` live in agents_app/selectors.py (STYLE: reads in selectors)."""
import ast
from pathlib import Path

from django.conf import settings

APPS = ("agents_app", "chat_app", "subagents_app")
SKIPPED_DIRS = {"tests", "migrations"}
WRITES = {"create", "get_or_create", "update_or_create", "bulk_create"}
ALLOWED = {
    "agents_app/selectors.py",
    "agents_app/models.py",  # Agent.clean(): the model checks its own single-default rule
}


def agent_reads(root: Path) -> list[str]:
    """`path:line Agent.objects.<method>` for each read of Agent's manager outside ALLOWED."""
    found = []
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if SKIPPED_DIRS & set(path.relative_to(root).parts) or relative in ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                manager = node.value if isinstance(node, ast.Attribute) else None
                if (
                    isinstance(manager, ast.Attribute)
                    and manager.attr in ("objects", "_default_manager")
                    and isinstance(manager.value, ast.Name)
                    and manager.value.id == "Agent"
                    and node.attr not in WRITES
                ):
                    found.append(f"{relative}:{node.lineno} Agent.{manager.attr}.{node.attr}")
    return found


def test_the_finder_sees_a_read(tmp_path):
    (tmp_path / "chat_app").mkdir()
    (tmp_path / "chat_app" / "pages.py").write_text("def f():\n    return Agent.objects.filter(enabled=True)\n")
    (tmp_path / "chat_app" / "services.py").write_text("Agent.objects.create(slug='x')\n")
    assert agent_reads(tmp_path) == ["chat_app/pages.py:2 Agent.objects.filter"]


def test_agents_are_read_only_through_agents_app_selectors():
    assert agent_reads(Path(settings.BASE_DIR)) == []
