"""The TaskSubmitter contract: hand a claimed occurrence to a task backend.

One required method, :meth:`TaskSubmitter.submit`. Capability flags say which routing options
a backend can honour; :func:`check_supported` turns an unsupported option into an
:class:`~goatbeat.core.errors.UnsupportedOption` when the schedule is *published*, not at 3 a.m.

Errors a submitter raises::

    SubmitError
    ├── RetryableSubmitError   broker unreachable, timeout: the scheduler retries with backoff
    └── PermanentSubmitError   unknown task, unserialisable args: marked submit_failed at once

Any other exception is treated as retryable.

Optional capabilities are declared on :class:`BaseSubmitter`, each with the default that
means "not offered" (as Django's ``BaseTaskBackend`` declares ``supports_defer``); goatbeat's
submitters subclass it and override what they offer, and every caller reads a capability with
:func:`capability`, so a TaskSubmitter that does not subclass it (a test double, an older
submitter of a project's own) is read with the same defaults:

- ``concurrent_submits: int``: declares that :meth:`~TaskSubmitter.submit` may be called from
  threads other than the scheduler's, and how many calls may run at once. The scheduler then
  sends a full batch from a submission thread while it claims the next one, and with more than
  1 shares the batch between that many threads (the Celery submitter keeps a producer per
  thread). Without it (or 0), the submitter is only ever called from the scheduler's thread,
  one occurrence at a time. See :func:`submit_concurrency`.
- ``submit_many(occurrences) -> list[str | None | Exception]``: submit several occurrences at
  once (one broker round trip for the lot where the backend can pipeline), returning for each,
  in order, its task id or the exception its submission raised (a SubmitError subclass, as
  :meth:`~TaskSubmitter.submit` would raise). It must not raise for one occurrence's failure;
  if it raises anyway, every occurrence of the call counts as failed (retryable). The scheduler
  then calls it with up to :data:`SUBMIT_MANY_CHUNK` occurrences at a time instead of
  ``submit`` one by one. See :func:`many_submitter`.
- ``after_bookkeeping()``: called after the outcomes of a batch were recorded.
- ``awaits_bookkeeping() -> bool``: whether the batch just sent needs ``after_bookkeeping``
  (something finished inside the submission); without it, every batch does. A batch that does
  not may have its outcomes written by the claim that follows instead.
- ``prepare()``: open what the first submission needs (a broker connection) ahead of it.
  ``goatbeat scheduler`` calls it once from a thread while it publishes, so it must be safe
  alongside a submission; it must not raise (a failure is the first submission's to meet).
- ``backend_options: frozenset[str] | None``: the names of the backend's own per-schedule
  options (``Beat.schedule(options=...)``: RQ's ``job_timeout``, Dramatiq's ``max_retries``...),
  which travel with ``routing.headers`` and which ``validate`` checks; ``None`` takes any name.
  Without it, a schedule's ``options`` are refused at declaration.
- ``known_tasks() -> Collection[str] | None``: the task names the backend has registered
  (Celery's ``app.tasks``, the Dramatiq broker's actors, Django ``Task`` objects), found without
  importing what a schedule names; None (or no method): the backend keeps no registry (RQ).
  The allow-list (:mod:`goatbeat.core.allowlist`) counts them as known. See :func:`known_tasks`.
- ``task_definition(task: str) -> str``: for a backend that finds a task by importing its
  dotted path and walking attributes (inline, RQ's worker, Django Tasks): where the callable
  ``task`` resolves to is defined (:func:`goatbeat.core.allowlist.defined_at`, or what the
  backend's worker really runs), imported here; ``LookupError`` when it resolves to nothing
  that is defined anywhere. The allow-list admits a name an ``allowed_tasks`` pattern matches
  only when it spells that definition, so a pattern cannot be walked past to what a module
  imported. A backend that finds tasks by registered name (Celery, Dramatiq) has none: its
  names are checked as names. A submitter for a path-importing backend must provide it. See
  :func:`task_definition`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from goatbeat.core.errors import (
    PermanentSubmitError,
    RetryableSubmitError,
    SubmitError,
    UnsupportedOption,
)
from goatbeat.core.model import Occurrence, Schedule

if TYPE_CHECKING:
    from goatbeat.core.store import ScheduleStore

__all__ = [
    "awaits_bookkeeping",
    "BaseSubmitter",
    "capability",
    "TaskSubmitter",
    "check_supported",
    "submit_concurrency",
    "many_submitter",
    "submit_all",
    "known_tasks",
    "task_definition",
    "SubmitMany",
    "SUBMIT_MANY_CHUNK",
    "SubmitError",
    "RetryableSubmitError",
    "PermanentSubmitError",
]


@runtime_checkable
class TaskSubmitter(Protocol):
    name: ClassVar[str]
    """Short backend name for logs: ``"celery"``, ``"rq"``..."""

    supports_queue: ClassVar[bool]
    """Whether ``routing.queue`` is honoured."""
    supports_priority: ClassVar[bool]
    """Whether ``routing.priority`` is honoured."""
    supports_exchange: ClassVar[bool]
    """Whether ``routing.exchange`` and ``routing.routing_key`` are honoured (AMQP-style)."""
    supports_expires: ClassVar[bool]
    """Whether ``routing.expires`` is honoured."""
    supports_headers: ClassVar[bool]
    """Whether ``routing.headers`` are passed along."""

    def validate(self, schedule: Schedule) -> None:
        """Raise ``UnsupportedOption`` / ``InvalidSchedule`` if this backend cannot run
        ``schedule`` as declared (usually ``check_supported`` plus a task lookup)."""
        ...

    def submit(self, occurrence: Occurrence) -> str | None:
        """Hand the occurrence to the backend; return its task id. Must pass
        ``occurrence.idempotency_key`` along (as task id, job id or header) so a resubmission
        is recognisable. Raise a SubmitError subclass on failure."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...


class BaseSubmitter:
    """A base for submitters: every optional capability, declared with its default (what a
    submitter that does not offer it does). Subclasses set the flags they honour and define
    the methods they offer; :func:`capability` reads them, with these defaults for a
    submitter that does not subclass this class."""

    name: ClassVar[str] = "submitter"
    """Short backend name for logs: ``"celery"``, ``"rq"``..."""
    supports_queue: ClassVar[bool] = False
    """Whether ``routing.queue`` is honoured."""
    supports_priority: ClassVar[bool] = False
    """Whether ``routing.priority`` is honoured."""
    supports_exchange: ClassVar[bool] = False
    """Whether ``routing.exchange`` and ``routing.routing_key`` are honoured (AMQP-style)."""
    supports_expires: ClassVar[bool] = False
    """Whether ``routing.expires`` is honoured."""
    supports_headers: ClassVar[bool] = False
    """Whether ``routing.headers`` are passed along."""
    concurrent_submits: int = 0
    """How many ``submit`` calls may run at once from threads other than the scheduler's
    (0: only from the scheduler's thread, one at a time). See :func:`submit_concurrency`."""
    backend_options: frozenset[str] | None = frozenset()
    """The backend's own per-schedule option names (``Beat.schedule(options=...)``); None
    takes any name; empty (the default) takes none."""
    submit_many: SubmitMany | None = None
    """``submit_many(occurrences)``, when the backend sends several at once (a method in the
    subclass); None: one ``submit`` at a time. See :func:`many_submitter`."""
    task_definition: Callable[[str], str] | None = None
    """``task_definition(task)``, for a backend that imports dotted paths (a method in the
    subclass); None: it finds tasks by registered name. See :func:`task_definition`."""

    def known_tasks(self) -> Collection[str] | None:
        """The task names the backend registered; None: it keeps no registry."""
        return None

    def after_bookkeeping(self) -> None:
        """Called after the outcomes of a batch were recorded; nothing by default."""

    def awaits_bookkeeping(self) -> bool:
        """Whether the batch just sent needs :meth:`after_bookkeeping`: by default, when the
        submitter has one of its own."""
        hook = getattr(type(self), "after_bookkeeping", None)
        return hook is not None and hook is not BaseSubmitter.after_bookkeeping

    def prepare(self) -> None:
        """Open what the first submission needs ahead of it; nothing by default."""

    def bind(self, store: ScheduleStore) -> None:
        """Be told the store (a submitter that records through it); nothing by default."""

    def register(self, path: str, func: Callable[..., Any]) -> None:
        """Be told the callable declared under ``path``; nothing by default."""


_MISSING: Any = object()


def capability(submitter: object, name: str) -> Any:
    """``submitter``'s capability ``name`` (an attribute or bound method of
    :class:`BaseSubmitter`): its own declaration, else the base class's default (bound to it,
    for a method)."""
    found = getattr(submitter, name, _MISSING)
    if found is _MISSING:
        found = getattr(BaseSubmitter, name)
        if callable(found):
            found = found.__get__(submitter)
    return found


def check_supported(submitter: TaskSubmitter, schedule: Schedule) -> None:
    """Raise UnsupportedOption for the first routing option ``submitter`` cannot honour."""
    routing = schedule.routing
    checks = [
        ("queue", routing.queue is not None, submitter.supports_queue),
        ("priority", routing.priority is not None, submitter.supports_priority),
        ("exchange", routing.exchange is not None, submitter.supports_exchange),
        ("routing_key", routing.routing_key is not None, submitter.supports_exchange),
        ("expires", routing.expires is not None, submitter.supports_expires),
        ("headers", bool(routing.headers), submitter.supports_headers),
    ]
    for field_name, used, supported in checks:
        if used and not supported:
            value = getattr(routing, field_name)
            raise UnsupportedOption(
                field_name,
                value,
                f"schedule {schedule.name!r} sets {field_name}={value!r}, "
                f"which the {submitter.name} backend cannot honour",
            )


def submit_concurrency(submitter: object) -> int:
    """``submitter``'s ``concurrent_submits`` (>= 0); 0 when it declares none: call it from the
    scheduler's thread only."""
    value = capability(submitter, "concurrent_submits")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


SubmitMany = Callable[[Sequence[Occurrence]], Sequence["str | None | Exception"]]
"""The optional ``submit_many`` capability: occurrences in, one task id or exception each out."""

SUBMIT_MANY_CHUNK = 50
"""Occurrences per ``submit_many`` call. Small enough that the first messages of a burst reach
the broker within milliseconds (a chunk lands when it is complete), large enough that one round
trip serves many: on Redis, chunks of 50 measured within 10 % of chunks of 1,000."""


def awaits_bookkeeping(submitter: object) -> bool:
    """Whether the batch ``submitter`` just sent waits for its ``after_bookkeeping``: never
    without that hook; with it, as its ``awaits_bookkeeping()`` says, and always when it has
    none."""
    if not callable(capability(submitter, "after_bookkeeping")):
        return False
    return bool(capability(submitter, "awaits_bookkeeping")())


def many_submitter(submitter: object) -> SubmitMany | None:
    """``submitter``'s ``submit_many`` when it offers one, else None (submit one at a time)."""
    method = capability(submitter, "submit_many")
    return method if callable(method) else None


def known_tasks(submitter: object) -> Collection[str] | None:
    """The task names ``submitter``'s backend registered (its ``known_tasks()``), or None when
    it keeps no registry."""
    names: Collection[str] | None = capability(submitter, "known_tasks")()
    return names


def submit_all(
    submitter: TaskSubmitter, occurrences: Sequence[Occurrence]
) -> list[str | None | Exception]:
    """Submit ``occurrences`` (through ``submit_many`` when offered, else one by one) and
    answer, in order, each one's task id or the exception its submission raised. Never
    raises for a submission: a ``submit_many`` that raises, or answers for a different number
    of occurrences, fails every occurrence of the call."""
    many = many_submitter(submitter)
    if many is None:
        out: list[str | None | Exception] = []
        for occ in occurrences:
            try:
                out.append(submitter.submit(occ))
            except Exception as exc:  # reported for this occurrence; the others still go
                out.append(exc)
        return out
    try:
        answers = list(many(occurrences))
    except Exception as exc:  # the whole call failed
        return [exc] * len(occurrences)
    if len(answers) != len(occurrences):
        error = RuntimeError(
            f"submit_many returned {len(answers)} results for {len(occurrences)} occurrences"
        )
        return [error] * len(occurrences)
    return answers


def task_definition(submitter: object) -> Callable[[str], str] | None:
    """``submitter``'s ``task_definition`` when its backend imports dotted paths, else None (it
    finds tasks by registered name)."""
    method = capability(submitter, "task_definition")
    return method if callable(method) else None
