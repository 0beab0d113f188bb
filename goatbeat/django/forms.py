"""The admin's schedule form: every value validated by the same core types as code declarations.

``clean()`` builds a core :class:`~goatbeat.core.model.Schedule` exactly as ``beat.schedule()``
does (same trigger builder, same Routing, same submitter validation) and shows each
:class:`~goatbeat.core.errors.InvalidValue` on the field it names. The admin then saves the
built schedule through the store, never with ``Model.save()``.

Every trigger kind has its fields: cron (expression + time zone), interval (every + anchor),
one-off (instant), solar (event + latitude + longitude), and celery's AND-of-days crontab for
the imported schedules that carry it. Editing keeps what was not edited: a field the user did
not change keeps the stored value exactly (an interval's anchor to the microsecond, a grace of
90.5 s), so saving a new description never moves a schedule off its phase.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.html import format_html, format_html_join

from goatbeat.beat import build_trigger
from goatbeat.core.durations import format_duration, parse_duration
from goatbeat.core.errors import InvalidValue, ScheduleNotFound
from goatbeat.core.model import (
    DamagedSchedule,
    MisfirePolicy,
    OverlapPolicy,
    Routing,
    Schedule,
    Source,
)
from goatbeat.core.solar import SOLAR_EVENTS
from goatbeat.core.timeutil import get_zone
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
    trigger_from_spec,
)
from goatbeat.django.models import Schedule as ScheduleRow
from goatbeat.django.words import in_words

__all__ = [
    "ScheduleForm",
    "EnabledOnlyForm",
    "PauseForm",
    "BackfillForm",
    "TaskInput",
    "FIELD_FOR",
    "ROUTING_FIELDS",
    "TRIGGER_FIELDS",
    "KIND_FIELDS",
    "describe_trigger",
    "trigger_in_words",
]

TRIGGER_KINDS = [
    ("cron", "cron expression"),
    ("interval", "interval"),
    ("once", "one-off (once, at an instant: django-celery-beat's clocked)"),
    ("solar", "solar event (sunrise, sunset ...)"),
]
CELERY_CRONTAB = ("celery_crontab", "celery crontab (day-of-month AND day-of-week)")
"""Offered only for a schedule that already has one (imported from celery)."""

KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "cron": ("cron", "timezone"),
    "celery_crontab": ("cron", "timezone"),
    "interval": ("every", "anchor"),
    "once": ("at", "timezone"),
    "solar": ("solar_event", "latitude", "longitude"),
}
"""The form fields each trigger kind reads (the change page shows only those)."""

TRIGGER_FIELDS = frozenset({"trigger_kind"}.union(*KIND_FIELDS.values()))
"""The form fields that make up the trigger: while none changes, the stored trigger is kept."""

FIELD_FOR = {
    "cron": "cron",
    "expression": "cron",
    "every": "every",
    "interval": "every",
    "anchor": "anchor",
    "at": "at",
    "event": "solar_event",
    "latitude": "latitude",
    "longitude": "longitude",
    "timezone": "timezone",
    "misfire": "misfire_policy",
    "misfire_policy": "misfire_policy",
    "misfire_grace": "grace",
    "jitter": "jitter_duration",
    "max_runtime": "max_runtime_duration",
}
"""InvalidValue.field -> form field, where the names differ (others map to themselves)."""

ROUTING_FIELDS = ("queue", "exchange", "routing_key", "priority", "expires", "headers")
"""The schedule columns that make up its :class:`~goatbeat.core.model.Routing`, in form order."""


class TaskInput(forms.TextInput):  # type: ignore[misc]
    """A text input offering the known tasks (a ``<datalist>``): any dotted path may still be
    typed, and is checked on save as a code declaration is."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.tasks: list[str] = []

    def render(self, name: str, value: Any, attrs: Any = None, renderer: Any = None) -> Any:
        list_id = f"goatbeat-known-{name}s"
        attrs = {**(attrs or {}), "list": list_id, "autocomplete": "off"}
        options = format_html_join("", '<option value="{}"></option>', ((t,) for t in self.tasks))
        return super().render(name, value, attrs, renderer) + format_html(
            '<datalist id="{}">{}</datalist>', list_id, options
        )


class ScheduleForm(forms.ModelForm):  # type: ignore[misc]
    """Create or edit an admin (or imported) schedule."""

    trigger_kind = forms.ChoiceField(choices=TRIGGER_KINDS, initial="cron", label="Trigger")
    cron = forms.CharField(
        required=False,
        label="Cron expression",
        help_text="5 fields (min hour day-of-month month day-of-week), or 6 with seconds first; "
        "@daily, @hourly ...",
    )
    every = forms.CharField(
        required=False, label="Every", help_text="An interval such as 30s, 5m, 1h30m, 2d."
    )
    anchor = forms.CharField(
        required=False,
        label="Anchor",
        help_text="The interval fires at anchor + k x every (ISO 8601, e.g. "
        "2026-01-01T00:00:00+00:00; without an offset, UTC). "
        "Empty: aligned on the Unix epoch.",
    )
    at = forms.CharField(
        required=False,
        label="At",
        help_text="The one instant it fires (ISO 8601, e.g. 2027-01-01T09:00:00+01:00; "
        "without an offset, read in the time zone).",
    )
    solar_event = forms.ChoiceField(
        required=False,
        choices=[("", "---------")] + [(e, e.replace("_", " ")) for e in SOLAR_EVENTS],
        label="Solar event",
    )
    latitude = forms.FloatField(
        required=False, label="Latitude", help_text="Degrees, -90 (south) to 90 (north)."
    )
    longitude = forms.FloatField(
        required=False, label="Longitude", help_text="Degrees, -180 (west) to 180 (east)."
    )
    grace = forms.CharField(
        initial="60s",
        label="Misfire grace",
        help_text="How late an occurrence may start before the misfire policy applies.",
    )
    # Not named after the model's columns (seconds, as floats): the ModelForm would write the
    # text into them. The store writes them, from the built Schedule.
    jitter_duration = forms.CharField(
        required=False,
        initial="0s",
        label="Jitter",
        help_text="Send each occurrence up to this long after its instant (30s, 5m): an offset "
        "derived from the name and the instant, the same on every scheduler; the idempotency "
        "key stays the instant. 0: at the instant.",
    )
    max_runtime_duration = forms.CharField(
        required=False,
        label="Max runtime",
        help_text="With overlap skip or buffer one: how long after its submission a run still "
        "counts as running when its worker never reports its end (1h). Required then.",
    )

    class Meta:
        model = ScheduleRow
        fields = [
            "name",
            "task",
            "timezone",
            "args",
            "kwargs",
            *ROUTING_FIELDS,
            "misfire_policy",
            "catch_up_limit",
            "start_at",
            "end_at",
            "enabled",
            "description",
            "overlap",
            "pause_on_failure",
        ]
        help_texts = {
            "task": "The task's name: a Django Task's or function's dotted path, a Celery "
            "task's registered name, a Dramatiq actor's name. The tasks this project is known "
            "to have are offered as you type.",
            "timezone": "The IANA zone a cron expression reads wall-clock time in (for a "
            "one-off, the zone an instant without an offset is read in).",
            "args": 'A JSON array, e.g. [42, "x"].',
            "kwargs": 'A JSON object, e.g. {"user_id": 42}.',
            "expires": (
                "Seconds after which the backend drops the task unrun, counted from submission "
                "(from the scheduled instant when the submitter has expires_from='scheduled')."
            ),
            "headers": (
                "A JSON object: message headers (Celery); message options such as max_retries, "
                "time_limit (Dramatiq); job options job_timeout, result_ttl, failure_ttl, "
                "retry, at_front, and job.meta entries (RQ)."
            ),
            "overlap": (
                "An occurrence due while the previous run still runs (as the backend reports "
                "it): allow it, skip it, or let one wait for the run to end (buffer one)."
            ),
            "pause_on_failure": (
                "Pause the schedule after this many failed runs in a row (as the backend "
                "reports them). Empty: never."
            ),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schedule: Schedule | None = None
        instance = self.instance
        from goatbeat.django import conf

        self.stored: Schedule | None = None
        """The stored schedule being edited (None when adding, or for a damaged row)."""
        if instance.pk is None:
            self.fields["timezone"].initial = conf.get().core.timezone
            self.fields["misfire_policy"].initial = MisfirePolicy.RUN_ONCE.value
        else:
            stored = instance.read()
            self.stored = stored if isinstance(stored, Schedule) else None
            # The stored row may be damaged: show what can be shown, so it can be repaired.
            spec = instance.trigger if isinstance(instance.trigger, dict) else {}
            self.initial.update(trigger_initial(spec))
            if spec.get("kind") == CELERY_CRONTAB[0]:
                field = self.fields["trigger_kind"]
                field.choices = [*TRIGGER_KINDS, CELERY_CRONTAB]
            self.initial["grace"] = _duration_text(instance.misfire_grace)
            self.initial["jitter_duration"] = _duration_text(instance.jitter)
            if instance.max_runtime is not None:
                self.initial["max_runtime_duration"] = _duration_text(instance.max_runtime)
        self.fields["trigger_kind"].widget.attrs["data-kind-fields"] = json.dumps(KIND_FIELDS)
        self.fields["task"].widget = task_input = TaskInput(self.fields["task"].widget.attrs)
        task_input.tasks = _known_tasks()
        for name in ("args", "kwargs", "headers", "overlap"):
            if name in self.fields:
                self.fields[name].required = False

    def clean(self) -> dict[str, Any]:
        """Every mistake of the submit at once: the fields Django cleans (JSON, numbers),
        then each part goatbeat checks on its own (the trigger, each duration, the task
        against the allow-list, the name), then, only when all of those hold, the whole
        schedule and the backend's own checks."""
        cleaned: dict[str, Any] = super().clean()
        problems: list[InvalidValue] = []
        self.schedule = self.build(cleaned, problems)
        task = (cleaned.get("task") or "").strip()
        from goatbeat.django.registry import get_registry

        registry = get_registry()
        allowed = False
        if task:
            try:
                # Only a known task (allow-list), checked before anything could import it.
                registry.check_task(task)
                allowed = True
            except InvalidValue as exc:
                problems.append(exc)
        name = cleaned.get("name") if "name" in self.fields else None
        if name:
            try:
                self.check_name(name)
            except InvalidValue as exc:
                problems.append(exc)
        if self.schedule is not None and allowed and not problems and not self.errors:
            try:
                # The backend's own checks, as for a code declaration (task found, options).
                registry.submitter.validate(self.schedule)
            except InvalidValue as exc:
                problems.append(exc)
        for problem in problems:
            self.add_invalid(problem)
        if problems or self.errors:
            self.schedule = None
        return cleaned

    def add_invalid(self, exc: InvalidValue) -> None:
        target = FIELD_FOR.get(exc.field, exc.field)
        if target in self.errors:
            return  # Django's own error on that field says it already
        if target in self.fields and target not in self.readonly:
            self.add_error(target, ValidationError(exc.reason))
        else:
            self.add_error(None, ValidationError(str(exc)))

    @property
    def readonly(self) -> set[str]:
        return set(getattr(self, "_readonly", set()))

    def check_name(self, name: str) -> None:
        if self.instance.pk is not None:
            return
        from goatbeat.django.registry import get_store

        try:
            get_store().get(name)
        except ScheduleNotFound:
            return
        raise InvalidValue("name", name, f"a schedule named {name!r} already exists")

    def build(self, data: dict[str, Any], problems: list[InvalidValue]) -> Schedule | None:
        """The core Schedule the form describes; None when a part of it is invalid, each
        part's InvalidValue (naming its field) appended to ``problems``, so that one submit
        reports them all.

        Editing a stored schedule, a field the user did not change keeps its stored value,
        and a trigger none of whose fields changed is the stored trigger, unchanged."""

        def part(make: Any) -> Any:
            try:
                return make()
            except InvalidValue as exc:
                problems.append(exc)
                return None

        before = len(problems)
        instance = self.instance
        stored = self.stored
        changed = set(self.changed_data)

        def kept(*fields: str) -> bool:
            return stored is not None and not changed.intersection(fields)

        name = data.get("name") if "name" in self.fields else instance.name
        if stored is not None and not changed & TRIGGER_FIELDS:
            trigger = stored.trigger
        else:
            trigger = part(lambda: self.build_trigger(data))
        args = data.get("args")
        kwargs = data.get("kwargs")
        headers = data.get("headers")
        source = Source.ADMIN if instance.pk is None else Source(instance.source)
        routing = Routing(
            queue=data.get("queue") or None,
            exchange=data.get("exchange") or None,
            routing_key=data.get("routing_key") or None,
            priority=data.get("priority"),
            expires=data.get("expires"),
            headers={} if headers is None else headers,
        )
        values: dict[str, Any] = {
            "task": (data.get("task") or "").strip(),
            "args": [] if args is None else args,
            "kwargs": {} if kwargs is None else kwargs,
            "misfire": data.get("misfire_policy") or MisfirePolicy.RUN_ONCE.value,
            "catch_up_limit": 100 if data.get("catch_up_limit") is None else data["catch_up_limit"],
            "start_at": data.get("start_at"),
            "end_at": data.get("end_at"),
            # One notion of one-off in the form: the one-off trigger. A stored row's
            # django-celery-beat one_off flag is kept as it is (below), never set here.
            "one_off": False,
            "description": data.get("description") or "",
            "overlap": data.get("overlap") or OverlapPolicy.ALLOW.value,
            "pause_on_failure": data.get("pause_on_failure"),
        }
        if stored is not None:
            for field, attr in _SAME_FIELDS.items():
                if kept(field):
                    values[attr] = getattr(stored, attr)
            routing = Routing(
                **{
                    key: getattr(stored.routing if kept(key) else routing, key)
                    for key in ROUTING_FIELDS
                }
            )
        if kept("grace"):
            assert stored is not None
            grace = stored.misfire_grace
        else:
            grace = part(lambda: parse_duration(data.get("grace") or "60s", field="misfire_grace"))
        if kept("jitter_duration"):
            assert stored is not None
            values["jitter"] = stored.jitter
        else:
            values["jitter"] = part(
                lambda: parse_duration(data.get("jitter_duration") or "0", field="jitter")
            )
        if kept("max_runtime_duration"):
            assert stored is not None
            values["max_runtime"] = stored.max_runtime
        else:
            text = (data.get("max_runtime_duration") or "").strip()
            values["max_runtime"] = (
                part(lambda: parse_duration(text, field="max_runtime")) if text else None
            )
        if len(problems) > before or self.errors:
            return None  # the whole schedule's rules are checked once its parts hold
        built: Schedule | None = part(
            lambda: Schedule(
                name=name or "",
                trigger=trigger,
                routing=routing,
                misfire_grace=grace,
                source=source,
                enabled=bool(data.get("enabled")),
                **values,
            )
        )
        return built

    def build_trigger(self, data: dict[str, Any]) -> Trigger:
        """The trigger the kind's fields describe (InvalidValue naming the field)."""
        kind = data.get("trigger_kind") or "cron"
        zone = data.get("timezone") or "UTC"
        stored = self.stored.trigger if self.stored is not None else None
        if kind in ("cron", CELERY_CRONTAB[0]):
            cron = (data.get("cron") or "").strip()
            if not cron:
                raise InvalidValue("cron", cron, "enter a cron expression")
            if kind == "cron":
                return build_trigger(cron=cron, timezone=zone)
            get_zone(zone, "timezone")
            return CeleryCrontabTrigger(cron, timezone=zone)
        if kind == "interval":
            every = (data.get("every") or "").strip()
            if not every:
                raise InvalidValue("every", every, "enter an interval such as 5m")
            anchor_text = (data.get("anchor") or "").strip()
            # Elapsed time knows no zone: an anchor without an offset is UTC.
            anchor = _instant("anchor", anchor_text, "UTC") if anchor_text else None
            subsecond = isinstance(stored, IntervalTrigger) and stored.allow_subsecond
            return IntervalTrigger(every, anchor=anchor, allow_subsecond=subsecond)
        if kind == "once":
            at = (data.get("at") or "").strip()
            if not at:
                raise InvalidValue("at", at, "enter the instant it fires")
            once = OnceTrigger(_instant("at", at, zone))
            from django.utils import timezone

            if once.at <= timezone.now():
                # It would never fire: say so rather than save a schedule that does nothing.
                raise InvalidValue("at", at, f"{at!r} is already past; enter a future instant")
            return once
        if kind == "solar":
            missing = [
                field
                for field, key in (
                    ("solar_event", "event"),
                    ("latitude", "latitude"),
                    ("longitude", "longitude"),
                )
                if data.get(field) in (None, "")
            ]
            if missing:
                raise InvalidValue(
                    {"solar_event": "event"}.get(missing[0], missing[0]),
                    None,
                    "required for a solar trigger",
                )
            return SolarTrigger(
                event=data["solar_event"], latitude=data["latitude"], longitude=data["longitude"]
            )
        raise InvalidValue("trigger_kind", kind, f"{kind!r} is not a trigger kind")

    def save(self, commit: bool = True) -> ScheduleRow:
        # The admin saves through the store (GoatbeatScheduleAdmin.save_model), never the ORM.
        instance: ScheduleRow = self.instance
        return instance


class EnabledOnlyForm(forms.ModelForm):  # type: ignore[misc]
    """Code schedules: their definition lives in code; only ``enabled`` may change here."""

    class Meta:
        model = ScheduleRow
        fields = ["enabled"]

    schedule: Schedule | None = None

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean()
        if cleaned.get("enabled") and self.instance.pk is not None:
            stored = self.instance.read()
            if isinstance(stored, DamagedSchedule):
                self.add_error(
                    "enabled",
                    ValidationError(
                        f"the stored row is damaged ({stored.describe()}): it runs again once "
                        "its code is redeployed (the publish rewrites it); it can be disabled"
                    ),
                )
        return cleaned

    def save(self, commit: bool = True) -> ScheduleRow:
        instance: ScheduleRow = self.instance
        return instance


_SAME_FIELDS = {
    "task": "task",
    "args": "args",
    "kwargs": "kwargs",
    "misfire_policy": "misfire",
    "catch_up_limit": "catch_up_limit",
    "start_at": "start_at",
    "end_at": "end_at",
    "one_off": "one_off",
    "description": "description",
    "overlap": "overlap",
    "pause_on_failure": "pause_on_failure",
}
"""Form field -> Schedule attribute, for the fields kept as stored while unchanged."""


def trigger_initial(spec: Any) -> dict[str, Any]:
    """The form's trigger fields for a stored trigger spec (as far as a damaged one allows)."""
    if not isinstance(spec, dict):
        return {}
    kind = spec.get("kind")
    if kind in ("cron", CELERY_CRONTAB[0]):
        return {"trigger_kind": kind, "cron": str(spec.get("expression", ""))}
    if kind == "interval":
        anchor = spec.get("anchor")
        return {
            "trigger_kind": "interval",
            "every": _duration_text(spec.get("every")),
            "anchor": "" if anchor is None else str(anchor),
        }
    if kind == "once":
        return {"trigger_kind": "once", "at": str(spec.get("at", ""))}
    if kind == "solar":
        return {
            "trigger_kind": "solar",
            "solar_event": spec.get("event"),
            "latitude": spec.get("latitude"),
            "longitude": spec.get("longitude"),
        }
    return {}


def _known_tasks() -> list[str]:
    from goatbeat.django import conf
    from goatbeat.django.known_tasks import known_tasks

    stored = ScheduleRow.objects.using(conf.get().database).values_list("task", flat=True)
    return known_tasks(stored=stored.distinct())


def _instant(field: str, text: str, zone: str) -> datetime:
    """An ISO-8601 instant; one without an offset is read in ``zone``."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidValue(
            field, text, f"{text!r} is not an ISO-8601 instant such as 2027-01-01T09:00:00+01:00"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=get_zone(zone, "timezone"))
    return parsed


def _duration_text(seconds: Any) -> str:
    try:
        return format_duration(timedelta(seconds=float(seconds)))
    except (TypeError, ValueError, OverflowError):
        return str(seconds)  # a damaged value: shown as stored, refused on save


def describe_trigger(spec: Any, timezone: str | None = None) -> str:
    """A stored trigger in words, short (the stored spec itself when it cannot be read)."""
    try:
        return in_words(trigger_from_spec(spec), timezone or "UTC")
    except (InvalidValue, TypeError, ValueError):
        return str(spec)


def trigger_in_words(spec: Any, timezone: str | None = None) -> str:
    """A stored trigger in words for its page: an interval says what it is anchored on, a
    solar event its latitude and longitude, a one-off its instant in ``timezone`` and UTC."""
    try:
        trigger = trigger_from_spec(spec)
    except (InvalidValue, TypeError, ValueError):
        return f"{spec} (cannot be read)"
    words = in_words(trigger, timezone or "UTC")
    if isinstance(trigger, IntervalTrigger) and trigger.anchor is None:
        return f"{words}, aligned on the Unix epoch"
    if isinstance(trigger, IntervalTrigger):
        return f"{words}: fires at the anchor plus whole multiples of the period"
    if isinstance(trigger, SolarTrigger):
        return f"{words} (latitude {trigger.latitude:g}, longitude {trigger.longitude:g})"
    return words


class PauseForm(forms.Form):  # type: ignore[misc]
    """The note a pause records (the admin's *Pause* page)."""

    note = forms.CharField(
        required=False,
        max_length=2000,
        label="Note",
        widget=forms.TextInput(attrs={"size": 60, "placeholder": "incident 42"}),
        help_text="Why it is paused: shown in the list, on its page and by `schedule list`.",
    )


class BackfillForm(forms.Form):  # type: ignore[misc]
    """A backfill's range (the admin's *Backfill* page)."""

    start = forms.CharField(
        label="From",
        help_text="The first instant, included (ISO 8601 with an offset: 2026-11-01T00:00Z).",
    )
    end = forms.CharField(
        label="To", help_text="The end of the range, excluded; not later than now."
    )
    limit = forms.IntegerField(
        initial=100, min_value=1, max_value=100_000, label="Limit", help_text="The most instants."
    )

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean()
        for name in ("start", "end"):
            text = cleaned.get(name)
            if text:
                try:
                    cleaned[name] = _instant(name, str(text).strip(), "UTC")
                except InvalidValue as exc:
                    self.add_error(name, ValidationError(exc.reason))
        return cleaned
