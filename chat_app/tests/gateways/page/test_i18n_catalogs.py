"""The English catalogs cover the page and the server (issue 26 point 2): every string the scripts
pass to `t()` (static/js/i18n.js), every `{% translate %}` / `{% blocktranslate %}` of the page's
templates and every text the Python code marks with `_()` has its English in the compiled
catalogs committed under locale/en (what the server serves)."""
import ast
import gettext
import re
from pathlib import Path

from django.conf import settings

LOCALE = Path(settings.BASE_DIR) / "locale"
TEMPLATES = ["templates/base.html", "templates/chat/page.html", "templates/registration/login.html",
             "templates/403_csrf.html", "templates/chat/mcp_oauth.html", "templates/includes/language_switch.html",
             "templates/404.html"]
SAME_IN_ENGLISH = {"%s / %s"}


def _catalog(domain: str) -> gettext.GNUTranslations:
    with open(LOCALE / "en" / "LC_MESSAGES" / f"{domain}.mo", "rb") as compiled:
        return gettext.GNUTranslations(compiled)


def _untranslated(catalog: gettext.GNUTranslations, texts: set[str]) -> list[str]:
    return sorted(t for t in texts if catalog.gettext(t) == t and t not in SAME_IN_ENGLISH)


def test_every_script_string_has_its_english():
    texts = set()
    for script in (Path(settings.BASE_DIR) / "static" / "js").glob("*.js"):
        texts |= set(re.findall(r'\bt\("((?:[^"\\]|\\.)*)"', script.read_text(encoding="utf-8")))
    assert len(texts) > 120
    assert _untranslated(_catalog("djangojs"), texts) == []


def test_every_template_string_has_its_english():
    texts = set()
    for name in TEMPLATES:
        source = (Path(settings.BASE_DIR) / name).read_text(encoding="utf-8")
        texts |= set(re.findall(r'\{% translate "([^"]+)" %\}', source))
        for body in re.findall(r"\{% blocktranslate[^%]*%\}(.*?)\{% endblocktranslate %\}", source, flags=re.S):
            texts.add(re.sub(r"\{\{ (\w+) \}\}", r"%(\1)s", body))
    assert len(texts) > 60
    assert _untranslated(_catalog("django"), texts) == []


def _python_sources():
    base = Path(settings.BASE_DIR)
    for app in ("campus_agent", "agents_app", "chat_app", "subagents_app", "insights_app", "safety_app"):
        for source in (base / app).rglob("*.py"):
            if "tests" not in source.parts and "migrations" not in source.parts:
                yield source


def test_every_python_string_marked_for_translation_has_its_english():
    texts = set()
    for source in _python_sources():
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("_", "gettext", "gettext_lazy") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                texts.add(node.args[0].value)
    assert len(texts) > 150
    assert _untranslated(_catalog("django"), texts) == []
