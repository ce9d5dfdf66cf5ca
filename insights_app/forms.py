"""Admin forms of routing cases: tool lists and history as plain lines instead of JSON."""
import re

from django import forms
from django.core.exceptions import ValidationError

from insights_app.models import ANY_TOOL, RoutingCase

TOOL_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")
USER_PREFIXES = ("用户：", "用户:", "user:", "学生：", "学生:")
ASSISTANT_PREFIXES = ("助手：", "助手:", "assistant:", "小智：", "小智:")
HISTORY_LINE_ERROR = "第 {line} 行应以“用户：”或“助手：”开头。"
TOOL_NAME_ERROR = "工具名“{name}”不对：应为小写字母、数字、“_”和“-”，如 call_canteen、campus-calendar__current_time。"


class ToolListField(forms.CharField):
    """Tool names, one a line (commas and spaces also separate); "*" where allowed."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 60})

    def __init__(self, *, allow_any: bool = False, **kwargs):
        self.allow_any = allow_any
        super().__init__(required=False, **kwargs)

    def prepare_value(self, value):
        return "\n".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value) -> list[str]:
        names = [name for name in re.split(r"[\s,，、;；]+", super().to_python(value) or "") if name]
        names = list(dict.fromkeys(names))
        for name in names:
            if not (TOOL_NAME.match(name) or (self.allow_any and name == ANY_TOOL)):
                raise ValidationError(TOOL_NAME_ERROR.format(name=name))
        return names


class HistoryField(forms.CharField):
    """Earlier turns, one message a line: "用户：…" / "助手：…"."""

    widget = forms.Textarea(attrs={"rows": 4, "cols": 80})

    def __init__(self, **kwargs):
        super().__init__(required=False, **kwargs)

    def prepare_value(self, value):
        if isinstance(value, list):
            return "\n".join(
                ("用户：" if m.get("role") == "user" else "助手：") + " ".join(str(m.get("content", "")).split())
                for m in value
            )
        return value

    def to_python(self, value) -> list[dict]:
        messages = []
        for number, line in enumerate((super().to_python(value) or "").splitlines(), start=1):
            line = line.strip()
            if not line:
                continue
            lowered = line.lower()
            for role, prefixes in (("user", USER_PREFIXES), ("assistant", ASSISTANT_PREFIXES)):
                prefix = next((p for p in prefixes if lowered.startswith(p)), None)
                if prefix is not None:
                    messages.append({"role": role, "content": line[len(prefix):].strip()})
                    break
            else:
                raise ValidationError(HISTORY_LINE_ERROR.format(line=number))
        return messages


class RoutingCaseForm(forms.ModelForm):
    history = HistoryField(label="之前的对话", help_text="可选，每行一条：“用户：……”或“助手：……”，按时间顺序，最后一行之后才是上面的问题。")
    must_call = ToolListField(label="必须调用的工具", help_text="每行一个工具名（模型看到的名字，如 call_canteen）。")
    must_not_call = ToolListField(
        label="不得调用的工具", allow_any=True, help_text="每行一个工具名；只写一个 * 表示这个问题不应调用任何工具。"
    )

    class Meta:
        model = RoutingCase
        fields = ("agent", "question", "history", "must_call", "must_not_call", "notes", "enabled", "source_message")
        widgets = {
            "question": forms.Textarea(attrs={"rows": 2, "cols": 80}),
            "notes": forms.Textarea(attrs={"rows": 3, "cols": 80}),
            "source_message": forms.HiddenInput(),
        }
