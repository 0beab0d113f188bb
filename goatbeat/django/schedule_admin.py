"""The schedule admin: the list, its columns and filters, the create and edit pages, and the writes
they make (through the registry); its actions live in :mod:`goatbeat.django.schedule_controls`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join

from goatbeat.core.errors import GoatbeatError, InvalidValue, ScheduleNotFound
from goatbeat.core.health import Refusal, is_refused
from goatbeat.core.model import DamagedSchedule, Schedule, Source
from goatbeat.core.store import FieldChange
from goatbeat.django.admin_access import (
    database_alias,
    declaration_problems,
    declared_names,
    registry_for_writing,
    store_for_reading,
)
from goatbeat.django.admin_display import (
    history_line,
    in_current_zone,
    instant_column,
    local_time,
    needs_seconds,
    pause_title,
)
from goatbeat.django.admin_filters import DeclaredInCodeFilter, RefusedFilter
from goatbeat.django.execution_admin import RecentExecutionInline
from goatbeat.django.forms import (
    ROUTING_FIELDS,
    EnabledOnlyForm,
    ScheduleForm,
    describe_trigger,
    trigger_in_words,
)
from goatbeat.django.models import Schedule as ScheduleRow
from goatbeat.django.schedule_controls import ScheduleControls
from goatbeat.django.words import duration_in_words, instant

UPCOMING_COUNT = 10
"""How many next fire times the schedule page previews."""


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
        found = store_for_reading().refusals(name=obj.name).schedules
    except GoatbeatError:
        found = ()
    if found:
        return found[0]
    # Refused by its columns, its details unread: still shown refused.
    return Refusal(name=obj.name, task=obj.task, source=obj.source, reason=None, since=None)


class ScheduleAdmin(ScheduleControls):
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
        return super().get_queryset(request).using(database_alias())

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

    @admin.display(description=in_current_zone("next run"), ordering="next_run_at")  # type: ignore[untyped-decorator]
    def next_run(self, obj: ScheduleRow) -> str:
        if obj.paused:
            # Nothing is claimed while paused: the stored next_run_at is not a next run.
            return format_html('<span class="goatbeat-paused">{}</span>', "paused")  # type: ignore[no-any-return]
        return local_time(obj.next_run_at, needs_seconds(obj))

    @admin.display(description=in_current_zone("last run"), ordering="last_run_at")  # type: ignore[untyped-decorator]
    def last_run(self, obj: ScheduleRow) -> str:
        # An instant, not a slot: a run-now or a late claim falls anywhere in the minute.
        return local_time(obj.last_run_at, True)

    @admin.display(description="next run at")  # type: ignore[untyped-decorator]
    def next_run_zoned(self, obj: ScheduleRow) -> str:
        if obj.pk is not None and obj.paused:
            return f"none while paused (paused {pause_title(obj)}); resume it to schedule it"
        return instant(obj.next_run_at, obj.timezone, seconds=needs_seconds(obj))

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

    start_at_zoned = instant_column("start_at", "start at", zone_of=lambda obj: obj.timezone)
    end_at_zoned = instant_column("end_at", "end at", zone_of=lambda obj: obj.timezone)

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
            since = "" if refusal.since is None else f"since {local_time(refusal.since, True)}"
            return format_html(  # type: ignore[no-any-return]
                '<strong class="goatbeat-refused" title="{}">refused</strong> {}',
                refusal.reason or "refused (reason not recorded)",
                since,
            )
        if obj.paused:
            return format_html(  # type: ignore[no-any-return]
                '<strong class="goatbeat-paused" title="{}">paused</strong> {}',
                pause_title(obj),
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
        return f"Paused {pause_title(obj)}{note}"

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
            schedule = store_for_reading().get(obj.name)
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
        if declaration_problems():
            return False
        return self.is_code(obj) and obj is not None and obj.name not in declared_names()

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        problems = declaration_problems()
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
            queryset.filter(source=Source.CODE.value, name__in=declared_names()).values_list(
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
        registry = registry_for_writing()
        before = store_for_reading().get(obj.name) if change else None
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
        return history_line(changes) if changes else "No fields changed."

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # Executions are history: the read-only inline never writes (commit=False only fills
        # the bookkeeping the admin's change message reads).
        for formset in formsets:
            formset.save(commit=False)

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        return self.inlines if obj is not None and obj.pk is not None else ()

    def delete_model(self, request: HttpRequest, obj: ScheduleRow) -> None:
        registry_for_writing().delete(obj.name, origin="admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        registry = registry_for_writing()
        for name in queryset.values_list("name", flat=True):
            registry.delete(name, origin="admin")


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
