"""goatbeat schema version 5: operations. Completion reports on each execution (started_at,
runtime, worker, retries; statuses ``running`` and ``retried``), each schedule's record of
success, the scheduler heartbeats (``goatbeat_scheduler``) and the record of missed
occurrences (``goatbeat_miss``).

Like 0001 to 0003, the database side runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0005_operations.sql``); the state side describes it to Django.
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL
from goatbeat.django.versions import SET_NULL_IN_DATABASE  # DB_SET_NULL on 6.1+


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0004_submit_retry")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=5)],
            state_operations=[
                migrations.AddField(
                    model_name="execution",
                    name="started_at",
                    field=models.DateTimeField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="execution",
                    name="runtime",
                    field=models.FloatField(blank=True, help_text="seconds", null=True),
                ),
                migrations.AddField(
                    model_name="execution",
                    name="worker",
                    field=models.CharField(blank=True, max_length=255, null=True),
                ),
                migrations.AddField(
                    model_name="execution",
                    name="retries",
                    field=models.IntegerField(default=0),
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
                        ],
                        default="claimed",
                        max_length=16,
                    ),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="last_success_at",
                    field=models.DateTimeField(blank=True, editable=False, null=True),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="last_failure_at",
                    field=models.DateTimeField(blank=True, editable=False, null=True),
                ),
                migrations.AddField(
                    model_name="schedule",
                    name="consecutive_failures",
                    field=models.IntegerField(default=0, editable=False),
                ),
                migrations.CreateModel(
                    name="SchedulerProcess",
                    fields=[
                        (
                            "scheduler_id",
                            models.CharField(max_length=255, primary_key=True, serialize=False),
                        ),
                        (
                            "role",
                            models.CharField(
                                choices=[("leader", "leader"), ("standby", "standby")],
                                max_length=16,
                            ),
                        ),
                        ("lease", models.CharField(max_length=64)),
                        ("fencing_token", models.BigIntegerField(blank=True, null=True)),
                        ("hostname", models.CharField(blank=True, default="", max_length=255)),
                        ("pid", models.IntegerField(blank=True, null=True)),
                        ("version", models.CharField(blank=True, default="", max_length=64)),
                        ("started_at", models.DateTimeField()),
                        ("heartbeat_at", models.DateTimeField()),
                        ("expires_at", models.DateTimeField()),
                    ],
                    options={
                        "verbose_name": "scheduler process",
                        "verbose_name_plural": "scheduler processes",
                        "db_table": "goatbeat_scheduler",
                        "ordering": ["role", "scheduler_id"],
                    },
                ),
                migrations.CreateModel(
                    name="Miss",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("schedule_name", models.CharField(max_length=200)),
                        ("missed", models.IntegerField()),
                        ("first_at", models.DateTimeField(blank=True, null=True)),
                        ("last_at", models.DateTimeField(blank=True, null=True)),
                        ("scheduler_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("recorded_at", models.DateTimeField()),
                        (
                            "schedule",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=SET_NULL_IN_DATABASE,
                                related_name="misses",
                                to="goatbeat.schedule",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name_plural": "misses",
                        "db_table": "goatbeat_miss",
                        "ordering": ["-recorded_at"],
                    },
                ),
            ],
        ),
    ]
