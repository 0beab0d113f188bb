"""goatbeat schema version 5: the submit backoff in the execution row (``retry_at``).

Like 0001, the database side runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0005_submit_retry.sql``); the state side adds the field to the model.
Versions 3 and 4 are other changes; this one depends on version 2 only.
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0002_worker_idempotency")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=5)],
            state_operations=[
                migrations.AddField(
                    model_name="execution",
                    name="retry_at",
                    field=models.DateTimeField(blank=True, null=True),
                ),
            ],
        ),
    ]
