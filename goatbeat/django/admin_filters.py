"""The admin's list filters: declared in code or orphaned, refused, executions by schedule."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from goatbeat.core.model import Source
from goatbeat.django.admin_access import database_alias, declared_names
from goatbeat.django.models import Execution as ExecutionRow


class DeclaredInCodeFilter(admin.SimpleListFilter):  # type: ignore[misc]
    """Code schedules this project's code declares, and the orphaned ones it no longer does."""

    title = "declared in code"
    parameter_name = "in_code"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("declared", "declared"), ("orphaned", "no longer declared (orphaned)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        code = queryset.filter(source=Source.CODE.value)
        if self.value() == "declared":
            return code.filter(name__in=declared_names())
        if self.value() == "orphaned":
            return code.exclude(name__in=declared_names())
        return queryset


class RefusedFilter(admin.SimpleListFilter):  # type: ignore[misc]
    """Schedules a scheduler refused to run (their task outside its allow-list) that stay
    refused: :func:`goatbeat.core.health.is_refused`, as a query."""

    title = "refused"
    parameter_name = "refused"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "refused (does not run)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() != "yes":
            return queryset
        return queryset.filter(enabled=True, paused=False, last_status="refused").filter(
            Q(source=Source.CODE.value) | Q(next_run_at__isnull=True)
        )


class ScheduleNameFilter(admin.SimpleListFilter):  # type: ignore[misc]
    """Executions of one schedule, by name (history outlives a deleted schedule). The
    sidebar offers the schedules run lately; any name works as ``?schedule=<name>``."""

    title = "schedule"
    parameter_name = "schedule"
    OFFERED = 50

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # The schedules of the latest executions the other filters let through.
        narrowed = {k: v for k, v in request.GET.items() if k in ("status__exact", "kind__exact")}
        recent = (
            ExecutionRow.objects.using(database_alias())
            .filter(**narrowed)
            .order_by("-scheduled_at")
            .values_list("schedule_name", flat=True)[:1000]
        )
        names = sorted(set(recent))[: self.OFFERED]
        chosen = self.value()
        if chosen and chosen not in names:
            names = sorted([*names, chosen])
        return [(n, n) for n in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(schedule_name=self.value())
        return queryset
