"""Settings: the keys of the ``GOATBEAT`` setting (Django) or ``goatbeat`` CLI options.

:func:`parse_settings` validates a mapping and reports EVERY problem at once in a
:class:`~goatbeat.core.errors.ConfigError`; unknown keys are errors; nothing falls back to a
default silently.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from goatbeat.core.alerts import redact_webhook, webhook_target
from goatbeat.core.allowlist import parse_patterns
from goatbeat.core.durations import parse_duration
from goatbeat.core.errors import ConfigError, InvalidValue, short_repr
from goatbeat.core.shards import MAX_SHARDS
from goatbeat.core.timeutil import get_zone

__all__ = ["Settings", "parse_settings", "default_scheduler_id", "KEYS", "MAX_CLAIM_AHEAD"]


def default_scheduler_id() -> str:
    """``host:pid:random``: unique per process, readable in logs."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


_DEFAULT_LEASE_TTL = timedelta(seconds=30)
_DEFAULT_LEASE_RENEW = timedelta(seconds=10)
MAX_CLAIM_AHEAD = timedelta(seconds=5)
"""The largest ``claim_ahead``; also how long a scheduler ever holds an occurrence back."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    database: str = "default"
    """Django: a PostgreSQL database alias. CLI: a URL (``sqlite:///goatbeat.db``, ``postgresql://...``)."""
    listen_database: str | None = None
    """Where a PostgreSQL scheduler LISTENs for wake-ups, when ``database`` goes through a
    transaction-pooling proxy such as PgBouncer (LISTEN is session state, which such a proxy
    does not keep): a ``postgresql://`` URL that reaches PostgreSQL directly (Django: a
    ``DATABASES`` alias or a URL). Only the LISTEN goes there; everything else, NOTIFY
    included, still uses ``database``. Setting it implies ``pooled``."""
    pooled: bool = False
    """``database`` goes through a transaction-pooling proxy (PgBouncer ``pool_mode =
    transaction``, pgcat, Supavisor...): never LISTEN on it. Without ``listen_database`` the
    scheduler then polls every ``poll_interval`` instead. (Django: defaults to the alias's
    ``DISABLE_SERVER_SIDE_CURSORS``.)"""
    poll_interval: timedelta = timedelta(seconds=1)
    """How often a ``pooled`` scheduler without ``listen_database`` wakes up to look for
    what a notification would have announced (run-now requests, edits, a released lease)."""
    timezone: str = "UTC"
    """Default zone of cron schedules that do not name one."""
    lease_ttl: timedelta = _DEFAULT_LEASE_TTL
    lease_renew_interval: timedelta = _DEFAULT_LEASE_RENEW
    max_sleep: timedelta = timedelta(seconds=60)
    claim_ahead: timedelta = timedelta(milliseconds=250)
    """How long before its instant an occurrence may be claimed. The claim's database work
    then happens while waiting; the occurrence is still submitted at its instant, never
    before. 0 claims only what is already due."""
    batch_size: int = 500
    shards: int = 1
    """How many shards the schedules are split into, each with its own lease: the live
    schedulers share them out (docs/scaling.md). 1 is the single leader; more needs
    PostgreSQL."""
    max_submit_retries: int = 5
    """Retries a failed submission gets even when its misfire grace is shorter; within the
    grace it is retried until the grace runs out (:mod:`goatbeat.core.submission`)."""
    scheduler_id: str = field(default_factory=default_scheduler_id)
    prune_on_publish: bool = False
    """Whether a scheduler, when it starts and publishes, also disables the code schedules
    the code no longer declares (as ``schedule prune``). Off by default. A replica of an
    older release prunes nothing (its publication is superseded: see ``release``), but code
    never published before and without a release number is taken for newer."""
    release: int | None = None
    """This deploy's release number: an integer that grows with each deploy (a CI build
    number, ``202612021530``). Code publications are ordered by it: a scheduler or command of
    a lower release never overwrites what a higher one published (docs/django.md,
    Deploying). Without it the order is the publications' own: code whose schedules were
    published before the current ones is older."""
    allowed_tasks: tuple[str, ...] = ()
    """Glob patterns of task names that admin, API and imported schedules may name besides
    the known tasks (:mod:`goatbeat.core.allowlist`)."""
    # Operations (docs/operations.md).
    alert_hook: str | None = None
    """Dotted path of a callable the leading scheduler calls with each
    :class:`~goatbeat.core.alerts.Alert` (``"myproj.alerts:page"``), from a thread of its own."""
    alert_webhook: str | None = field(default=None, repr=False)
    """An http(s) URL the leading scheduler POSTs each alert to, as JSON; ``user:password@``
    in it is sent as HTTP basic authentication. A secret (its path, query and credentials
    are shown as ``***`` wherever goatbeat shows it; not in the repr)."""
    alert_after_failures: int = 3
    """Alert when a schedule's workers report this many failures in a row."""
    overdue_after: timedelta = timedelta(minutes=10)
    """A schedule is overdue when its run due this long ago was not claimed, or (when its
    workers report completions) has not succeeded: the alert and the
    ``goatbeat_schedule_overdue`` metric."""
    lost_after: timedelta = timedelta(hours=1)
    """A run of a schedule with no ``max_runtime`` that has no final report this long after
    it started (or, of a schedule whose workers report, after its submission) is ended
    ``lost`` by the leading scheduler: a failure (docs/operations.md, "Run states")."""


KEYS = (
    "database",
    "listen_database",
    "pooled",
    "poll_interval",
    "timezone",
    "lease_ttl",
    "lease_renew_interval",
    "max_sleep",
    "claim_ahead",
    "batch_size",
    "shards",
    "max_submit_retries",
    "scheduler_id",
    "prune_on_publish",
    "release",
    "allowed_tasks",
    "alert_hook",
    "alert_webhook",
    "alert_after_failures",
    "overdue_after",
    "lost_after",
)


def _duration(
    minimum: timedelta, maximum: timedelta | None = None
) -> Callable[[str, Any], timedelta]:
    def parse(key: str, value: Any) -> timedelta:
        result = parse_duration(value, field=key)
        if result < minimum:
            raise InvalidValue(
                key, value, f"{short_repr(value)} is shorter than {minimum.total_seconds():g}s"
            )
        if maximum is not None and result > maximum:
            raise InvalidValue(
                key, value, f"{short_repr(value)} is longer than {maximum.total_seconds():g}s"
            )
        return result

    return parse


def _int_range(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidValue(key, value, f"{short_repr(value)} is not an integer")
        if not low <= value <= high:
            raise InvalidValue(key, value, f"{short_repr(value)} is out of range {low}..{high}")
        return value

    return parse


def _text(max_length: int) -> Callable[[str, Any], str]:
    def parse(key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise InvalidValue(key, value, f"{short_repr(value)} must be a non-empty string")
        if len(value) > max_length:
            raise InvalidValue(key, value, f"{short_repr(value)} is longer than {max_length}")
        return value

    return parse


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidValue(key, value, f"{short_repr(value)} is not True or False")
    return value


def _dotted(key: str, value: Any) -> str | None:
    # Only the spelling here: the core imports nothing; the app resolves it when it starts.
    if value is None:
        return None
    if not isinstance(value, str) or not _DOTTED.fullmatch(value) or not {".", ":"} & set(value):
        raise InvalidValue(
            key, value, f"{short_repr(value)} is not a dotted path such as 'myproj.alerts:page'"
        )
    return value


def _http_url(key: str, value: Any) -> str | None:
    """A webhook URL. Its path, query and credentials are secrets (a Slack webhook's token is
    its path): a message shows :func:`~goatbeat.core.alerts.redact_webhook`'s form only.
    ``user:password@`` is sent as HTTP basic authentication; one that cannot be is refused."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidValue(key, value, f"{short_repr(value)} is not an http:// or https:// URL")
    shown = short_repr(redact_webhook(value))
    if not value.startswith(("http://", "https://")):
        raise InvalidValue(key, shown, f"{shown} is not an http:// or https:// URL")
    if len(value) > 2000 or any(c.isspace() for c in value):
        raise InvalidValue(key, shown, f"{shown} is not a URL")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not one
        webhook_target(value)
    except ValueError as exc:
        raise InvalidValue(key, shown, f"{shown} cannot be used: {exc}") from None
    if not parts.hostname:
        raise InvalidValue(key, shown, f"{shown} names no host")
    return value


def _masked(url: str) -> str:
    """``url`` with its password replaced by ``***``: error messages end up in logs."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return url
    return url.replace(f":{password}@", ":***@", 1) if password else url


def _listen_database(key: str, value: Any) -> str | None:
    # A URL is checked here; a bare name is a Django DATABASES alias, which the Django app
    # checks (and a plain Python app refuses: it has no aliases).
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 2000:
        raise InvalidValue(
            key, value, f"{short_repr(value)} is not a postgresql:// URL or a DATABASES alias"
        )
    scheme, sep, _ = value.strip().partition("://")
    if sep and scheme.lower() not in ("postgresql", "postgres"):
        raise InvalidValue(
            key,
            _masked(value),
            f"{short_repr(_masked(value))} is not a postgresql:// URL: LISTEN needs a direct "
            "connection to PostgreSQL",
        )
    if not sep and not value.strip().isidentifier():
        raise InvalidValue(
            key, value, f"{short_repr(value)} is not a postgresql:// URL or a DATABASES alias"
        )
    return value.strip()


_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*)?")


def _timezone(key: str, value: Any) -> str:
    get_zone(value, key)
    return str(value)


def _release(key: str, value: Any) -> int | None:
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text.isascii() and text.isdigit():
        text = int(text)  # "²" is a digit to str.isdigit, not to int()
    if isinstance(text, bool) or not isinstance(text, int) or text < 0:
        raise InvalidValue(
            key,
            value,
            f"{short_repr(value)} is not a release number (a whole number that grows with "
            "each deploy, such as a CI build number)",
        )
    return text


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "database": _text(1000),
    "listen_database": _listen_database,
    "pooled": _flag,
    "poll_interval": _duration(timedelta(milliseconds=100), timedelta(minutes=10)),
    "timezone": _timezone,
    "lease_ttl": _duration(timedelta(seconds=1)),
    "lease_renew_interval": _duration(timedelta(milliseconds=100)),
    "max_sleep": _duration(timedelta(milliseconds=10)),
    "claim_ahead": _duration(timedelta(0), MAX_CLAIM_AHEAD),
    "batch_size": _int_range(1, 100_000),
    "shards": _int_range(1, MAX_SHARDS),
    "max_submit_retries": _int_range(0, 1000),
    # 255 (the lease holder's and heartbeat row's columns) less the suffix each start adds
    # (core.lease.new_instance: "#" and 8 hex digits).
    "scheduler_id": _text(246),
    "prune_on_publish": _flag,
    "release": _release,
    "allowed_tasks": parse_patterns,
    "alert_hook": _dotted,
    "alert_webhook": _http_url,
    "alert_after_failures": _int_range(1, 1000),
    "overdue_after": _duration(timedelta(seconds=1)),
    "lost_after": _duration(timedelta(seconds=1)),
}


def parse_settings(
    raw: Mapping[str, Any] | None, *, defaults: Mapping[str, Any] | None = None
) -> Settings:
    """Validate ``raw`` (every key optional) on top of ``defaults``; ConfigError lists all problems.

    Each problem reads ``"<key>: <reason>"``, e.g. ``"lease_ttl: 'abc' is not a duration such
    as '30s', '10m' or '1h30m'"``."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError([f"GOATBEAT must be a dict, not {type(raw).__name__}"])
    problems: list[str] = []
    values: dict[str, Any] = {}
    merged = {**dict(defaults or {}), **dict(raw)}
    # Keys may be anything hashable (a typo'd int, a tuple): sort by text, never by value.
    for key in sorted(set(merged) - set(KEYS), key=repr):
        label = key if isinstance(key, str) else repr(key)
        problems.append(f"{label}: unknown setting (known: {', '.join(KEYS)})")
    for key in KEYS:
        if key not in merged:
            continue
        try:
            values[key] = _PARSERS[key](key, merged[key])
        except InvalidValue as exc:
            problems.append(str(exc))
    # A slotted dataclass keeps no class-level defaults (``Settings.lease_ttl`` is a slot
    # descriptor), hence the module constants.
    ttl = values.get("lease_ttl", _DEFAULT_LEASE_TTL)
    renew = values.get("lease_renew_interval", _DEFAULT_LEASE_RENEW)
    lease_ok = not any(p.startswith(("lease_ttl:", "lease_renew_interval:")) for p in problems)
    if lease_ok and renew >= ttl:
        problems.append(
            f"lease_renew_interval: {renew.total_seconds():g}s must be below "
            f"lease_ttl {ttl.total_seconds():g}s"
        )
    if problems:
        raise ConfigError(problems)
    if values.get("listen_database"):
        values["pooled"] = True
    return Settings(**values)
