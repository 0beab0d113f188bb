"""goatbeat schema version 9: every run ends in a true state. Executions gain the statuses
``lost`` (no final report within its bound, or its backend said the worker died) and
``expired`` (the backend dropped it unrun when its ``expires`` window passed).

Like 0001, the database side runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0009_run_states.sql``); the state side describes it to Django.
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0008_publication")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=9)],
            state_operations=[
                migrations.AlterField(
                    model_name="execution",
                    name="status",
                    field=models.CharField(
                        choices=[
                            ("claimed", "claimed"),
                            ("submitted", "submitted"),
                            ("submit_failed", "submit failed"),
                            ("running", "running"),
                            ("retried", "retried"),
                            ("succeeded", "succeeded"),
                            ("failed", "failed"),
                            ("skipped", "skipped"),
                            ("buffered", "buffered"),
                            ("lost", "lost"),
                            ("expired", "expired"),
                        ],
                        default="claimed",
                        max_length=16,
                    ),
                ),
            ],
        ),
    ]
