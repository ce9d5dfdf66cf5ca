# A client's X-Request-Id is kept when it is 8–64 characters of [A-Za-z0-9-] (docs/design.md#cross-cutting-rules):
# nginx's $request_id is 32 hex, a UUID is 36 characters.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat_app', '0003_campusidentity'),
    ]

    operations = [
        migrations.AlterField(
            model_name='message',
            name='request_id',
            field=models.CharField(blank=True, db_index=True, default='', max_length=64, verbose_name='请求 ID'),
        ),
    ]
