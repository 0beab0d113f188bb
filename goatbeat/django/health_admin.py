"""The system's health, read-only: the lease, the scheduler processes and their heartbeats, the
missed occurrences, each page headed by the verdict of ``goatbeat status --check``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse

from goatbeat.core.errors import GoatbeatError
from goatbeat.django.admin_access import (
    database_alias,
    store_for_reading,
)
from goatbeat.django.admin_display import (
    instant_column,
    shown_field,
)
from goatbeat.django.models import Lease as LeaseRow
from goatbeat.django.models import SchedulerProcess as SchedulerRow


class _ReadOnly(admin.ModelAdmin):  # type: ignore[misc]
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # Leases and heartbeats are judged by the database's clock, read with the rows.
        return super().get_queryset(request).using(database_alias()).annotate(db_now=Now())

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return [shown_field(self, f.name) for f in self.model._meta.fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return self.get_fields(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """Say at the top of the page whether the system is healthy, as ``goatbeat status
        --check`` would."""
        from datetime import timedelta

        from goatbeat.core.health import check

        try:
            verdict = check(store_for_reading().status(), max_lag=timedelta(seconds=60))
        except GoatbeatError as exc:
            self.message_user(request, f"Cannot read the status: {exc}", messages.ERROR)
        else:
            level = messages.SUCCESS if verdict.ok else messages.ERROR
            word = "Healthy" if verdict.ok else "Unhealthy"
            self.message_user(request, f"{word}: {verdict.reason}.", level)
        return super().changelist_view(request, extra_context)


class LeaseAdmin(_ReadOnly):
    """Who holds the lease, with which fencing token, until when (the database clock)."""

    list_display = ("name", "holder", "token", "expires_at_zoned", "state", "acquired_at_zoned")
    expires_at_zoned = instant_column("expires_at", "expires at")
    acquired_at_zoned = instant_column("acquired_at", "acquired at")

    @admin.display(description="state")  # type: ignore[untyped-decorator]
    def state(self, obj: LeaseRow) -> str:
        left = (obj.expires_at - obj.db_now).total_seconds()
        return f"held, {left:.0f}s left" if left > 0 else f"expired {-left:.0f}s ago"


class SchedulerProcessAdmin(_ReadOnly):
    """Every scheduler process that has a heartbeat: leader or standby, and since when."""

    list_display = (
        "scheduler_id",
        "role",
        "alive",
        "heartbeat",
        "fencing_token",
        "hostname",
        "pid",
        "version",
        "started_at_zoned",
    )
    list_filter = ("role",)
    started_at_zoned = instant_column("started_at", "started at")
    heartbeat_at_zoned = instant_column("heartbeat_at", "heartbeat at")
    expires_at_zoned = instant_column("expires_at", "expires at")

    @admin.display(description="alive", boolean=True)  # type: ignore[untyped-decorator]
    def alive(self, obj: SchedulerRow) -> bool:
        return bool(obj.expires_at > obj.db_now)

    @admin.display(description="last heartbeat", ordering="heartbeat_at")  # type: ignore[untyped-decorator]
    def heartbeat(self, obj: SchedulerRow) -> str:
        ago = (obj.db_now - obj.heartbeat_at).total_seconds()
        return f"{max(0.0, ago):.0f}s ago"


class MissAdmin(_ReadOnly):
    """Occurrences misfire policies dropped (kept 7 days)."""

    list_display = (
        "schedule_name",
        "missed",
        "first_at_zoned",
        "last_at_zoned",
        "recorded_at_zoned",
    )
    first_at_zoned = instant_column("first_at", "first missed")
    last_at_zoned = instant_column("last_at", "last missed")
    recorded_at_zoned = instant_column("recorded_at", "recorded at")
    search_fields = ("schedule_name",)
    date_hierarchy = "recorded_at"
