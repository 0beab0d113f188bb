"""goatbeat schema version 2: the worker-side idempotency ledger (goatbeat.idempotency).

Like 0001, the database side runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0002_worker_idempotency.sql``); the state side describes the two tables.
"""

from django.db import migrations, models

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[RunGoatbeatSQL(version=2)],
            state_operations=[
                migrations.CreateModel(
                    name="Delivery",
                    fields=[
                        (
                            "idempotency_key",
                            models.CharField(max_length=255, primary_key=True, serialize=False),
                        ),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("running", "running"),
                                    ("succeeded", "succeeded"),
                                    ("failed", "failed"),
                                ],
                                max_length=16,
                            ),
                        ),
                        ("owner", models.CharField(max_length=255)),
                        ("attempts", models.IntegerField(default=1)),
                        ("duplicates", models.IntegerField(default=0)),
                        ("started_at", models.DateTimeField()),
                        ("expires_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={"db_table": "goatbeat_delivery"},
                ),
                migrations.CreateModel(
                    name="TaskKey",
                    fields=[
                        (
                            "backend_task_id",
                            models.CharField(max_length=255, primary_key=True, serialize=False),
                        ),
                        ("idempotency_key", models.CharField(max_length=255)),
                        ("created_at", models.DateTimeField()),
                    ],
                    options={"db_table": "goatbeat_task_key"},
                ),
            ],
        ),
    ]
