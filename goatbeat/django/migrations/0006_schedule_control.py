"""goatbeat schema version 6: schedule control. Pause and resume with a note (who, when,
why), the count of occurrences skipped on purpose, jitter, the overlap policy and its
``max_runtime``, pause on failure; executions gain the kind ``backfill`` and the statuses
``skipped`` and ``buffered``.

Like 0001, the database side runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0006_schedule_control.sql``); the state side describes it to Django.
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0005_operations")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=6)],
            state_operations=[
                migrations.AddField(
                    model_name="schedule",
                    name="jitter",
                    field=models.FloatField(default=0, help_text="seconds"),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="overlap",
                    field=models.CharField(
                        choices=[
                            ("allow", "allow"),
                            ("skip", "skip"),
                            ("buffer_one", "buffer one"),
                        ],
                        default="allow",
                        max_length=16,
                    ),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="max_runtime",
                    field=models.FloatField(blank=True, help_text="seconds", null=True),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="pause_on_failure",
                    field=models.IntegerField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="paused",
                    field=models.BooleanField(default=False, editable=False),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="paused_at",
                    field=models.DateTimeField(blank=True, editable=False, null=True),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="paused_by",
                    field=models.CharField(blank=True, editable=False, max_length=200, null=True),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="pause_note",
                    field=models.TextField(blank=True, default="", editable=False),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="skipped_count",
                    field=models.BigIntegerField(default=0, editable=False),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="active_execution_id",
                    field=models.BigIntegerField(blank=True, editable=False, null=True),
                ),
                migrations.AlterField(
                    model_name="execution",
                    name="kind",
                    field=models.CharField(
                        choices=[
                            ("scheduled", "scheduled"),
                            ("manual", "manual"),
                            ("backfill", "backfill"),
                        ],
                        default="scheduled",
                        max_length=16,
                    ),
                ),
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
                        ],
                        default="claimed",
                        max_length=16,
                    ),
                ),
            ],
        ),
    ]
