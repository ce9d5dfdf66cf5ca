import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat_app', '0020_group_limits'),
    ]

    # Only Django's view of the field changes (who sets the value): the column is the same, so no
    # table is rebuilt (SQLite would copy the whole message table for an AlterField).
    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name='message',
                name='created_at',
                field=models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False,
                                           verbose_name='创建时间'),
            ),
        ]),
    ]
