"""goatbeat schema version 1.

The database side runs the very SQL ``goatbeat migrate`` runs
(:func:`goatbeat.stores.schema.postgres_migration_sql`), so both commands build the same schema
(tests/django/test_schema.py compares them). The state side describes the models to Django.
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL
from goatbeat.django.versions import SET_NULL_IN_DATABASE  # DB_SET_NULL on 6.1+


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=1)],
            state_operations=[
                migrations.CreateModel(
                    name="Lease",
                    fields=[
                        (
                            "name",
                            models.CharField(max_length=64, primary_key=True, serialize=False),
                        ),
                        ("holder", models.CharField(max_length=255)),
                        ("token", models.BigIntegerField()),
                        ("expires_at", models.DateTimeField()),
                        ("acquired_at", models.DateTimeField()),
                    ],
                    options={
                        "db_table": "goatbeat_lease",
                    },
                ),
                migrations.CreateModel(
                    name="Schedule",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=200, unique=True)),
                        (
                            "source",
                            models.CharField(
                                choices=[
                                    ("code", "code"),
                                    ("admin", "admin"),
                                    ("celery", "celery"),
                                    ("django_celery_beat", "django celery beat"),
                                ],
                                default="code",
                                max_length=32,
                            ),
                        ),
                        ("task", models.CharField(max_length=255)),
                        ("trigger", models.JSONField()),
                        ("timezone", models.CharField(default="UTC", max_length=64)),
                        ("args", models.JSONField(blank=True, default=list)),
                        ("kwargs", models.JSONField(blank=True, default=dict)),
                        ("queue", models.CharField(blank=True, max_length=200, null=True)),
                        ("exchange", models.CharField(blank=True, max_length=200, null=True)),
                        ("routing_key", models.CharField(blank=True, max_length=200, null=True)),
                        ("priority", models.IntegerField(blank=True, null=True)),
                        ("expires", models.FloatField(blank=True, null=True)),
                        ("headers", models.JSONField(blank=True, default=dict)),
                        (
                            "misfire_policy",
                            models.CharField(
                                choices=[
                                    ("run_once", "run once"),
                                    ("skip", "skip"),
                                    ("run_all", "run all"),
                                ],
                                default="run_once",
                                max_length=16,
                            ),
                        ),
                        ("misfire_grace", models.FloatField(default=60)),
                        ("catch_up_limit", models.IntegerField(default=100)),
                        ("one_off", models.BooleanField(default=False)),
                        ("enabled", models.BooleanField(default=True)),
                        ("start_at", models.DateTimeField(blank=True, null=True)),
                        ("end_at", models.DateTimeField(blank=True, null=True)),
                        ("next_run_at", models.DateTimeField(blank=True, null=True)),
                        ("last_run_at", models.DateTimeField(blank=True, null=True)),
                        ("last_status", models.CharField(blank=True, max_length=32, null=True)),
                        ("total_run_count", models.BigIntegerField(default=0)),
                        ("missed_count", models.BigIntegerField(default=0)),
                        ("version", models.BigIntegerField(default=1)),
                        ("description", models.TextField(blank=True, default="")),
                        ("created_at", models.DateTimeField()),
                        ("updated_at", models.DateTimeField()),
                    ],
                    options={
                        "db_table": "goatbeat_schedule",
                        "ordering": ["name"],
                    },
                ),
                migrations.CreateModel(
                    name="Execution",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("schedule_name", models.CharField(max_length=200)),
                        ("scheduled_at", models.DateTimeField()),
                        ("idempotency_key", models.CharField(max_length=255, unique=True)),
                        (
                            "kind",
                            models.CharField(
                                choices=[("scheduled", "scheduled"), ("manual", "manual")],
                                default="scheduled",
                                max_length=16,
                            ),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("claimed", "claimed"),
                                    ("submitted", "submitted"),
                                    ("submit_failed", "submit failed"),
                                    ("succeeded", "succeeded"),
                                    ("failed", "failed"),
                                ],
                                default="claimed",
                                max_length=16,
                            ),
                        ),
                        ("fencing_token", models.BigIntegerField(blank=True, null=True)),
                        ("scheduler_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("claimed_at", models.DateTimeField()),
                        ("submitted_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("attempts", models.IntegerField(default=0)),
                        (
                            "backend_task_id",
                            models.CharField(blank=True, max_length=255, null=True),
                        ),
                        ("error", models.TextField(blank=True, null=True)),
                        (
                            "schedule",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=SET_NULL_IN_DATABASE,
                                related_name="executions",
                                to="goatbeat.schedule",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "goatbeat_execution",
                        "ordering": ["-scheduled_at"],
                    },
                ),
            ],
        ),
    ]
