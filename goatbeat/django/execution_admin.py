"""The execution history: every run's page and list, and the recent runs inline on a
schedule's page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from goatbeat.django.admin_access import (
    database_alias,
)
from goatbeat.django.admin_display import (
    execution_time,
    instant_column,
    shown_field,
    zone_of_execution,
)
from goatbeat.django.admin_filters import ScheduleNameFilter
from goatbeat.django.models import Execution as ExecutionRow
from goatbeat.django.words import duration_in_words

RECENT_EXECUTIONS = 20
"""How many executions the schedule page shows inline."""


class RecentExecutionInline(admin.TabularInline):  # type: ignore[misc]
    model = ExecutionRow
    fk_name = "schedule"
    verbose_name_plural = f"Recent executions (latest {RECENT_EXECUTIONS})"
    fields = (
        "scheduled",
        "kind",
        "status",
        "attempts",
        "retry_at",
        "scheduler_id",
        "submitted",
        "finished",
        "error",
    )
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    ordering = ("-scheduled_at",)

    # Each time in the schedule's zone and in UTC, as on the rest of the schedule's page.

    @admin.display(description="scheduled at")  # type: ignore[untyped-decorator]
    def scheduled(self, obj: ExecutionRow) -> str:
        return execution_time(obj, obj.scheduled_at)

    @admin.display(description="submitted at")  # type: ignore[untyped-decorator]
    def submitted(self, obj: ExecutionRow) -> str:
        return execution_time(obj, obj.submitted_at)

    @admin.display(description="finished at")  # type: ignore[untyped-decorator]
    def finished(self, obj: ExecutionRow) -> str:
        return execution_time(obj, obj.finished_at)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request).using(database_alias()).select_related("schedule")
        # A slice cannot be filtered by the formset; a subquery of the latest ids can.
        latest = qs.order_by("-scheduled_at").values("pk")[:RECENT_EXECUTIONS]
        return qs.filter(pk__in=latest)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ExecutionAdmin(admin.ModelAdmin):  # type: ignore[misc]
    """The history of every run: goatbeat's own steps (claimed, submitted) and, for backends
    whose workers report completions (docs/operations.md), what the worker saw: running,
    retried, succeeded or failed, the runtime and the error."""

    list_display = (
        "schedule_link",
        "scheduled",
        "kind",
        "outcome",
        "runtime_display",
        "error_line",
        "attempts",
        "worker",
        "finished",
    )
    list_filter = ("status", ScheduleNameFilter, "kind")
    search_fields = ("schedule_name", "idempotency_key", "backend_task_id", "error")
    date_hierarchy = "scheduled_at"
    ordering = ("-scheduled_at",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(database_alias())

    # The list: the current time zone (the header names it); the page: the schedule's zone
    # and UTC, as on the schedule's page. Seconds everywhere: these are instants, not slots.
    scheduled = instant_column("scheduled_at", "scheduled at")
    finished = instant_column("finished_at", "finished at")
    scheduled_at_zoned = instant_column("scheduled_at", "scheduled at", zone_of=zone_of_execution)
    claimed_at_zoned = instant_column("claimed_at", "claimed at", zone_of=zone_of_execution)
    submitted_at_zoned = instant_column("submitted_at", "submitted at", zone_of=zone_of_execution)
    started_at_zoned = instant_column("started_at", "started at", zone_of=zone_of_execution)
    finished_at_zoned = instant_column("finished_at", "finished at", zone_of=zone_of_execution)
    retry_at_zoned = instant_column("retry_at", "retry at", zone_of=zone_of_execution)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return [shown_field(self, f.name) for f in ExecutionRow._meta.fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return self.get_fields(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="schedule", ordering="schedule_name")  # type: ignore[untyped-decorator]
    def schedule_link(self, obj: ExecutionRow) -> str:
        if obj.schedule_id is None:
            return str(format_html("{} <small>(deleted)</small>", obj.schedule_name))
        url = reverse("admin:goatbeat_schedule_change", args=[obj.schedule_id])
        return str(format_html('<a href="{}">{}</a>', url, obj.schedule_name))

    @admin.display(description="outcome", ordering="status")  # type: ignore[untyped-decorator]
    def outcome(self, obj: ExecutionRow) -> str:
        text = str(obj.status).replace("_", " ")
        if obj.retries:
            text += f" (retried {obj.retries}x)"
        return text

    @admin.display(description="runtime", ordering="runtime")  # type: ignore[untyped-decorator]
    def runtime_display(self, obj: ExecutionRow) -> str:
        return duration_in_words(obj.runtime)

    @admin.display(description="error")  # type: ignore[untyped-decorator]
    def error_line(self, obj: ExecutionRow) -> str:
        if not obj.error:
            return "-"
        text = str(obj.error)
        short = text if len(text) <= 80 else text[:77] + "..."
        return str(format_html('<span title="{}">{}</span>', text, short))
