"""The admin: schedules (list, filters, actions, create and edit) and the execution history.

Every write goes through the project's registry (the ``Beat`` the CLI and the Python API use),
which writes through the store and logs the same goatbeat event as they do: creating
(``create_schedule``), editing (``update_schedule``), enabling and disabling (``set_enabled``),
deleting (``delete``), "run now" (``run_now``), pause, resume and backfill. So ``next_run_at``
and ``version`` follow the scheduling rules, a running scheduler is woken by NOTIFY, and an
admin enable logs ``schedule.enabled`` as a pause logs ``schedule.paused``. Actions need the change permission: Django hides them
from users without it and refuses a hand-made POST naming them, and each action checks again.
Every write leaves an entry in the object's History (Django's ``LogEntry``): an edit names
each changed field old -> new, the trigger in words; enable, disable and run now say so.

Schedule control: *Pause* (a page asking for a note; who and when are recorded), *Resume*
(from now, the pause's occurrences counted as skipped, or with catch-up by the misfire policy)
and *Backfill* (a page asking for a range, previewing its instants, then asking the leader to
submit each once) are actions, also offered on each schedule's page; they go through the
registry (``Beat.pause`` ...), need the change permission, apply to code schedules too, and
leave a History entry.

Code schedules are read-only except ``enabled``; executions are read-only history (with what
the workers reported: outcome, runtime, error; a link to the schedule; a filter by schedule).
The system's health is read-only too: the lease, the scheduler processes and their heartbeats,
and the record of missed occurrences, each page headed by the verdict of ``goatbeat status
--check``. A code
schedule this project's code no longer declares is *orphaned* (marked in the list, with a
filter): a user with the delete permission may delete it. One the code still declares cannot
be deleted here, since the next publication would recreate it; the page says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.actions import delete_selected
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join

from goatbeat.core.errors import GoatbeatError, InvalidValue, ScheduleNotFound
from goatbeat.core.health import Refusal, is_refused
from goatbeat.core.model import DamagedSchedule, Schedule, Source
from goatbeat.core.store import FieldChange, ScheduleStore
from goatbeat.core.timeutil import iso_z
from goatbeat.core.triggers import trigger_from_spec
from goatbeat.django.forms import (
    ROUTING_FIELDS,
    BackfillForm,
    EnabledOnlyForm,
    PauseForm,
    ScheduleForm,
    describe_trigger,
    trigger_in_words,
)
from goatbeat.django.models import Execution as ExecutionRow
from goatbeat.django.models import Lease as LeaseRow
from goatbeat.django.models import Miss as MissRow
from goatbeat.django.models import Schedule as ScheduleRow
from goatbeat.django.models import SchedulerProcess as SchedulerRow
from goatbeat.django.words import duration_in_words, instant, shows_seconds

if TYPE_CHECKING:
    from goatbeat.django.registry import DjangoRegistry

__all__ = [
    "ScheduleAdmin",
    "ExecutionAdmin",
    "LeaseAdmin",
    "SchedulerProcessAdmin",
    "MissAdmin",
    "UPCOMING_COUNT",
    "RECENT_EXECUTIONS",
]

UPCOMING_COUNT = 10
"""How many next fire times the schedule page previews."""
RECENT_EXECUTIONS = 20
"""How many executions the schedule page shows inline."""


def _alias() -> str:
    from goatbeat.django import conf

    return conf.get().database


def _store() -> ScheduleStore:
    """The store, for reading only: every write goes through :func:`_registry`, which logs
    the same events as the CLI and the Python API."""
    from goatbeat.django.registry import get_store

    return get_store()


def _declared() -> set[str]:
    """The names this project's code declares (its ``schedules.py`` files)."""
    from goatbeat.django.registry import get_registry

    return set(get_registry().names())


def _declaration_problems() -> list[str]:
    """What discovery found wrong in the project's ``schedules.py`` files."""
    from goatbeat.django.registry import get_registry

    return list(get_registry().problems)


def _in_current_zone(label: str) -> Any:
    """A column header naming the time zone its times are shown in (the current one, which
    Django activates per request: TIME_ZONE unless the project activates another)."""
    return lazy(lambda: f"{label} ({timezone.get_current_timezone_name()})", str)()


def _local(value: datetime | None, seconds: bool) -> str:
    if value is None:
        return "-"
    local: datetime = timezone.localtime(value)
    return local.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def _seconds(obj: Any) -> bool:
    """Whether the schedule's times need their seconds (it fires off whole minutes)."""
    try:
        return shows_seconds(trigger_from_spec(obj.trigger))
    except (InvalidValue, TypeError, ValueError):
        return True  # a damaged trigger: show everything


def _at(field: str, label: str, *, zone_of: Any = None) -> Any:
    """An admin column or read-only field showing the instant ``field`` with its seconds and
    its zone: in the current time zone, which the label names (lists, and the pages of rows
    that have no zone of their own), or with ``zone_of(obj)`` in that zone and in UTC."""
    description = label if zone_of is not None else _in_current_zone(label)

    @admin.display(description=description, ordering=field)  # type: ignore[untyped-decorator]
    def show(self: Any, obj: Any) -> str:
        value = getattr(obj, field)
        if zone_of is None:
            return _local(value, True)
        return instant(value, zone_of(obj), seconds=True)

    return show


def _zone_of_execution(execution: ExecutionRow) -> str:
    schedule = execution.schedule
    return schedule.timezone if schedule is not None else "UTC"


def _execution_time(execution: ExecutionRow, value: datetime | None) -> str:
    schedule = execution.schedule
    zone = schedule.timezone if schedule is not None else "UTC"
    return instant(value, zone, seconds=True)


def _history(changes: Sequence[FieldChange]) -> str:
    """A History line naming each changed field old -> new (the trigger in words)."""
    return "Changed " + "; ".join(c.describe() for c in changes) + "."


class DeclaredInCodeFilter(admin.SimpleListFilter):  # type: ignore[misc]
    """Code schedules this project's code declares, and the orphaned ones it no longer does."""

    title = "declared in code"
    parameter_name = "in_code"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("declared", "declared"), ("orphaned", "no longer declared (orphaned)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        code = queryset.filter(source=Source.CODE.value)
        if self.value() == "declared":
            return code.filter(name__in=_declared())
        if self.value() == "orphaned":
            return code.exclude(name__in=_declared())
        return queryset


def _refused(obj: ScheduleRow) -> bool:
    return obj.pk is not None and is_refused(
        enabled=obj.enabled,
        paused=obj.paused,
        last_status=obj.last_status,
        source=obj.source,
        next_run_at=obj.next_run_at,
    )


def _refusal(obj: ScheduleRow) -> Refusal | None:
    """The refusal of a refused row, with its reason and since when (one read, only for a
    row the columns already say is refused)."""
    if not _refused(obj):
        return None
    try:
        found = _store().refusals(name=obj.name).schedules
    except GoatbeatError:
        found = ()
    if found:
        return found[0]
    # Refused by its columns, its details unread: still shown refused.
    return Refusal(name=obj.name, task=obj.task, source=obj.source, reason=None, since=None)


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
        return _execution_time(obj, obj.scheduled_at)

    @admin.display(description="submitted at")  # type: ignore[untyped-decorator]
    def submitted(self, obj: ExecutionRow) -> str:
        return _execution_time(obj, obj.submitted_at)

    @admin.display(description="finished at")  # type: ignore[untyped-decorator]
    def finished(self, obj: ExecutionRow) -> str:
        return _execution_time(obj, obj.finished_at)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request).using(_alias()).select_related("schedule")
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
        "source_label",
        "trigger_description",
        "enabled",
        "state",
        "next_run",
        "last_status",
        "last_run",
        "missed_count",
        "damage",
    )
    list_filter = (
        "enabled",
        "paused",
        "source",
        DeclaredInCodeFilter,
        RefusedFilter,
        "last_status",
        "misfire_policy",
        "overlap",
    )
    search_fields = ("name", "task", "description")
    ordering = ("name",)
    actions = (
        "enable_schedules",
        "disable_schedules",
        "run_now",
        "pause_schedules",
        "resume_schedules",
        "resume_catching_up",
        "backfill_schedule",
        "delete_selected",
    )
    inlines = (RecentExecutionInline,)
    change_form_template = "admin/goatbeat/schedule/change_form.html"
    _trigger_fields = ("trigger_kind", "cron", "timezone", "every", "anchor", "at")
    _solar_fields = ("solar_event", "latitude", "longitude")
    _state_fields = (
        "damage",
        "refusal",
        "pause_state",
        "source",
        "next_run_zoned",
        "last_run_zoned",
        "last_status",
        "total_run_count",
        "missed_count",
        "skipped_count",
        "version",
        "upcoming",
        "created_zoned",
        "updated_zoned",
    )
    _code_fields = (
        "name",
        "in_code",
        "task",
        "current_trigger",
        "timezone",
        "args",
        "kwargs",
        *ROUTING_FIELDS,
        "misfire_policy",
        "misfire_grace_display",
        "catch_up_limit",
        "start_at_zoned",
        "end_at_zoned",
        "one_off",
        "description",
        "jitter_display",
        "overlap",
        "max_runtime_display",
        "pause_on_failure",
    )

    # -- reading ----------------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(_alias())

    class Media:
        js = ("goatbeat/trigger_kind.js",)
        css = {"all": ("goatbeat/admin.css",)}

    @admin.display(description="trigger")  # type: ignore[untyped-decorator]
    def trigger_description(self, obj: ScheduleRow) -> str:
        words = describe_trigger(obj.trigger, obj.timezone)
        # "At 09:00 (cron 0 9 * * *, Europe/Paris)": the words, then what they describe, small.
        said, paren, detail = words.partition(" (cron ")
        if not paren:
            said, paren, detail = words.partition(" (celery crontab ")
        if not paren:
            return words
        return format_html(  # type: ignore[no-any-return]
            '{}<br><small class="goatbeat-expression">{}{}</small>',
            said,
            paren.strip(" ("),
            " " + detail.removesuffix(")"),
        )

    @admin.display(description="current trigger")  # type: ignore[untyped-decorator]
    def current_trigger(self, obj: ScheduleRow) -> str:
        return trigger_in_words(obj.trigger, obj.timezone)

    @admin.display(description="runs once")  # type: ignore[untyped-decorator]
    def runs_once(self, obj: ScheduleRow) -> str:
        """The one other notion of "one-off" a stored row may carry: django-celery-beat's
        ``one_off`` flag, imported with the schedule (the form's one-off is the trigger kind)."""
        return (
            "Yes: imported with django-celery-beat's one_off, it is disabled after its first "
            "run. Saving keeps that; for a new one-off, choose the one-off trigger."
        )

    # Times: in the list, in the current time zone, which the column header names; on the
    # schedule's page, in the schedule's zone and in UTC. Seconds where it fires off minutes.

    @admin.display(description=_in_current_zone("next run"), ordering="next_run_at")  # type: ignore[untyped-decorator]
    def next_run(self, obj: ScheduleRow) -> str:
        if obj.paused:
            # Nothing is claimed while paused: the stored next_run_at is not a next run.
            return format_html('<span class="goatbeat-paused">{}</span>', "paused")  # type: ignore[no-any-return]
        return _local(obj.next_run_at, _seconds(obj))

    @admin.display(description=_in_current_zone("last run"), ordering="last_run_at")  # type: ignore[untyped-decorator]
    def last_run(self, obj: ScheduleRow) -> str:
        # An instant, not a slot: a run-now or a late claim falls anywhere in the minute.
        return _local(obj.last_run_at, True)

    @admin.display(description="next run at")  # type: ignore[untyped-decorator]
    def next_run_zoned(self, obj: ScheduleRow) -> str:
        if obj.pk is not None and obj.paused:
            return f"none while paused (paused {_pause_title(obj)}); resume it to schedule it"
        return instant(obj.next_run_at, obj.timezone, seconds=_seconds(obj))

    @admin.display(description="last run at")  # type: ignore[untyped-decorator]
    def last_run_zoned(self, obj: ScheduleRow) -> str:
        return instant(obj.last_run_at, obj.timezone, seconds=True)

    # A code schedule's durations, read-only: in words, not as the column's float seconds.

    @admin.display(description="misfire grace")  # type: ignore[untyped-decorator]
    def misfire_grace_display(self, obj: ScheduleRow) -> str:
        return duration_in_words(obj.misfire_grace)

    @admin.display(description="jitter")  # type: ignore[untyped-decorator]
    def jitter_display(self, obj: ScheduleRow) -> str:
        return "none" if not obj.jitter else duration_in_words(obj.jitter)

    @admin.display(description="max runtime")  # type: ignore[untyped-decorator]
    def max_runtime_display(self, obj: ScheduleRow) -> str:
        return duration_in_words(obj.max_runtime)

    start_at_zoned = _at("start_at", "start at", zone_of=lambda obj: obj.timezone)
    end_at_zoned = _at("end_at", "end at", zone_of=lambda obj: obj.timezone)

    @admin.display(description="created at")  # type: ignore[untyped-decorator]
    def created_zoned(self, obj: ScheduleRow) -> str:
        return instant(obj.created_at, obj.timezone, seconds=True)

    @admin.display(description="updated at")  # type: ignore[untyped-decorator]
    def updated_zoned(self, obj: ScheduleRow) -> str:
        return instant(obj.updated_at, obj.timezone, seconds=True)

    @admin.display(description="source", ordering="source")  # type: ignore[untyped-decorator]
    def source_label(self, obj: ScheduleRow) -> str:
        if self.is_orphaned(obj):
            return format_html(  # type: ignore[no-any-return]
                '{} <strong class="goatbeat-orphaned">orphaned</strong>', obj.source
            )
        return str(obj.source)

    @admin.display(description="in code")  # type: ignore[untyped-decorator]
    def in_code(self, obj: ScheduleRow) -> str:
        """Whether this project's code still declares a code schedule, and what that allows."""
        if self.is_orphaned(obj):
            return format_html(  # type: ignore[no-any-return]
                '<strong class="goatbeat-orphaned">Orphaned</strong>: {} <code>{}</code>; {}',
                "no longer declared in this project's code (schedules.py). While enabled it "
                "keeps running: disable it, or run",
                "manage.py goatbeat schedule prune",
                "delete it once its history is no longer needed.",
            )
        return (
            "Declared in code: change it in schedules.py and publish (manage.py goatbeat "
            "publish). It cannot be deleted here, since the next publication would recreate "
            "it; disable it instead, or remove its declaration first."
        )

    @admin.display(description="state")  # type: ignore[untyped-decorator]
    def state(self, obj: ScheduleRow) -> str:
        """paused (with the note, who and when), refused (since when and why, on hover),
        ended, disabled or enabled."""
        refusal = _refusal(obj)
        if refusal is not None:
            since = "" if refusal.since is None else f"since {_local(refusal.since, True)}"
            return format_html(  # type: ignore[no-any-return]
                '<strong class="goatbeat-refused" title="{}">refused</strong> {}',
                refusal.reason or "refused (reason not recorded)",
                since,
            )
        if obj.paused:
            return format_html(  # type: ignore[no-any-return]
                '<strong class="goatbeat-paused" title="{}">paused</strong> {}',
                _pause_title(obj),
                obj.pause_note,
            )
        stored = obj.read() if obj.pk is not None else None
        if isinstance(stored, Schedule) and stored.ended(datetime.now(UTC)):
            return format_html('<span class="goatbeat-ended">{}</span>', "ended")  # type: ignore[no-any-return]
        return "enabled" if obj.enabled else "disabled"

    @admin.display(description="refused")  # type: ignore[untyped-decorator]
    def refusal(self, obj: ScheduleRow) -> str:
        """Why a scheduler refused the schedule and since when, while it stays refused."""
        refusal = _refusal(obj)
        if refusal is None:
            return "not refused"
        since = (
            ""
            if refusal.since is None
            else f" since {instant(refusal.since, obj.timezone, seconds=True)}"
        )
        return format_html(  # type: ignore[no-any-return]
            '<strong class="goatbeat-refused">Refused</strong>{}: {}. It does not run. A '
            "scheduler that knows the task runs it again by itself once it leads (roll the "
            "release that has the task out to the schedulers, or add the task to allowed_tasks); "
            "or change the task.",
            since,
            refusal.reason or "reason not recorded",
        )

    @admin.display(description="pause")  # type: ignore[untyped-decorator]
    def pause_state(self, obj: ScheduleRow) -> str:
        if obj.pk is None or not obj.paused:
            return "not paused"
        note = f": {obj.pause_note}" if obj.pause_note else ""
        return f"Paused {_pause_title(obj)}{note}"

    @admin.display(description="damaged")  # type: ignore[untyped-decorator]
    def damage(self, obj: ScheduleRow) -> str:
        """Empty for a sound row; for one that cannot be decoded, the column and what is
        wrong (the scheduler does not run it until it is saved with valid values)."""
        if obj.pk is None:
            return ""
        stored = obj.read()
        if not isinstance(stored, DamagedSchedule):
            return ""
        return format_html(  # type: ignore[no-any-return]
            '<strong class="goatbeat-damaged">damaged</strong> {}', stored.describe()
        )

    @admin.display(description=f"next {UPCOMING_COUNT} fire times")  # type: ignore[untyped-decorator]
    def upcoming(self, obj: ScheduleRow) -> str:
        if obj.pk is None:
            return "-"
        try:
            schedule = _store().get(obj.name)
        except (ScheduleNotFound, InvalidValue) as exc:
            return str(exc)
        if isinstance(schedule, DamagedSchedule):
            return "none: the stored row is damaged"
        if not schedule.enabled:
            return "disabled"
        if schedule.paused:
            return "none while paused"
        times = schedule.next_fire_times(UPCOMING_COUNT, datetime.now(UTC))
        if not times:
            return "never fires again"
        return format_html(  # type: ignore[no-any-return]
            '<ol class="goatbeat-upcoming">{}</ol>',
            format_html_join(
                "",
                "<li><time datetime='{}'>{}</time></li>",
                ((t.isoformat(), instant(t, schedule.timezone, seconds=True)) for t in times),
            ),
        )

    def is_code(self, obj: ScheduleRow | None) -> bool:
        # An unsaved row carries the model default "code": only stored rows count.
        return obj is not None and obj.pk is not None and obj.source == Source.CODE.value

    def is_orphaned(self, obj: ScheduleRow | None) -> bool:
        """A code schedule this project's code no longer declares (never said while a
        schedules.py is broken: what it would have declared is unknown)."""
        if _declaration_problems():
            return False
        return self.is_code(obj) and obj is not None and obj.name not in _declared()

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        problems = _declaration_problems()
        if problems and request.method == "GET":
            self.message_user(
                request,
                f"The project's schedules.py files have {len(problems)} problem(s); code "
                "schedules are not published and the scheduler does not start until they are "
                "fixed (manage.py check lists them): " + "; ".join(problems),
                level=messages.ERROR,
            )
        return super().changelist_view(request, extra_context)

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
                (
                    None,
                    {"fields": ["name", "enabled", "source", "in_code", "task", "current_trigger"]},
                ),
                (
                    "Defined in code (read-only)",
                    {
                        "fields": [
                            f
                            for f in self._code_fields
                            if f not in ("name", "in_code", "task", "current_trigger")
                        ]
                    },
                ),
                ("State", {"fields": [f for f in self._state_fields if f != "source"]}),
            ]
        top = ["name", "enabled", "task", "args", "kwargs", "description"]
        when = [*self._trigger_fields, *self._solar_fields]
        if obj is not None:
            when.insert(0, "current_trigger")
            if obj.one_off:
                when.insert(1, "runs_once")
        fieldsets: list[Any] = [
            (None, {"fields": top}),
            (
                "When",
                {
                    "fields": when,
                    "description": "Saving keeps a trigger whose fields you did not change "
                    "exactly as stored (an interval keeps its anchor, so its phase).",
                },
            ),
            (
                "Misfires",
                {
                    "fields": [
                        "misfire_policy",
                        "grace",
                        "catch_up_limit",
                        "start_at",
                        "end_at",
                    ]
                },
            ),
            (
                "Control",
                {
                    "fields": [
                        "jitter_duration",
                        "overlap",
                        "max_runtime_duration",
                        "pause_on_failure",
                    ],
                    "description": "Pause and resume, and backfill, are actions (list and "
                    "page); these are part of the definition.",
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
        return ("name", "current_trigger", "runs_once", *self._state_fields)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A code schedule the code still declares would come back on the next publish:
        # disable it instead. An orphaned one is the operator's to delete.
        if self.is_code(obj) and not self.is_orphaned(obj):
            return False
        return bool(super().has_delete_permission(request, obj))

    @admin.action(  # type: ignore[untyped-decorator]
        description=delete_selected.short_description, permissions=["delete"]
    )
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        """Django's bulk delete, refusing code schedules the code still declares (by name,
        rather than Django's "you lack permission", which is not the reason)."""
        declared = sorted(
            queryset.filter(source=Source.CODE.value, name__in=_declared()).values_list(
                "name", flat=True
            )
        )
        if declared:
            self.message_user(
                request,
                f"Not deleted: {', '.join(declared)} "
                f"{'is' if len(declared) == 1 else 'are'} declared in code, and the next "
                "publication would recreate them. Disable them, or remove their declaration "
                "first.",
                level=messages.ERROR,
            )
            return None
        return delete_selected(self, request, queryset)

    # -- writing (always through the store) -----------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: ScheduleRow, form: Any, change: bool) -> None:
        registry = _registry()
        before = _store().get(obj.name) if change else None
        if self.is_code(obj) or getattr(form, "schedule", None) is None:
            stored: Schedule | DamagedSchedule = registry.set_enabled(
                obj.name, bool(form.cleaned_data["enabled"])
            )
        elif change:
            stored, _ = registry.update_schedule(form.schedule, origin="admin")
        else:
            stored = registry.create_schedule(form.schedule, origin="admin")
        obj.pk = stored.id
        obj.name = stored.name
        obj.enabled = stored.enabled
        form.goatbeat_changes = _changes(before, stored)

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        """An edit's History entry names each changed field, old -> new (the trigger in
        words), read from the store before and after the write."""
        changes: list[FieldChange] | None = getattr(form, "goatbeat_changes", None)
        if add or changes is None:
            return super().construct_change_message(request, form, formsets, add)
        return _history(changes) if changes else "No fields changed."

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # Executions are history: the read-only inline never writes (commit=False only fills
        # the bookkeeping the admin's change message reads).
        for formset in formsets:
            formset.save(commit=False)

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        return self.inlines if obj is not None and obj.pk is not None else ()

    def delete_model(self, request: HttpRequest, obj: ScheduleRow) -> None:
        _registry().delete(obj.name, origin="admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        registry = _registry()
        for name in queryset.values_list("name", flat=True):
            registry.delete(name, origin="admin")

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
        store, registry = _store(), _registry()
        names = []
        verb = "Enabled" if enabled else "Disabled"
        for row in queryset:
            try:
                before = store.get(row.name)
                registry.set_enabled(row.name, enabled)
            except GoatbeatError as exc:  # a damaged row cannot be enabled until repaired
                self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
                continue
            names.append(row.name)
            if before.enabled != enabled:
                self.log_change(request, row, f"{verb} (admin action).")
        self.message_user(request, f"{len(names)} schedule(s) {verb.lower()}: {', '.join(names)}")

    @admin.action(description="Run selected schedules now", permissions=["change"])  # type: ignore[untyped-decorator]
    def run_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._require_change(request)
        requested = [self._request_run(request, row) for row in queryset]
        done = [name for name in requested if name]
        if done:
            self.message_user(
                request,
                f"Run requested for {', '.join(done)}; the leading scheduler submits it "
                "on its next iteration.",
            )

    def _request_run(self, request: HttpRequest, row: ScheduleRow) -> str | None:
        try:
            execution = _registry().run_now(row.name)
        except GoatbeatError as exc:
            self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
            return None
        self.log_change(request, row, f"Run requested now ({execution.idempotency_key}).")
        return str(row.name)

    # -- pause, resume, backfill -----------------------------------------------------------------

    @admin.action(description="Pause selected schedules…", permissions=["change"])  # type: ignore[untyped-decorator]
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        """A page asking for the note; then each schedule is paused (who: this user)."""
        self._require_change(request)
        if "apply" not in request.POST:
            return self._control_page(request, queryset, "pause", PauseForm())
        form = PauseForm(request.POST)
        if not form.is_valid():
            return self._control_page(request, queryset, "pause", form)
        note = form.cleaned_data["note"]
        done = [row.name for row in queryset if self._pause(request, row, note)]
        if done:
            self.message_user(request, f"Paused: {', '.join(done)}.")
        return None

    def _pause(self, request: HttpRequest, row: ScheduleRow, note: str) -> bool:
        try:
            _registry().pause(row.name, note=note, by=request.user.get_username())
        except GoatbeatError as exc:
            self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
            return False
        self.log_change(request, row, f"Paused{': ' + note if note else ''}.")
        return True

    @admin.action(description="Resume selected schedules from now", permissions=["change"])  # type: ignore[untyped-decorator]
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._resume_all(request, queryset, catch_up=False)

    @admin.action(  # type: ignore[untyped-decorator]
        description="Resume selected schedules, catching up the pause", permissions=["change"]
    )
    def resume_catching_up(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._resume_all(request, queryset, catch_up=True)

    def _resume_all(self, request: HttpRequest, queryset: QuerySet[Any], *, catch_up: bool) -> None:
        self._require_change(request)
        done = [row.name for row in queryset if self._resume(request, row, catch_up=catch_up)]
        if done:
            self.message_user(request, f"Resumed: {', '.join(done)}.")

    def _resume(self, request: HttpRequest, row: ScheduleRow, *, catch_up: bool) -> bool:
        try:
            result = _registry().resume(row.name, catch_up=catch_up)
        except GoatbeatError as exc:
            self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
            return False
        if not result.was_paused:
            self.message_user(request, f"{row.name} was not paused.", level=messages.WARNING)
            return False
        if catch_up:
            text = "Resumed, catching up the pause by the misfire policy."
        else:
            more = "at least " if result.skipped_is_lower_bound else ""
            text = f"Resumed from now; {more}{result.skipped} occurrence(s) of the pause skipped."
        self.log_change(request, row, text)
        return True

    @admin.action(
        description="Backfill a past range of the selected schedule…", permissions=["change"]
    )  # type: ignore[untyped-decorator]
    def backfill_schedule(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        """A page asking for the range: *Preview* lists its instants (those that already ran
        included), *Backfill* asks the leader to submit the others, once each."""
        self._require_change(request)
        rows = list(queryset[:2])
        if len(rows) != 1:
            self.message_user(request, "Select one schedule to backfill.", level=messages.ERROR)
            return None
        row = rows[0]
        if "preview" not in request.POST and "apply" not in request.POST:
            return self._control_page(request, queryset, "backfill", BackfillForm())
        form = BackfillForm(request.POST)
        if not form.is_valid():
            return self._control_page(request, queryset, "backfill", form)
        apply = "apply" in request.POST
        data = form.cleaned_data
        try:
            result = _registry().backfill(
                row.name,
                start=data["start"],
                end=data["end"],
                limit=data["limit"],
                dry_run=not apply,
            )
        except InvalidValue as exc:
            form.add_error(
                {"start": "start", "end": "end", "limit": "limit"}.get(exc.field),
                ValidationError(exc.reason),
            )
            return self._control_page(request, queryset, "backfill", form)
        except GoatbeatError as exc:
            self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
            return None
        if not apply:
            return self._control_page(request, queryset, "backfill", form, preview=result)
        self.log_change(
            request,
            row,
            f"Backfill requested: {len(result.created)} instant(s) from "
            f"{data['start'].isoformat()} to {data['end'].isoformat()}"
            f"{f', {len(result.existing)} already ran' if result.existing else ''}.",
        )
        self.message_user(
            request,
            f"Backfill of {row.name}: {len(result.created)} instant(s) requested; the leading "
            "scheduler submits them on its next iteration"
            + (f"; {len(result.existing)} already ran, not again." if result.existing else "."),
        )
        return None

    def _control_page(
        self,
        request: HttpRequest,
        queryset: QuerySet[Any],
        action: str,
        form: Any,
        *,
        preview: Any = None,
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": {"pause": "Pause schedules", "backfill": "Backfill"}[action],
            "opts": self.opts,
            "queryset": queryset,
            "form": form,
            "action": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "preview": preview,
            "existing": {} if preview is None else preview.existing,
            "preview_rows": []
            if preview is None
            else [(iso_z(t), preview.existing.get(t)) for t in preview.instants],
        }
        return TemplateResponse(request, f"admin/goatbeat/schedule/{action}.html", context)

    # -- buttons on the schedule page -----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        extra = [
            path(
                "<path:object_id>/run/",
                self.admin_site.admin_view(self.run_view),
                name=f"{info[0]}_{info[1]}_run",
            ),
            path(
                "<path:object_id>/resume/",
                self.admin_site.admin_view(self.resume_view),
                name=f"{info[0]}_{info[1]}_resume",
            ),
        ]
        return extra + list(super().get_urls())

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The page's *Resume* button (from now, or ``catch_up`` in the POST)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = get_object_or_404(self.get_queryset(request), pk=object_id)
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        if self._resume(request, obj, catch_up=bool(request.POST.get("catch_up"))):
            self.message_user(request, f"Resumed {obj.name}.")
        return HttpResponseRedirect(self._change_url(obj))

    def _change_url(self, obj: ScheduleRow) -> str:
        return reverse(  # type: ignore[no-any-return]
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
            args=[obj.pk],
            current_app=self.admin_site.name,
        )

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = get_object_or_404(self.get_queryset(request), pk=object_id)
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        if self._request_run(request, obj):
            self.message_user(request, f"Run of {obj.name} requested.")
        return HttpResponseRedirect(self._change_url(obj))

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        obj = kwargs.get("obj")
        context["goatbeat_can_run"] = obj is not None and self.has_change_permission(request, obj)
        context["goatbeat_paused"] = obj is not None and bool(obj.paused)
        context["goatbeat_page_actions"] = [
            *([] if obj is None or obj.paused else [("pause_schedules", "Pause…")]),
            ("backfill_schedule", "Backfill…"),
        ]
        return super().render_change_form(request, context, *args, **kwargs)


def _registry() -> DjangoRegistry:
    from goatbeat.django.registry import get_registry

    return get_registry()


def _pause_title(obj: ScheduleRow) -> str:
    """``since 2026-11-01 09:00 UTC by alice``."""
    since = (
        obj.paused_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if obj.paused_at else "-"
    )
    return f"since {since} by {obj.paused_by or '-'}"


def _changes(
    before: Schedule | DamagedSchedule | None, after: Schedule | DamagedSchedule
) -> list[FieldChange] | None:
    """What an edit changed, old -> new; None when it cannot be told (a damaged row)."""
    if not isinstance(before, Schedule) or not isinstance(after, Schedule):
        return None
    from goatbeat.stores import schedule_changes

    changes = schedule_changes(before, after)
    if before.enabled != after.enabled:
        changes.append(FieldChange(field="enabled", old=before.enabled, new=after.enabled))
    return changes


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
            ExecutionRow.objects.using(_alias())
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


@admin.register(ExecutionRow)
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
        return super().get_queryset(request).using(_alias())

    # The list: the current time zone (the header names it); the page: the schedule's zone
    # and UTC, as on the schedule's page. Seconds everywhere: these are instants, not slots.
    scheduled = _at("scheduled_at", "scheduled at")
    finished = _at("finished_at", "finished at")
    scheduled_at_zoned = _at("scheduled_at", "scheduled at", zone_of=_zone_of_execution)
    claimed_at_zoned = _at("claimed_at", "claimed at", zone_of=_zone_of_execution)
    submitted_at_zoned = _at("submitted_at", "submitted at", zone_of=_zone_of_execution)
    started_at_zoned = _at("started_at", "started at", zone_of=_zone_of_execution)
    finished_at_zoned = _at("finished_at", "finished at", zone_of=_zone_of_execution)
    retry_at_zoned = _at("retry_at", "retry at", zone_of=_zone_of_execution)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return [_shown(self, f.name) for f in ExecutionRow._meta.fields]

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


def _shown(model_admin: Any, field: str) -> str:
    """The name a read-only page shows ``field`` under: its display with seconds and zone
    (``<field>_zoned``), its words (``runtime_display``), or the column itself."""
    for name in (f"{field}_zoned", f"{field}_display"):
        if hasattr(model_admin, name):
            return name
    return field


# -- the system's health: read-only ----------------------------------------------------------------


class _ReadOnly(admin.ModelAdmin):  # type: ignore[misc]
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # Leases and heartbeats are judged by the database's clock, read with the rows.
        return super().get_queryset(request).using(_alias()).annotate(db_now=Now())

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return [_shown(self, f.name) for f in self.model._meta.fields]

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
            verdict = check(_store().status(), max_lag=timedelta(seconds=60))
        except GoatbeatError as exc:
            self.message_user(request, f"Cannot read the status: {exc}", messages.ERROR)
        else:
            level = messages.SUCCESS if verdict.ok else messages.ERROR
            word = "Healthy" if verdict.ok else "Unhealthy"
            self.message_user(request, f"{word}: {verdict.reason}.", level)
        return super().changelist_view(request, extra_context)


@admin.register(LeaseRow)
class LeaseAdmin(_ReadOnly):
    """Who holds the lease, with which fencing token, until when (the database clock)."""

    list_display = ("name", "holder", "token", "expires_at_zoned", "state", "acquired_at_zoned")
    expires_at_zoned = _at("expires_at", "expires at")
    acquired_at_zoned = _at("acquired_at", "acquired at")

    @admin.display(description="state")  # type: ignore[untyped-decorator]
    def state(self, obj: LeaseRow) -> str:
        left = (obj.expires_at - obj.db_now).total_seconds()
        return f"held, {left:.0f}s left" if left > 0 else f"expired {-left:.0f}s ago"


@admin.register(SchedulerRow)
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
    started_at_zoned = _at("started_at", "started at")
    heartbeat_at_zoned = _at("heartbeat_at", "heartbeat at")
    expires_at_zoned = _at("expires_at", "expires at")

    @admin.display(description="alive", boolean=True)  # type: ignore[untyped-decorator]
    def alive(self, obj: SchedulerRow) -> bool:
        return bool(obj.expires_at > obj.db_now)

    @admin.display(description="last heartbeat", ordering="heartbeat_at")  # type: ignore[untyped-decorator]
    def heartbeat(self, obj: SchedulerRow) -> str:
        ago = (obj.db_now - obj.heartbeat_at).total_seconds()
        return f"{max(0.0, ago):.0f}s ago"


@admin.register(MissRow)
class MissAdmin(_ReadOnly):
    """Occurrences misfire policies dropped (kept 7 days)."""

    list_display = (
        "schedule_name",
        "missed",
        "first_at_zoned",
        "last_at_zoned",
        "recorded_at_zoned",
    )
    first_at_zoned = _at("first_at", "first missed")
    last_at_zoned = _at("last_at", "last missed")
    recorded_at_zoned = _at("recorded_at", "recorded at")
    search_fields = ("schedule_name",)
    date_hierarchy = "recorded_at"
