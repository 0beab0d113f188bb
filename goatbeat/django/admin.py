"""The admin: schedules (list, filters, actions, create and edit) and the execution history.

Every write goes through the store: creating (``store.create``), editing (``store.update``),
enabling and disabling (``store.set_enabled``), deleting (``store.delete``) and "run now"
(``store.request_run``), so ``next_run_at`` and ``version`` follow the scheduling rules and a
running scheduler is woken by NOTIFY. Actions need the change permission: Django hides them
from users without it and refuses a hand-made POST naming them, and each action checks again.
Code schedules are read-only except ``enabled``; executions are read-only history.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from goatbeat.core.errors import GoatbeatError, InvalidValue, ScheduleNotFound
from goatbeat.core.model import Schedule, Source
from goatbeat.django.forms import ROUTING_FIELDS, EnabledOnlyForm, ScheduleForm, describe_trigger
from goatbeat.django.models import Execution as ExecutionRow
from goatbeat.django.models import Schedule as ScheduleRow

__all__ = ["ScheduleAdmin", "ExecutionAdmin", "UPCOMING_COUNT", "RECENT_EXECUTIONS"]

UPCOMING_COUNT = 10
"""How many next fire times the schedule page previews."""
RECENT_EXECUTIONS = 20
"""How many executions the schedule page shows inline."""


def _alias() -> str:
    from goatbeat.django import conf

    return conf.get().database


def _store() -> Any:
    from goatbeat.django.registry import get_store

    return get_store()


class RecentExecutionInline(admin.TabularInline):  # type: ignore[misc]
    model = ExecutionRow
    fk_name = "schedule"
    verbose_name_plural = f"Recent executions (latest {RECENT_EXECUTIONS})"
    fields = (
        "scheduled_at",
        "kind",
        "status",
        "attempts",
        "retry_at",
        "scheduler_id",
        "submitted_at",
        "finished_at",
        "error",
    )
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    ordering = ("-scheduled_at",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request).using(_alias())
        # A slice cannot be filtered by the formset; a subquery of the latest ids can.
        latest = qs.order_by("-scheduled_at").values("pk")[:RECENT_EXECUTIONS]
        return qs.filter(pk__in=latest)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ScheduleRow)
class ScheduleAdmin(admin.ModelAdmin):  # type: ignore[misc]
    list_display = (
        "name",
        "source",
        "trigger_description",
        "enabled",
        "next_run_at",
        "last_status",
        "last_run_at",
        "missed_count",
    )
    list_filter = ("enabled", "source", "last_status", "misfire_policy")
    search_fields = ("name", "task", "description")
    ordering = ("name",)
    actions = ("enable_schedules", "disable_schedules", "run_now")
    inlines = (RecentExecutionInline,)
    change_form_template = "admin/goatbeat/schedule/change_form.html"
    _state_fields = (
        "source",
        "next_run_at",
        "last_run_at",
        "last_status",
        "total_run_count",
        "missed_count",
        "version",
        "upcoming",
        "created_at",
        "updated_at",
    )
    _code_fields = (
        "name",
        "task",
        "trigger_description",
        "timezone",
        "args",
        "kwargs",
        *ROUTING_FIELDS,
        "misfire_policy",
        "misfire_grace",
        "catch_up_limit",
        "start_at",
        "end_at",
        "one_off",
        "description",
    )

    # -- reading ----------------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(_alias())

    @admin.display(description="trigger")  # type: ignore[untyped-decorator]
    def trigger_description(self, obj: ScheduleRow) -> str:
        return describe_trigger(obj.trigger)

    @admin.display(description=f"next {UPCOMING_COUNT} fire times")  # type: ignore[untyped-decorator]
    def upcoming(self, obj: ScheduleRow) -> str:
        if obj.pk is None:
            return "-"
        try:
            schedule = _store().get(obj.name)
        except (ScheduleNotFound, InvalidValue) as exc:
            return str(exc)
        if not schedule.enabled:
            return "disabled"
        times = schedule.next_fire_times(UPCOMING_COUNT, datetime.now(UTC))
        if not times:
            return "never fires again"
        zone = schedule.timezone
        from goatbeat.core.timeutil import get_zone

        tz = get_zone(zone)
        return format_html(  # type: ignore[no-any-return]
            '<ol class="goatbeat-upcoming">{}</ol>',
            format_html_join(
                "",
                "<li><time datetime='{}'>{}</time></li>",
                (
                    (t.isoformat(), t.astimezone(tz).strftime(f"%Y-%m-%d %H:%M:%S ({zone})"))
                    for t in times
                ),
            ),
        )

    def is_code(self, obj: ScheduleRow | None) -> bool:
        # An unsaved row carries the model default "code": only stored rows count.
        return obj is not None and obj.pk is not None and obj.source == Source.CODE.value

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if self.is_code(obj):
            kwargs["form"] = EnabledOnlyForm
            kwargs["fields"] = ["enabled"]
            return super().get_form(request, obj, change=change, **kwargs)
        kwargs["form"] = ScheduleForm
        kwargs["fields"] = [
            f for f in ScheduleForm.base_fields if not (obj is not None and f == "name")
        ]
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if self.is_code(obj):
            return [
                (None, {"fields": ["name", "enabled", "source", "task", "trigger_description"]}),
                (
                    "Defined in code (read-only)",
                    {
                        "fields": [
                            f
                            for f in self._code_fields
                            if f not in ("name", "task", "trigger_description")
                        ]
                    },
                ),
                ("State", {"fields": [f for f in self._state_fields if f != "source"]}),
            ]
        what = ["task", "trigger_kind", "cron", "every", "timezone", "args", "kwargs"]
        top = (
            ["enabled", *what, "description"]
            if obj is not None
            else ["name", "enabled", *what, "description"]
        )
        fieldsets: list[Any] = [
            (None, {"fields": (["name"] if obj is not None else []) + top}),
            (
                "Misfires",
                {
                    "fields": [
                        "misfire_policy",
                        "grace",
                        "catch_up_limit",
                        "start_at",
                        "end_at",
                        "one_off",
                    ]
                },
            ),
            ("Routing", {"fields": list(ROUTING_FIELDS)}),
        ]
        if obj is not None:
            fieldsets.append(("State", {"fields": list(self._state_fields)}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        if obj is None:
            return ()
        if self.is_code(obj):
            return (*self._code_fields, *self._state_fields)
        return ("name", *self._state_fields)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A code schedule would come back on the next publish: disable it instead.
        if self.is_code(obj):
            return False
        return bool(super().has_delete_permission(request, obj))

    # -- writing (always through the store) -----------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: ScheduleRow, form: Any, change: bool) -> None:
        store = _store()
        if self.is_code(obj) or getattr(form, "schedule", None) is None:
            stored: Schedule = store.set_enabled(obj.name, bool(form.cleaned_data["enabled"]))
        elif change:
            stored = store.update(form.schedule)
        else:
            stored = store.create(form.schedule)
        obj.pk = stored.id
        obj.name = stored.name
        obj.enabled = stored.enabled

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # Executions are history: the read-only inline never writes (commit=False only fills
        # the bookkeeping the admin's change message reads).
        for formset in formsets:
            formset.save(commit=False)

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        return self.inlines if obj is not None and obj.pk is not None else ()

    def delete_model(self, request: HttpRequest, obj: ScheduleRow) -> None:
        _store().delete(obj.name)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        store = _store()
        for name in queryset.values_list("name", flat=True):
            store.delete(name)

    def _require_change(self, request: HttpRequest) -> None:
        if not self.has_change_permission(request):
            raise PermissionDenied

    @admin.action(description="Enable selected schedules", permissions=["change"])  # type: ignore[untyped-decorator]
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable selected schedules", permissions=["change"])  # type: ignore[untyped-decorator]
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Any], enabled: bool) -> None:
        self._require_change(request)
        store = _store()
        names = list(queryset.values_list("name", flat=True))
        for name in names:
            store.set_enabled(name, enabled)
        verb = "enabled" if enabled else "disabled"
        self.message_user(request, f"{len(names)} schedule(s) {verb}: {', '.join(names)}")

    @admin.action(description="Run selected schedules now", permissions=["change"])  # type: ignore[untyped-decorator]
    def run_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._require_change(request)
        requested = [
            self._request_run(request, name) for name in queryset.values_list("name", flat=True)
        ]
        done = [name for name in requested if name]
        if done:
            self.message_user(
                request,
                f"Run requested for {', '.join(done)}; the leading scheduler submits it "
                "on its next iteration.",
            )

    def _request_run(self, request: HttpRequest, name: str) -> str | None:
        try:
            _store().request_run(name)
        except GoatbeatError as exc:
            self.message_user(request, f"{name}: {exc}", level=messages.ERROR)
            return None
        return name

    # -- "run now" button on the schedule page -------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        extra = [
            path(
                "<path:object_id>/run/",
                self.admin_site.admin_view(self.run_view),
                name=f"{info[0]}_{info[1]}_run",
            )
        ]
        return extra + list(super().get_urls())

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = get_object_or_404(self.get_queryset(request), pk=object_id)
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        if self._request_run(request, obj.name):
            self.message_user(request, f"Run of {obj.name} requested.")
        url = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
            args=[obj.pk],
            current_app=self.admin_site.name,
        )
        return HttpResponseRedirect(url)

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        obj = kwargs.get("obj")
        context["goatbeat_can_run"] = obj is not None and self.has_change_permission(request, obj)
        return super().render_change_form(request, context, *args, **kwargs)


@admin.register(ExecutionRow)
class ExecutionAdmin(admin.ModelAdmin):  # type: ignore[misc]
    list_display = (
        "schedule_name",
        "scheduled_at",
        "kind",
        "status",
        "attempts",
        "submitted_at",
        "finished_at",
        "backend_task_id",
        "short_error",
    )
    list_filter = ("status", "kind")
    search_fields = ("schedule_name", "idempotency_key", "backend_task_id")
    date_hierarchy = "scheduled_at"
    ordering = ("-scheduled_at",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(_alias())

    @admin.display(description="error")  # type: ignore[untyped-decorator]
    def short_error(self, obj: ExecutionRow) -> str:
        """Why a run failed or was missed (the whole text is on its page)."""
        error = str(obj.error or "")
        return error if len(error) <= 120 else error[:119] + "…"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return [f.name for f in ExecutionRow._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
