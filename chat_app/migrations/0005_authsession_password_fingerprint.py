# A JWT stops being valid when its user's password changes (issue 9): each AuthSession row keeps
# the user's session auth hash of the moment it was made. Rows that exist already get the hash
# of the password their user has now, so no student is logged out by the upgrade itself.

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import migrations, models


def fingerprints_fill(apps, schema_editor):
    AuthSession = apps.get_model("chat_app", "AuthSession")
    for session in AuthSession.objects.select_related("user").iterator(chunk_size=500):
        # Historical models have no methods: Django's own HMAC of the password field, called on
        # the historical row (it reads `password` only), is what get_session_auth_hash() returns.
        session.password_fingerprint = AbstractBaseUser._get_session_auth_hash(session.user)
        session.save(update_fields=["password_fingerprint"])


class Migration(migrations.Migration):

    dependencies = [
        ('chat_app', '0004_message_request_id_length'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='authsession',
            name='password_fingerprint',
            field=models.CharField(blank=True, default='', editable=False, max_length=128, verbose_name='密码指纹'),
        ),
        migrations.RunPython(fingerprints_fill, migrations.RunPython.noop),
    ]
