"""Helpers for tests that drive Django admin pages as a browser would."""
from django import forms as django_forms
from django.contrib.messages import get_messages
from django.urls import reverse


def admin_form_data(response, **overrides) -> dict:
    """The POST body a browser would send for an admin add/change page as rendered.

    Built from the page's own forms (main form, inline management forms and rows), so a test
    keeps working when someone adds a field or an inline; `overrides` are the values the test
    types in (a list for a multi-select; False leaves a checkbox unticked). A textarea's lines
    end in CRLF, as a browser sends them (the HTML standard's form encoding).
    """
    forms = [response.context["adminform"].form]
    for inline in response.context.get("inline_admin_formsets", []):
        forms += [inline.formset.management_form, *inline.formset.forms]
    data: dict = {}
    textareas = set()
    for form in forms:
        for bound in form:
            _put(data, bound.html_name, bound.value())
            if isinstance(bound.field.widget, django_forms.Textarea):
                textareas.add(bound.html_name)
    for name, value in overrides.items():
        data.pop(name, None)
        _put(data, name, value)
    for name in textareas & set(data):
        if isinstance(data[name], str):
            data[name] = data[name].replace("\r\n", "\n").replace("\n", "\r\n")
    return data


def admin_login_required_check(client, urls) -> None:
    """Asserts each admin page in `urls` sends `client` (anonymous or a student) to the admin login."""
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url


def admin_action_run(client, *, changelist: str, action: str, objects) -> list[tuple[str, str]]:
    """Runs an admin action on `objects` from the changelist named `changelist` (a URL name);
    returns the messages it left as (level tag, text)."""
    response = client.post(reverse(changelist), {"action": action, "_selected_action": [o.pk for o in objects]})
    assert response.status_code == 302
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def _put(data: dict, name: str, value) -> None:
    if value is None or value is False:
        return  # what a browser sends for an empty optional field or an unticked box
    if value is True:
        data[name] = "on"
    elif isinstance(value, (list, tuple)):
        data[name] = [str(v) for v in value]
    else:
        data[name] = str(value)
