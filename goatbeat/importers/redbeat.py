"""Read celery-redbeat's Redis keys as source entries.

celery-redbeat (``redbeat.RedBeatScheduler``) keeps each entry in a Redis hash at
``<key_prefix><name>`` (``redbeat_key_prefix``, default ``redbeat:``) with two JSON fields:
``definition`` (``name``, ``task``, ``args``, ``kwargs``, ``options``, ``schedule``,
``enabled``) and ``meta`` (``last_run_at``, ``total_run_count``). The sorted set
``<key_prefix>:schedule`` lists the keys it runs (scored by the next due time), and the lock
``<key_prefix>:lock`` (``redbeat_lock_key``) is held by the one beat that runs them.

The ``schedule`` and the datetimes are redbeat's own JSON (``{"__type__": "interval" |
"crontab" | "rrule" | "datetime", ...}``): they are decoded with redbeat's decoder, so they mean
what they mean to redbeat; without redbeat installed nothing is read (one error). The entry
then goes through the beat_schedule reader (:mod:`goatbeat.importers.celery_beat`): an interval
counts from ``meta.last_run_at``, a crontab is read in the Celery app's zone, the options are
routing, and the schedule is of source ``celery``.

Where redbeat loses information, goatbeat refuses rather than guess: its encoder stores a
custom schedule class (a ``schedule`` or ``crontab`` subclass) as its parent's fields, so an
entry of the app's ``beat_schedule`` declared with such a class fails here, naming it (entries
created at run time carry no class to check: redbeat itself runs what Redis holds). Its
``rrule`` schedule has no goatbeat equivalent and fails; it cannot store a ``solar`` at all.

:func:`hand_back` writes goatbeat's last runs into the entries' ``meta`` for a rollback
(``goatbeat export_last_runs --to-redbeat``). The commands live with the CLI, in
:mod:`goatbeat.cli.migration` (``goatbeat import redbeat``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from goatbeat.conversion import UnsupportedSchedule, describe_exception, timing_overrides
from goatbeat.conversion import to_trigger as _to_trigger
from goatbeat.core.errors import InvalidValue, StoreError
from goatbeat.core.model import Source
from goatbeat.core.timeutil import get_zone
from goatbeat.importers.celery_beat import read_entry
from goatbeat.importers.django_celery_beat import HandBack
from goatbeat.importers.entries import SourceEntry, celery_instant
from goatbeat.stores import redact_url

__all__ = [
    "DEFAULT_KEY_PREFIX",
    "RedbeatConfig",
    "RedbeatRead",
    "config_of",
    "hand_back",
    "read_redbeat",
]

DEFAULT_KEY_PREFIX = "redbeat:"
_DEFINITION_KEYS = {"name", "task", "args", "kwargs", "options", "schedule", "enabled"}


@dataclass(frozen=True, slots=True)
class RedbeatConfig:
    """Where a redbeat deployment keeps its keys (redbeat's ``RedBeatConfig``)."""

    key_prefix: str = DEFAULT_KEY_PREFIX
    redis_url: str | None = None
    lock_key: str | None = None  # None: redbeat runs without a lock (redbeat_lock_key=None)

    @property
    def schedule_key(self) -> str:
        return self.key_prefix + ":schedule"

    @staticmethod
    def default_lock(key_prefix: str) -> str:
        return key_prefix + ":lock"


@dataclass(slots=True)
class RedbeatRead:
    """What :func:`read_redbeat` found: the entries, and lines about the rest."""

    entries: list[SourceEntry] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    lock_ttl: float | None = None
    """Seconds the lock is still held (a redbeat beat runs, or died less than its lock timeout
    ago); None when it is free or there is no lock."""


def _decoder() -> Any:
    try:
        from redbeat.decoder import RedBeatJSONDecoder
    except ImportError:
        raise InvalidValue(
            "redbeat",
            None,
            "celery-redbeat is not installed here: goatbeat decodes redbeat's schedules with "
            "redbeat's own decoder (pip install celery-redbeat, the version your beat runs)",
        ) from None
    return RedBeatJSONDecoder


def config_of(app: Any, key_prefix: str | None = None) -> RedbeatConfig:
    """The redbeat settings of a Celery app (``redbeat_key_prefix``, ``redbeat_redis_url``,
    ``redbeat_lock_key``), read by redbeat itself; ``key_prefix`` overrides the app's."""
    import logging
    import warnings

    _decoder()  # the same refusal without redbeat
    from redbeat.schedulers import RedBeatConfig

    quiet = logging.getLogger("celery.beat")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its "stop falling back to broker_url" warning, twice
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conf = RedBeatConfig(app)
    except Exception as exc:  # the app's configuration, whatever redbeat makes of it
        raise InvalidValue(
            "app", app, f"redbeat cannot read the app's settings: {describe_exception(exc)}"
        ) from None
    finally:
        quiet.setLevel(level)
    prefix = key_prefix if key_prefix is not None else str(conf.key_prefix)
    lock = conf.lock_key
    if key_prefix is not None and lock == RedbeatConfig.default_lock(str(conf.key_prefix)):
        lock = RedbeatConfig.default_lock(prefix)
    return RedbeatConfig(
        key_prefix=prefix,
        redis_url=str(conf.redis_url) if conf.redis_url else None,
        lock_key=str(lock) if lock else None,
    )


def _client(url: str) -> Any:
    import redis

    try:
        return redis.Redis.from_url(url, decode_responses=True)
    except ValueError as exc:
        raise InvalidValue(
            "redis", redact_url(url), f"{redact_url(url)!r}: {exc} (redis:// or rediss://)"
        ) from None


def read_redbeat(
    client_or_url: Any,
    *,
    config: RedbeatConfig | None = None,
    timezone: str = "UTC",
    timezone_given: bool = True,
    known_tasks: Collection[str] | None = None,
    beat_schedule: Mapping[str, Any] | None = None,
) -> RedbeatRead:
    """Every entry redbeat schedules (the members of ``<key_prefix>:schedule``) as a source
    entry of source ``celery``, ordered by name.

    ``client_or_url``: a ``redis://`` URL or a redis-py client. ``timezone``: the Celery app's
    zone, which redbeat reads crontabs in; with ``timezone_given`` False (no app, no zone
    given) a crontab whose last run redbeat stamped in another zone fails, naming that zone.
    ``known_tasks``: when given, an entry naming another task fails. ``beat_schedule``: the
    app's, to refuse the entries declared there with a custom schedule class (redbeat keeps
    only the parent's fields). Raises ``StoreError`` when Redis cannot be read; a bad entry
    never raises."""
    decoder = _decoder()
    conf = config or RedbeatConfig()
    if isinstance(client_or_url, str):
        client = _client(client_or_url)
        label = redact_url(client_or_url)
        try:
            return _read(client, label, conf, decoder, timezone, timezone_given, known_tasks,
                         beat_schedule)  # fmt: skip
        finally:
            client.close()
    label = "the given Redis client"
    return _read(
        client_or_url, label, conf, decoder, timezone, timezone_given, known_tasks, beat_schedule
    )


def _read(
    client: Any,
    label: str,
    conf: RedbeatConfig,
    decoder: Any,
    zone: str,
    zone_given: bool,
    tasks: Collection[str] | None,
    beat_schedule: Mapping[str, Any] | None,
) -> RedbeatRead:
    import redis

    out = RedbeatRead()
    try:
        members = client.zrange(conf.schedule_key, 0, -1, withscores=True)
        pipe = client.pipeline(transaction=False)
        for key, _ in members:
            pipe.hmget(key, "definition", "meta")
        values = pipe.execute()
        ttl = client.pttl(conf.lock_key) if conf.lock_key else -2
    except redis.RedisError as exc:
        raise StoreError(f"cannot read redbeat's keys in {label}: {exc}") from None
    try:
        hashes = {str(k) for k in client.scan_iter(match=_glob(conf.key_prefix), _type="HASH")}
    except redis.ResponseError:  # SCAN ... TYPE needs Redis 6: the keys listed are enough
        hashes = set()
    listed = {str(key) for key, _ in members}
    for (key, score), (definition, meta) in zip(members, values, strict=True):
        key = str(key)
        if definition is None:
            out.lines.append(
                f"{key}: listed in {conf.schedule_key} without a definition (redbeat drops it "
                "at its next tick): not imported"
            )
            continue
        entry = _entry(key, definition, meta, conf, decoder, zone, zone_given, tasks)
        if score < 0 and entry.ok:
            out.lines.append(
                f"{entry.name}: scored {score:g} in {conf.schedule_key} (no run left): not "
                "imported, redbeat never runs it again"
            )
            continue
        out.entries.append(_refuse_custom(entry, beat_schedule))
    for key in sorted(hashes - listed):
        if key in (conf.schedule_key, conf.lock_key):
            continue
        out.lines.append(
            f"{key}: a hash under the prefix that is not in {conf.schedule_key}: redbeat does "
            "not run it; not imported"
        )
    if conf.lock_key and ttl is not None and ttl >= 0:
        out.lock_ttl = ttl / 1000
        out.lines.append(
            f"the redbeat lock {conf.lock_key} is held ({ttl / 1000:.0f} s left): a redbeat beat "
            "runs, or died less than its lock timeout ago. Fine for a rehearsal; before the "
            "cutover import stop EVERY redbeat beat (a standby takes the lock over the moment "
            "the holder releases it)"
        )
    out.entries.sort(key=lambda e: e.name)
    out.lines.insert(
        0,
        f"{len(out.entries)} entries in redbeat's {conf.schedule_key} ({label})",
    )
    return out


def _glob(prefix: str) -> str:
    special = "*?[]\\"
    return "".join("\\" + c if c in special else c for c in prefix) + "*"


def _entry(
    key: str,
    raw_definition: str,
    raw_meta: str | None,
    conf: RedbeatConfig,
    decoder: Any,
    zone: str,
    zone_given: bool,
    tasks: Collection[str] | None,
) -> SourceEntry:
    name = key[len(conf.key_prefix) :] if key.startswith(conf.key_prefix) else key

    def failed(reason: str, **extra: Any) -> SourceEntry:
        return SourceEntry(name=name, source=Source.CELERY, problem=reason, **extra)

    try:
        definition = json.loads(raw_definition, cls=decoder)
    except Exception as exc:  # redbeat's own decoder on whatever the key holds
        return failed(f"{key} definition: redbeat cannot decode it ({describe_exception(exc)})")
    if not isinstance(definition, dict):
        return failed(f"{key} definition is a {type(definition).__name__}, not an object")
    if isinstance(definition.get("name"), str) and definition["name"]:
        name = definition["name"]
    unknown = set(definition) - _DEFINITION_KEYS
    if unknown:
        return failed(f"{key} definition: unknown field(s) {sorted(unknown)}")
    enabled = definition.get("enabled", True)
    if not isinstance(enabled, bool):
        return failed(f"{key} definition: enabled is {enabled!r}, not true or false")
    try:
        meta = json.loads(raw_meta, cls=decoder) if raw_meta else {}
    except Exception as exc:
        return failed(f"{key} meta: redbeat cannot decode it ({describe_exception(exc)})")
    if not isinstance(meta, dict):
        return failed(f"{key} meta is a {type(meta).__name__}, not an object")
    stamp = meta.get("last_run_at")
    try:
        last_run_at = celery_instant(stamp, "last_run_at")
        count = int(meta.get("total_run_count") or 0)
    except (InvalidValue, TypeError, ValueError) as exc:
        return failed(f"{key} meta: {exc}")
    sched = definition.get("schedule")
    if isinstance(sched, dict):
        kind = sched.get("__type__")
        return failed(
            f"schedule of type {kind!r} is not one redbeat decodes (interval, crontab, rrule)"
            if kind
            else "the definition's schedule is no schedule redbeat knows"
        )
    if _is_rrule(sched):
        return failed(
            f"redbeat's rrule schedule ({sched!r}) has no goatbeat equivalent: express it as a "
            "crontab or an interval, or keep it on redbeat"
        )
    stamp_zone = getattr(getattr(stamp, "tzinfo", None), "key", None)
    if (
        not zone_given
        and _is_crontab(sched)
        and isinstance(stamp_zone, str)
        and stamp_zone not in (zone, "UTC", "Etc/UTC")
    ):
        return failed(
            f"redbeat stamped its last run in {stamp_zone} (the zone of the Celery app it ran), "
            f"and crontabs would be read in {zone}: pass --app MODULE:APP or --timezone "
            f"{stamp_zone}"
        )
    declared = {k: v for k, v in definition.items() if k not in ("name", "enabled")}
    for key, empty in (("args", ()), ("kwargs", {}), ("options", {})):
        if declared.get(key) is None:
            declared[key] = empty  # redbeat saves what the entry was given: null for none
    entry = read_entry(name, declared, timezone=zone, known_tasks=tasks, last_run_at=last_run_at)
    entry = replace(entry, enabled=enabled)
    if entry.schedule is None:
        return entry
    schedule = replace(entry.schedule, enabled=enabled, total_run_count=count)
    notes = list(entry.notes)
    if last_run_at is None and enabled:
        notes.append(
            "never ran under redbeat (meta has no last_run_at): redbeat would run it at once at "
            "its next tick; goatbeat runs it at its schedule's first instant after the import"
        )
    return replace(entry, schedule=schedule, notes=tuple(notes))


def _is_rrule(sched: Any) -> bool:
    cls = type(sched)
    return cls.__name__ == "rrule" and cls.__module__.startswith("redbeat")


def _is_crontab(sched: Any) -> bool:
    return any(c.__name__ == "crontab" for c in type(sched).__mro__)


def _refuse_custom(entry: SourceEntry, beat_schedule: Mapping[str, Any] | None) -> SourceEntry:
    """The entry, failed when the app's beat_schedule declares it with a custom schedule
    class: redbeat stored only its parent's fields (and runs it as the parent)."""
    if beat_schedule is None or entry.problem is not None:
        return entry
    declared = beat_schedule.get(entry.name)
    sched = declared.get("schedule") if isinstance(declared, Mapping) else None
    if sched is None or not timing_overrides(sched):
        return entry
    try:
        _to_trigger(sched)
    except UnsupportedSchedule as exc:
        reason = str(exc)
    else:  # pragma: no cover - timing_overrides always makes to_trigger refuse
        return entry
    return SourceEntry(
        name=entry.name,
        source=entry.source,
        problem=(
            f"{reason} (redbeat's encoder stored it in Redis as a plain "
            f"{type(entry.celery_schedule).__name__}, and redbeat runs it so)"
        ),
        task=entry.task,
        enabled=entry.enabled,
    )


# -- handing goatbeat's runs back (rollback) --------------------------------------------------


def hand_back(
    client_or_url: Any,
    runs: dict[str, tuple[datetime, int]],
    *,
    config: RedbeatConfig | None = None,
    timezone: str = "UTC",
    dry_run: bool = False,
) -> list[HandBack]:
    """Write goatbeat's last runs into redbeat's ``meta`` before rolling back, so redbeat does
    not run again what goatbeat ran (it counts an interval from ``meta.last_run_at``, and runs
    at once what is due since).

    ``runs``: name -> (goatbeat's last run, goatbeat's run count). Only entries redbeat has (a
    ``definition`` at ``<key_prefix><name>``) whose own ``last_run_at`` is earlier (or unset)
    change: ``meta`` becomes goatbeat's last run, stamped in ``timezone`` as redbeat stamps
    ``app.now()``, and the larger run count. The score in ``<key_prefix>:schedule`` is left: it
    is earlier than the new due time, so redbeat loads the entry at its first tick, finds it
    not due yet and moves it when it runs. Run it while every redbeat beat is stopped (a
    running one writes its own ``meta`` over these). Returns what changed (what would change
    with ``dry_run``). Raises ``StoreError`` when Redis cannot be read or written."""
    import redis

    decoder = _decoder()
    from redbeat.decoder import RedBeatJSONEncoder

    conf = config or RedbeatConfig()
    zone = get_zone(timezone, "timezone")
    client = _client(client_or_url) if isinstance(client_or_url, str) else client_or_url
    label = redact_url(client_or_url) if isinstance(client_or_url, str) else "Redis"
    changed: list[HandBack] = []
    try:
        names = sorted(runs)
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.hmget(conf.key_prefix + name, "definition", "meta")
        values = pipe.execute()
        write = client.pipeline(transaction=True)
        for name, (definition, raw_meta) in zip(names, values, strict=True):
            if definition is None:
                continue  # not one of redbeat's entries
            ours, our_count = runs[name]
            try:
                meta = json.loads(raw_meta, cls=decoder) if raw_meta else {}
                theirs = celery_instant(meta.get("last_run_at"), "last_run_at")
                count = int(meta.get("total_run_count") or 0)
            except Exception as exc:  # redbeat's decoder on whatever the key holds
                raise StoreError(
                    f"{conf.key_prefix}{name} meta: redbeat cannot decode it "
                    f"({describe_exception(exc)})"
                ) from None
            if theirs is not None and theirs >= ours:
                continue
            total = max(count, our_count)
            changed.append(HandBack(name, theirs, ours, total))
            stamp = ours.astimezone(zone)
            write.hset(
                conf.key_prefix + name,
                "meta",
                json.dumps(
                    {"last_run_at": stamp, "total_run_count": total}, cls=RedBeatJSONEncoder
                ),
            )
        if changed and not dry_run:
            write.execute()
    except redis.RedisError as exc:
        raise StoreError(f"cannot write redbeat's meta in {label}: {exc}") from None
    finally:
        if isinstance(client_or_url, str):
            client.close()
    return changed
