"""goatbeat schema version 4: the submit backoff in the execution row (``retry_at``).

Like 0001, the database side runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0004_submit_retry.sql``); the state side adds the field to the model.
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0003_published_fingerprint")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=4)],
            state_operations=[
                migrations.AddField(
                    model_name="execution",
                    name="retry_at",
                    field=models.DateTimeField(blank=True, null=True),
                ),
            ],
        ),
    ]
