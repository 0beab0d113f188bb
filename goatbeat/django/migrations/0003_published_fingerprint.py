"""goatbeat schema version 3: ``goatbeat_schedule.published_fingerprint``, the fingerprint of
the definition the last publish wrote, so ``import_celery_beat`` can tell an operator's edit
from its own earlier import.

Like 0001 and 0002, the database side runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0003_published_fingerprint.sql``); the state side adds the field.
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0002_worker_idempotency")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=3)],
            state_operations=[
                migrations.AddField(
                    model_name="schedule",
                    name="published_fingerprint",
                    field=models.CharField(blank=True, editable=False, max_length=64, null=True),
                ),
            ],
        ),
    ]
