"""ORM views of goatbeat's tables, for the admin and for queries in user code.

The schema itself is owned by ``goatbeat/stores/sql/postgres/`` (migration 0001 runs that SQL),
so these models only describe it. Writes that change scheduling go through the store
(``goatbeat.django.registry.get_store()``), never through ``save()``: the store computes
``next_run_at`` and bumps ``version`` so a running scheduler's compare-and-set sees the edit.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from goatbeat.core.health import Role
from goatbeat.core.model import (
    ExecutionKind,
    ExecutionStatus,
    MisfirePolicy,
    OverlapPolicy,
    Source,
    StoredSchedule,
)
from goatbeat.django.versions import SET_NULL_IN_DATABASE

__all__ = ["Schedule", "Execution", "Lease", "SchedulerProcess", "Miss", "Delivery", "TaskKey"]


def _choices(enum: Any) -> list[tuple[str, str]]:
    return [(member.value, member.value.replace("_", " ")) for member in enum]


class Schedule(models.Model):  # type: ignore[misc]
    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200, unique=True)
    source = models.CharField(max_length=32, choices=_choices(Source), default="code")
    task = models.CharField(max_length=255)
    trigger = models.JSONField()
    timezone = models.CharField(max_length=64, default="UTC")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=200, null=True, blank=True)
    exchange = models.CharField(max_length=200, null=True, blank=True)
    routing_key = models.CharField(max_length=200, null=True, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    expires = models.FloatField(null=True, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    misfire_policy = models.CharField(
        max_length=16, choices=_choices(MisfirePolicy), default="run_once"
    )
    misfire_grace = models.FloatField(default=60)
    catch_up_limit = models.IntegerField(default=100)
    one_off = models.BooleanField(default=False)
    enabled = models.BooleanField(default=True)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_status = models.CharField(max_length=32, null=True, blank=True)
    total_run_count = models.BigIntegerField(default=0)
    missed_count = models.BigIntegerField(default=0)
    version = models.BigIntegerField(default=1)
    description = models.TextField(default="", blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    # Schema version 3: what the last publish wrote (see ScheduleStore.edited_since_publish).
    published_fingerprint = models.CharField(max_length=64, null=True, blank=True, editable=False)
    # Schema version 5: the record of success the workers' completion reports keep.
    last_success_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_failure_at = models.DateTimeField(null=True, blank=True, editable=False)
    consecutive_failures = models.IntegerField(default=0, editable=False)
    # Schema version 6: schedule control. The definition's options...
    jitter = models.FloatField(default=0, help_text="seconds")
    overlap = models.CharField(max_length=16, choices=_choices(OverlapPolicy), default="allow")
    max_runtime = models.FloatField(null=True, blank=True, help_text="seconds")
    pause_on_failure = models.IntegerField(null=True, blank=True)
    # ... and the state the store owns (pause, resume): never written through the ORM.
    paused = models.BooleanField(default=False, editable=False)
    paused_at = models.DateTimeField(null=True, blank=True, editable=False)
    paused_by = models.CharField(max_length=200, null=True, blank=True, editable=False)
    pause_note = models.TextField(default="", blank=True, editable=False)
    skipped_count = models.BigIntegerField(default=0, editable=False)
    active_execution_id = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "goatbeat_schedule"
        ordering = ["name"]

    def __str__(self) -> str:
        return str(self.name)

    def read(self) -> StoredSchedule:
        """This row as the store reads it: a core Schedule, or a DamagedSchedule naming the
        column that cannot be decoded (a row edited by hand behind goatbeat's back)."""
        from goatbeat.stores import read_schedule

        return read_schedule({f.attname: getattr(self, f.attname) for f in self._meta.fields})


class Execution(models.Model):  # type: ignore[misc]
    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(
        Schedule,
        null=True,
        blank=True,
        on_delete=SET_NULL_IN_DATABASE,
        related_name="executions",
    )
    schedule_name = models.CharField(max_length=200)
    scheduled_at = models.DateTimeField()
    idempotency_key = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=16, choices=_choices(ExecutionKind), default="scheduled")
    status = models.CharField(max_length=16, choices=_choices(ExecutionStatus), default="claimed")
    fencing_token = models.BigIntegerField(null=True, blank=True)
    scheduler_id = models.CharField(max_length=255, null=True, blank=True)
    claimed_at = models.DateTimeField()
    submitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    attempts = models.IntegerField(default=0)
    backend_task_id = models.CharField(max_length=255, null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    """A failed submission is retried from this instant on (database clock); NULL: not waiting."""
    # Schema version 5: what the worker reported about its latest attempt.
    started_at = models.DateTimeField(null=True, blank=True)
    runtime = models.FloatField(null=True, blank=True, help_text="seconds")
    worker = models.CharField(max_length=255, null=True, blank=True)
    retries = models.IntegerField(default=0)

    class Meta:
        db_table = "goatbeat_execution"
        ordering = ["-scheduled_at"]

    def __str__(self) -> str:
        return str(self.idempotency_key)


class Lease(models.Model):  # type: ignore[misc]
    name = models.CharField(max_length=64, primary_key=True)
    holder = models.CharField(max_length=255)
    token = models.BigIntegerField()
    expires_at = models.DateTimeField()
    acquired_at = models.DateTimeField()

    class Meta:
        db_table = "goatbeat_lease"

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder}"


class SchedulerProcess(models.Model):  # type: ignore[misc]
    """A scheduler process's heartbeat (schema version 5): one row per live process."""

    scheduler_id = models.CharField(max_length=255, primary_key=True)
    role = models.CharField(max_length=16, choices=_choices(Role))
    lease = models.CharField(max_length=64)
    fencing_token = models.BigIntegerField(null=True, blank=True)
    hostname = models.CharField(max_length=255, default="", blank=True)
    pid = models.IntegerField(null=True, blank=True)
    version = models.CharField(max_length=64, default="", blank=True)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "goatbeat_scheduler"
        ordering = ["role", "scheduler_id"]
        verbose_name = "scheduler process"
        verbose_name_plural = "scheduler processes"

    def __str__(self) -> str:
        return f"{self.scheduler_id} ({self.role})"


class Miss(models.Model):  # type: ignore[misc]
    """Occurrences a claim's misfire policy dropped (schema version 5)."""

    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(
        Schedule,
        null=True,
        blank=True,
        on_delete=SET_NULL_IN_DATABASE,
        related_name="misses",
    )
    schedule_name = models.CharField(max_length=200)
    missed = models.IntegerField()
    first_at = models.DateTimeField(null=True, blank=True)
    last_at = models.DateTimeField(null=True, blank=True)
    scheduler_id = models.CharField(max_length=255, null=True, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        db_table = "goatbeat_miss"
        ordering = ["-recorded_at"]
        verbose_name_plural = "misses"

    def __str__(self) -> str:
        return f"{self.schedule_name}: {self.missed} missed"


class Delivery(models.Model):  # type: ignore[misc]
    """The worker-side idempotency ledger (goatbeat.idempotency): written by guarded tasks."""

    idempotency_key = models.CharField(max_length=255, primary_key=True)
    state = models.CharField(
        max_length=16,
        choices=[("running", "running"), ("succeeded", "succeeded"), ("failed", "failed")],
    )
    owner = models.CharField(max_length=255)
    attempts = models.IntegerField(default=1)
    duplicates = models.IntegerField(default=0)
    started_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "goatbeat_delivery"

    def __str__(self) -> str:
        return f"{self.idempotency_key} {self.state}"


class TaskKey(models.Model):  # type: ignore[misc]
    """The key of each Django Tasks result the scheduler enqueued for a guarded task."""

    backend_task_id = models.CharField(max_length=255, primary_key=True)
    idempotency_key = models.CharField(max_length=255)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "goatbeat_task_key"

    def __str__(self) -> str:
        return f"{self.backend_task_id} -> {self.idempotency_key}"
