"""Text staff type in admin, kept as the model and the history read it: lines end in "\\n" only.

Browsers send a textarea's line breaks as CRLF (the HTML standard's form encoding). Kept as sent,
every save of a prompt typed or loaded with "\\n" rewrote it with "\\r\\n": the history showed a
change nobody made, and "\\r\\n" went to the model. `LineEndingsAdmin` gives every TextField of an
admin's form `LineEndingsField`, so an unchanged text compares equal to what is stored
(docs/staff.md, "History, diff and rollback").
"""
from django import forms
from django.db import models


def line_endings_normalise(text: str) -> str:
    """CRLF and lone CR as LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


class LineEndingsField(forms.CharField):
    def to_python(self, value):
        value = super().to_python(value)
        return line_endings_normalise(value) if isinstance(value, str) else value


class LineEndingsAdmin:
    """A ModelAdmin mixin: its forms' TextFields end lines in "\\n" (a widget set elsewhere stays)."""

    formfield_overrides = {models.TextField: {"form_class": LineEndingsField}}
