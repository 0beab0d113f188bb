"""goatbeat schema version 4: ``goatbeat_schedule.published_fingerprint``, the fingerprint of
the definition the last publish wrote, so ``import_celery_beat`` can tell an operator's edit
from its own earlier import.

Like 0001 and 0002, the database side runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0004_published_fingerprint.sql``); the state side adds the field.
(Version 3 is another change; the chain is 0002 -> 0004 on this branch.)
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0002_worker_idempotency")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=4)],
            state_operations=[
                migrations.AddField(
                    model_name="schedule",
                    name="published_fingerprint",
                    field=models.CharField(blank=True, editable=False, max_length=64, null=True),
                ),
            ],
        ),
    ]
