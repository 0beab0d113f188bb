"""The admin's schedule form: every value validated by the same core types as code declarations.

``clean()`` builds a core :class:`~goatbeat.core.model.Schedule` exactly as ``beat.schedule()``
does (same trigger builder, same Routing, same submitter validation) and shows each
:class:`~goatbeat.core.errors.InvalidValue` on the field it names. The admin then saves the
built schedule through the store, never with ``Model.save()``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from goatbeat.beat import build_trigger
from goatbeat.core.durations import format_duration, parse_duration
from goatbeat.core.errors import InvalidValue, ScheduleNotFound
from goatbeat.core.model import MisfirePolicy, Routing, Schedule, Source
from goatbeat.core.triggers import trigger_from_spec
from goatbeat.django.models import Schedule as ScheduleRow

__all__ = ["ScheduleForm", "EnabledOnlyForm", "FIELD_FOR", "ROUTING_FIELDS"]

TRIGGER_KINDS = [("cron", "cron expression"), ("interval", "interval")]

FIELD_FOR = {
    "cron": "cron",
    "expression": "cron",
    "every": "every",
    "interval": "every",
    "timezone": "timezone",
    "misfire": "misfire_policy",
    "misfire_policy": "misfire_policy",
    "misfire_grace": "grace",
}
"""InvalidValue.field -> form field, where the names differ (others map to themselves)."""

ROUTING_FIELDS = ("queue", "exchange", "routing_key", "priority", "expires", "headers")
"""The schedule columns that make up its :class:`~goatbeat.core.model.Routing`, in form order."""


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
    grace = forms.CharField(
        initial="60s",
        label="Misfire grace",
        help_text="How late an occurrence may start before the misfire policy applies.",
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
            "one_off",
            "enabled",
            "description",
        ]
        help_texts = {
            "task": "The dotted path of the task (a Django Task, Celery task, actor or function).",
            "timezone": "The IANA zone a cron expression reads wall-clock time in.",
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
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schedule: Schedule | None = None
        instance = self.instance
        from goatbeat.django import conf

        if instance.pk is None:
            self.fields["timezone"].initial = conf.get().core.timezone
            self.fields["misfire_policy"].initial = MisfirePolicy.RUN_ONCE.value
        else:
            spec = dict(instance.trigger or {})
            kind = spec.get("kind")
            if kind == "cron":
                self.initial.update(trigger_kind="cron", cron=spec.get("expression", ""))
            elif kind == "interval":
                every = timedelta(seconds=float(spec.get("every", 0)))
                self.initial.update(trigger_kind="interval", every=format_duration(every))
            self.initial["grace"] = format_duration(
                timedelta(seconds=float(instance.misfire_grace))
            )
        for name in ("args", "kwargs", "headers"):
            if name in self.fields:
                self.fields[name].required = False

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean()
        if self.errors:
            return cleaned
        try:
            self.schedule = self.build(cleaned)
            self.check_name(self.schedule.name)
            from goatbeat.django.registry import get_registry

            registry = get_registry()
            # Only a known task (allow-list), checked before anything could import the name.
            registry.check_task(self.schedule.task)
            # The backend's own checks, as for a code declaration (task found, options honoured).
            registry.submitter.validate(self.schedule)
        except InvalidValue as exc:
            self.schedule = None
            self.add_invalid(exc)
        return cleaned

    def add_invalid(self, exc: InvalidValue) -> None:
        target = FIELD_FOR.get(exc.field, exc.field)
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

    def build(self, data: dict[str, Any]) -> Schedule:
        """The core Schedule the form describes (raises InvalidValue naming the field)."""
        instance = self.instance
        name = data.get("name") if "name" in self.fields else instance.name
        kind = data.get("trigger_kind") or "cron"
        zone = data.get("timezone") or "UTC"
        cron = (data.get("cron") or "").strip()
        every = (data.get("every") or "").strip()
        if kind == "cron":
            if not cron:
                raise InvalidValue("cron", cron, "enter a cron expression")
            trigger = build_trigger(cron=cron, timezone=zone)
        else:
            if not every:
                raise InvalidValue("every", every, "enter an interval such as 5m")
            trigger = build_trigger(every=every)
        args = data.get("args")
        kwargs = data.get("kwargs")
        headers = data.get("headers")
        source = Source.ADMIN if instance.pk is None else Source(instance.source)
        return Schedule(
            name=name or "",
            task=(data.get("task") or "").strip(),
            trigger=trigger,
            args=[] if args is None else args,
            kwargs={} if kwargs is None else kwargs,
            routing=Routing(
                queue=data.get("queue") or None,
                exchange=data.get("exchange") or None,
                routing_key=data.get("routing_key") or None,
                priority=data.get("priority"),
                expires=data.get("expires"),
                headers={} if headers is None else headers,
            ),
            misfire=data.get("misfire_policy") or MisfirePolicy.RUN_ONCE.value,  # type: ignore[arg-type]
            misfire_grace=parse_duration(data.get("grace") or "60s", field="misfire_grace"),
            catch_up_limit=data.get("catch_up_limit") or 100,
            start_at=data.get("start_at"),
            end_at=data.get("end_at"),
            one_off=bool(data.get("one_off")),
            description=data.get("description") or "",
            source=source,
            enabled=bool(data.get("enabled")),
        )

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

    def save(self, commit: bool = True) -> ScheduleRow:
        instance: ScheduleRow = self.instance
        return instance


def describe_trigger(spec: Any, timezone: str | None = None) -> str:
    try:
        return trigger_from_spec(spec).describe()
    except (InvalidValue, TypeError, ValueError):
        return str(spec)
