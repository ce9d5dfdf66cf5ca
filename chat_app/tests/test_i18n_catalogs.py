"""The English catalogs cover the page (issue 26 point 2): every string the scripts pass to `t()`
(static/js/i18n.js) and every `{% translate %}` / `{% blocktranslate %}` of the page's templates
has its English in the compiled catalogs committed under locale/en (what the server serves)."""
import gettext
import re
from pathlib import Path

from django.conf import settings

LOCALE = Path(settings.BASE_DIR) / "locale"
TEMPLATES = ["templates/base.html", "templates/chat/page.html", "templates/registration/login.html",
             "templates/403_csrf.html", "templates/chat/mcp_oauth.html", "templates/includes/language_switch.html"]
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
