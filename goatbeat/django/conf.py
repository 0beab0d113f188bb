"""The ``GOATBEAT`` Django setting: validated once, every problem reported at once.

The core's :func:`~goatbeat.core.config.parse_settings` checks the shared keys; this module adds
what only makes sense inside Django: ``timezone`` defaults to ``TIME_ZONE``, ``database`` must
name a PostgreSQL alias of ``DATABASES``, and the Django-only ``submitter`` key pins one task
backend for every schedule instead of picking it from the task object.

Behind PgBouncer (transaction pooling): ``pooled`` defaults to the ``database`` alias's
``DISABLE_SERVER_SIDE_CURSORS`` (what Django's own docs ask for there), and
``listen_database`` may name another ``DATABASES`` alias (one that reaches PostgreSQL
directly) as well as a ``postgresql://`` URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from goatbeat.core.config import Settings, parse_settings
from goatbeat.core.errors import ConfigError
from goatbeat.django.versions import django_tasks_missing

__all__ = ["DjangoSettings", "SUBMITTERS", "load", "get", "reset"]

SUBMITTERS = ("django_tasks", "celery", "dramatiq", "rq", "inline")
"""Backends the ``submitter`` key may pin."""

_DJANGO_ONLY_KEYS = ("submitter", "submitter_options")
_DEFAULT_DATABASE = "database (GOATBEAT['database'], by default 'default')"
"""How a problem with the default alias is named when the project has no GOATBEAT setting."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DjangoSettings:
    core: Settings
    submitter: str | None = None
    """None: each schedule's backend follows its task object (Django Task, Celery task...)."""
    submitter_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Constructor options per backend: ``{"celery": {"app": "proj.celery:app"}}``."""

    @property
    def database(self) -> str:
        return self.core.database


def load(raw: Any = None) -> DjangoSettings:
    """Validate ``raw`` (default: ``settings.GOATBEAT``); ImproperlyConfigured lists every problem."""
    given = raw is not None or hasattr(django_settings, "GOATBEAT")
    if raw is None:
        raw = getattr(django_settings, "GOATBEAT", None) or {}
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(
            f"GOATBEAT setting is invalid:\n  - GOATBEAT must be a dict, not {type(raw).__name__}"
        )
    problems: list[str] = []
    core_raw = {k: v for k, v in raw.items() if k not in _DJANGO_ONLY_KEYS}
    zone = getattr(django_settings, "TIME_ZONE", None) or "UTC"
    core: Settings | None = None
    alias = raw.get("database", "default")
    defaults: dict[str, Any] = {"timezone": zone}
    databases = getattr(django_settings, "DATABASES", {}) or {}
    if isinstance(alias, str) and isinstance(databases.get(alias), Mapping):
        # Django needs DISABLE_SERVER_SIDE_CURSORS behind a transaction pooler: take it as
        # the hint that the alias is pooled, unless GOATBEAT says otherwise.
        defaults["pooled"] = bool(databases[alias].get("DISABLE_SERVER_SIDE_CURSORS", False))
    try:
        core = parse_settings(core_raw, defaults=defaults)
    except ConfigError as exc:
        problems.extend(exc.problems)
    submitter = raw.get("submitter")
    if submitter is not None and submitter not in SUBMITTERS:
        problems.append(f"submitter: {submitter!r} is not one of {', '.join(SUBMITTERS)}")
    missing = django_tasks_missing("'django_tasks'")
    if submitter == "django_tasks" and missing:
        problems.append(f"submitter: {missing}")
    options = raw.get("submitter_options", {})
    if not isinstance(options, Mapping) or not all(
        isinstance(v, Mapping) and k in SUBMITTERS for k, v in options.items()
    ):
        problems.append(
            f"submitter_options: {options!r} must map backend names ({', '.join(SUBMITTERS)}) "
            "to dicts of constructor options"
        )
        options = {}
    if "django_tasks" in options and missing:
        problems.append(f"submitter_options: {missing}")
    if isinstance(alias, str) and alias.strip():
        problem = _database_problem(alias, key="database" if given else _DEFAULT_DATABASE)
        if problem:
            problems.append(problem)
    if core is not None and core.pooled and isinstance(alias, str):
        problems.extend(_pooling_problems(alias))
    listen = raw.get("listen_database")
    if core is not None and core.listen_database and "://" not in core.listen_database:
        problem = _database_problem(core.listen_database, key="listen_database")
        if problem is None and core.listen_database == alias:
            problem = (
                f"listen_database: {listen!r} is the pooled database itself; name an alias "
                "(or a postgresql:// URL) that reaches PostgreSQL directly"
            )
        if problem:
            problems.append(problem)
    if problems or core is None:
        header = (
            "GOATBEAT setting is invalid:"
            if given
            else "goatbeat.django cannot start: there is no GOATBEAT setting, and its defaults "
            "do not fit this project:"
        )
        raise ImproperlyConfigured(header + "\n" + "\n".join(f"  - {p}" for p in problems))
    return DjangoSettings(
        core=core,
        submitter=submitter,
        submitter_options={k: dict(v) for k, v in options.items()},
    )


def _database_problem(alias: str, *, key: str = "database") -> str | None:
    databases = getattr(django_settings, "DATABASES", {}) or {}
    if alias not in databases:
        known = ", ".join(sorted(databases)) or "none"
        return f"{key}: {alias!r} is not a DATABASES alias (known: {known})"
    engine = str(databases[alias].get("ENGINE", ""))
    # The vendor, not the exact engine path, so PostGIS and other PostgreSQL-based engines pass.
    from django.db import connections

    vendor = getattr(connections[alias], "vendor", None)
    if vendor != "postgresql":
        return (
            f"{key}: {alias!r} uses {engine or 'no ENGINE'}; goatbeat needs PostgreSQL "
            "(django.db.backends.postgresql): its coordination relies on row locks and "
            "LISTEN/NOTIFY"
        )
    return None


def _pooling_problems(alias: str) -> list[str]:
    """What a pooled alias's OPTIONS would leave in a server session that PgBouncer (transaction
    mode) hands to the next client: prepared statements, and the role ``assume_role`` SETs."""
    databases = getattr(django_settings, "DATABASES", {}) or {}
    entry = databases.get(alias)
    options = entry.get("OPTIONS", {}) if isinstance(entry, Mapping) else {}
    if not isinstance(options, Mapping):
        return []
    problems = []
    threshold = options.get("prepare_threshold")
    if threshold is not None:
        problems.append(
            f"database: {alias!r} is pooled but OPTIONS['prepare_threshold'] is {threshold!r}: "
            "psycopg would prepare statements on server sessions PgBouncer gives to other "
            "clients; remove it (Django's default, None, prepares nothing)"
        )
    if options.get("assume_role"):
        problems.append(
            f"database: {alias!r} is pooled but OPTIONS['assume_role'] is "
            f"{options['assume_role']!r}: SET ROLE lasts for the server session, which "
            "PgBouncer gives to other clients; grant the login role what it needs instead"
        )
    return problems


_cached: DjangoSettings | None = None


def get() -> DjangoSettings:
    """The validated settings (validated at startup by the app config; cached)."""
    global _cached
    if _cached is None:
        _cached = load()
    return _cached


def reset() -> None:
    """Forget the cached settings (tests that change ``GOATBEAT`` with override_settings)."""
    global _cached
    _cached = None
