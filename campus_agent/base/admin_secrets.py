"""A key staff write in admin and nobody reads back (a model provider's, the moderation model's):
a password input that never shows what is stored (not after a failed save either), blank keeps
it, 清除 removes it; stored encrypted by the model (`api_key_store`, campus_agent.base.crypto).
The change page shows the key's state, never the key; 清除 only where one is saved; a staff member
who may only view sees the state read-only; the fields that decide where the key is sent are a
superuser's (`superuser_only_fields`)."""

from django import forms
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

KEY_SET_TEXT = "已设置"
KEY_UNSET_TEXT = "未设置"
KEY_UNREADABLE_TEXT = "已设置，但无法解密（SECRET_KEY 或 PROVIDER_KEY_SECRET 已更换），请重新输入"
KEY_BOTH_ERROR = "填写新密钥时不要勾选“清除已保存的密钥”。"


def key_state(row) -> str:
    """What the change page says of the stored key (a model with `api_key_set`, `api_key_unreadable`)."""
    if row.api_key_unreadable:
        return KEY_UNREADABLE_TEXT
    return KEY_SET_TEXT if row.api_key_set else KEY_UNSET_TEXT


class SecretKeyForm(forms.ModelForm):
    """`key_help` (with `{state}`) and `key_new_help` say what the field is for."""

    key_help = "当前：{state}。只写不读：已保存的密钥不会显示；留空则保持不变。"
    key_new_help = "只写不读：保存后不再显示。"

    api_key = forms.CharField(
        label="API 密钥", required=False, max_length=1000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    api_key_clear = forms.BooleanField(label="清除已保存的密钥", required=False)

    def key_state(self) -> str:
        return key_state(self.instance)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "api_key" in self.fields:  # a new row has no key yet: nothing to say about the current one
            stored = self.instance.pk is not None
            self.fields["api_key"].help_text = self.key_help.format(state=self.key_state()) if stored else self.key_new_help

    def clean(self):
        data = super().clean()
        if data.get("api_key") and data.get("api_key_clear"):
            self.add_error("api_key_clear", KEY_BOTH_ERROR)
        return data

    def save(self, commit=True):
        row = super().save(commit=False)
        if self.cleaned_data.get("api_key"):
            row.api_key_store(self.cleaned_data["api_key"])
        elif self.cleaned_data.get("api_key_clear"):
            row.api_key_store(None)
        if commit:
            row.save()
            self._save_m2m()
        return row


class SecretKeyAdminMixin:
    """For a ModelAdmin whose `form` is a SecretKeyForm: its `api_key_status` column and read-only
    field, the fieldsets as above, `superuser_only_fields` read-only to anyone else."""

    superuser_only_fields: tuple[str, ...] = ()

    def key_state(self, obj) -> str:
        return key_state(obj)

    @method_decorator(sensitive_post_parameters("api_key"))  # never in an error report or debug page
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return super().changeform_view(request, object_id, form_url, extra_context)

    def api_key_status(self, obj) -> str:
        return self.key_state(obj)

    api_key_status.short_description = "API 密钥"

    def get_fieldsets(self, request, obj=None):
        if obj is None or self.has_change_permission(request, obj):
            fieldsets = super().get_fieldsets(request, obj)
            if obj is not None and obj.api_key_set:
                return fieldsets
            # 清除 only where a key is saved (not on the add form, nor for a row without one).
            return tuple((title, {**options, "fields": tuple(n for n in options["fields"] if n != "api_key_clear")})
                         for title, options in fieldsets)
        # Read-only: the key's state, never a field that could look the key up.
        return tuple((title, {**options, "fields": tuple(
            "api_key_status" if name == "api_key" else name
            for name in options["fields"] if name != "api_key_clear")}) for title, options in self.fieldsets)

    def get_readonly_fields(self, request, obj=None):
        fields = super().get_readonly_fields(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            fields = (*fields, "api_key_status")
        if request.user.is_superuser:
            return fields
        return (*fields, *self.superuser_only_fields)  # left out of the form: a POST of them changes nothing
