"""Submit occurrences to Dramatiq by actor name (a ``dramatiq.Message`` enqueued on the broker).

``Schedule.task`` is the *actor name* (Dramatiq's ``actor_name``, by default the function's
name), which is how Dramatiq workers find actors. Declaring an actor object
(``beat.schedule(task=tick, ...)``) stores its ``actor_name`` and, unless the schedule names a
queue, its ``queue_name``.

The broker: the project's, never a silent default. ``broker=`` is a ``dramatiq.Broker``, a Redis
URL, or ``"package.module"`` / ``"package.module:broker"`` as given to the ``dramatiq`` command
(the module is imported, so goatbeat knows the actors and queues the workers know). Without it,
the broker the process already set with ``dramatiq.set_broker()`` (the beat module imported the
actors); if there is none, the submitter refuses to start, naming the setting.

What goatbeat can check at declaration depends on what the broker knows:

- it knows the project's actors (a broker object or module): a string task must name one of
  them, and the queue (the schedule's, else the actor's) must be one the project declared — by
  an actor, or with ``broker.declare_queue()`` in the module the workers load. A Dramatiq worker
  consumes only the queues its broker declared (``--queues`` only narrows them), so a message
  sent anywhere else waits forever; that is refused when the schedule is declared;
- it knows none (a URL): neither can be checked; each queue is logged once as a warning
  (``submitter.unchecked``) saying so.

The idempotency key travels in the message options (``goatbeat_idempotency_key``,
``goatbeat_scheduled_at``; a task reads them through the ``CurrentMessage`` middleware), and the
message id is a UUID derived from the key, so a resubmission after a crash carries the same id.
Dramatiq itself does not de-duplicate: a worker that must run once keeps the ids it has seen.

What Dramatiq can honour, and how:

- ``queue``: the message goes to that queue (which the workers' broker must declare, see above);
- ``expires``: the ``max_age`` option (milliseconds) of the default ``AgeLimit`` middleware,
  counted from submission, or from the scheduled instant with ``expires_from="scheduled"``;
- ``headers``: merged into the message options, where middleware reads them. The per-message
  options Dramatiq's default middleware honours (``options=`` of ``Beat.schedule``) are checked:
  ``max_retries`` (an integer >= 0), ``time_limit``, ``min_backoff``, ``max_backoff``
  (milliseconds, integers >= 1) and ``on_success`` / ``on_failure`` / ``on_retry_exhausted``
  (actor names);
- ``priority``: not per message — Dramatiq priority is an actor setting, so it is refused;
- ``exchange`` / ``routing_key``: AMQP routing Dramatiq does not expose; refused.
"""

from __future__ import annotations

import importlib
import logging
import math
import re
import threading
import weakref
from collections.abc import Mapping
from typing import Any, ClassVar

from goatbeat.core.clock import Clock
from goatbeat.core.errors import (
    InvalidSchedule,
    InvalidValue,
    PermanentSubmitError,
    RetryableSubmitError,
    short_repr,
)
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.observability import log_event
from goatbeat.core.submit import BaseSubmitter, check_supported
from goatbeat.submitters._expiry import check_expires_from, clock_or_system, expires_left
from goatbeat.submitters._redis_bound import bound_redis_client
from goatbeat.submitters.keys import RESERVED_HEADERS, derived_uuid, key_headers

__all__ = ["DramatiqSubmitter", "BACKEND_OPTIONS"]

# The names dramatiq.Actor accepts; anything else is rejected by every Dramatiq worker.
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9._-]*")
# Options the brokers set themselves; a header of that name would corrupt delivery.
_BROKER_OPTIONS = frozenset({"redis_message_id", "eta", "max_age"})
# Per-message options of Dramatiq's default middleware (Retries, TimeLimit, Callbacks).
_COUNTS = frozenset({"max_retries"})
_MILLISECONDS = frozenset({"time_limit", "min_backoff", "max_backoff"})
_ACTOR_NAMES = frozenset({"on_success", "on_failure", "on_retry_exhausted"})
BACKEND_OPTIONS = _COUNTS | _MILLISECONDS | _ACTOR_NAMES
"""The per-schedule options (``Beat.schedule(options=...)``) the Dramatiq submitter takes."""

_NO_BROKER = (
    "no Dramatiq broker is configured, and goatbeat does not fall back to Dramatiq's default "
    "broker on localhost: set the submitter option 'broker' (submitter_options={'broker': ...} "
    "of Beat, GOATBEAT['submitter_options']['dramatiq']['broker'] in Django) to a Redis URL, "
    "to 'package.module' or 'package.module:broker' as given to the dramatiq command, or to a "
    "Broker; or import the module that calls dramatiq.set_broker() before goatbeat starts"
)

# Queues a goatbeat submitter declared on a broker only to send to them (the broker did not
# declare them itself): they say nothing about what the project's workers consume.
_declared_by_goatbeat: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_declared_lock = threading.Lock()


def _global_broker() -> Any:
    import dramatiq.broker

    # Read the variable, never dramatiq.get_broker(): that would create the default broker.
    return dramatiq.broker.global_broker


def _load_broker(broker: Any) -> tuple[Any, bool]:
    if broker is None:
        current = _global_broker()
        if current is None:
            raise InvalidValue("broker", None, _NO_BROKER)
        return current, False
    if not isinstance(broker, str):
        return broker, False
    if "://" not in broker:
        return _import_broker(broker), False
    from dramatiq.brokers.redis import RedisBroker

    # dramatiq's own annotations are partial; the broker is used duck-typed anyway.
    factory: Any = RedisBroker
    return factory(url=broker), True


def _import_broker(spec: str) -> Any:
    """The broker named as for the ``dramatiq`` command: ``module`` (the broker it sets) or
    ``module:attr`` (a Broker, or a callable that sets or returns one)."""
    from dramatiq import Broker

    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidValue(
            "broker", spec, f"{spec!r}: cannot import {module_name!r}: {exc}"
        ) from None
    if attr:
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part, _MISSING)
            if obj is _MISSING:
                raise InvalidValue(
                    "broker", spec, f"{spec!r}: module {module_name!r} has no attribute {attr!r}"
                )
        if isinstance(obj, Broker):
            return obj
        if not callable(obj):
            raise InvalidValue(
                "broker", spec, f"{spec!r} is a {type(obj).__name__}, not a dramatiq.Broker"
            )
        made = obj()
        if isinstance(made, Broker):
            return made
    current = _global_broker()
    if current is None:
        raise InvalidValue(
            "broker",
            spec,
            f"{spec!r}: importing it set no Dramatiq broker (dramatiq.set_broker); "
            f"name the broker itself ('{module_name}:broker')",
        )
    return current


_MISSING = object()


def _error_classes() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(retryable, permanent) exception classes of the installed dramatiq / redis."""
    from dramatiq import errors as dramatiq_errors

    # Renamed in dramatiq 2 (the old name warns); either way, the broker's connection error.
    broker_error = getattr(dramatiq_errors, "BrokerConnectionError", None)
    if broker_error is None:
        broker_error = dramatiq_errors.ConnectionError
    retryable: list[type[BaseException]] = [
        broker_error,
        ConnectionError,
        TimeoutError,
        OSError,
    ]
    try:
        from redis import exceptions as redis_exc
    except ImportError:  # a RabbitMQ project: dramatiq wraps pika's errors already
        pass
    else:
        retryable.append(redis_exc.RedisError)
    permanent: list[type[BaseException]] = [
        dramatiq_errors.QueueNotFound,
        TypeError,
        ValueError,
    ]
    return tuple(retryable), tuple(permanent)


class DramatiqSubmitter(BaseSubmitter):
    """Enqueue each occurrence as a Dramatiq message.

    ``broker``: a ``dramatiq.Broker``, a Redis URL (a ``RedisBroker`` is created and closed with
    the submitter), ``"package.module[:attr]"`` as for the ``dramatiq`` command, or ``None`` for
    the broker set with ``dramatiq.set_broker()`` (refused when there is none).
    ``default_queue`` is used when neither the schedule nor a declared actor names one.
    ``expires_from``: ``"submission"`` (default) or ``"scheduled"``, where ``expires`` counts
    from (see :mod:`goatbeat.submitters._expiry`).
    """

    name: ClassVar[str] = "dramatiq"
    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = False
    supports_exchange: ClassVar[bool] = False
    supports_expires: ClassVar[bool] = True
    supports_headers: ClassVar[bool] = True
    backend_options: frozenset[str] | None = BACKEND_OPTIONS
    """Per-message options Dramatiq's default middleware reads (``Beat.schedule(options=)``)."""

    def __init__(
        self,
        broker: Any = None,
        *,
        default_queue: str = "default",
        expires_from: str = "submission",
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(default_queue, str) or not _NAME.fullmatch(default_queue):
            raise InvalidValue(
                "default_queue", default_queue, f"{default_queue!r} is not a Dramatiq queue name"
            )
        self.expires_from = check_expires_from(expires_from)
        self.clock = clock_or_system(clock)
        self.broker, self._owns_broker = _load_broker(broker)
        self.default_queue = default_queue
        self._retryable, self._permanent = _error_classes()
        self._declared: set[str] = set()
        self._unchecked: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    # -- declaration ------------------------------------------------------------------------------

    def known_tasks(self) -> frozenset[str] | None:
        """The broker's actors (None for a bare Redis URL: it knows none)."""
        actors = getattr(self.broker, "actors", None)
        return frozenset(actors) if actors else None

    def validate(self, schedule: Schedule) -> None:
        check_supported(self, schedule)
        if not _NAME.fullmatch(schedule.task):
            raise InvalidSchedule(
                "task",
                schedule.task,
                f"{schedule.task!r} is not a Dramatiq actor name (letters, digits, '._-')",
            )
        routing = schedule.routing
        queue = routing.queue
        if queue is not None and not _NAME.fullmatch(queue):
            raise InvalidSchedule("queue", queue, f"{queue!r} is not a Dramatiq queue name")
        headers = routing.headers
        if "max_age" in headers:
            raise InvalidSchedule(
                "headers",
                dict(headers),
                "'max_age' is how goatbeat sends expires: set expires= instead",
            )
        clashing = sorted(set(headers) & (_BROKER_OPTIONS | RESERVED_HEADERS))
        if clashing:
            raise InvalidSchedule(
                "headers",
                dict(headers),
                f"header(s) {', '.join(map(repr, clashing))} are reserved by Dramatiq or goatbeat",
            )
        _check_options(headers)
        actors: Mapping[str, Any] = getattr(self.broker, "actors", None) or {}
        if not actors:
            self._warn_unchecked(schedule, queue or self.default_queue)
            return
        actor = actors.get(schedule.task)
        if actor is None:
            raise InvalidSchedule("task", schedule.task, _unknown_actor(schedule.task, actors))
        for option in sorted(_ACTOR_NAMES & set(headers)):
            if headers[option] not in actors:
                raise InvalidSchedule(
                    option,
                    headers[option],
                    f"{headers[option]!r} is not an actor of the broker "
                    f"(it declares {_names(actors)})",
                )
        queue = queue or str(actor.queue_name)
        consumed = self._project_queues()
        if queue not in consumed:
            raise InvalidSchedule(
                "queue",
                queue,
                f"no actor of the Dramatiq broker is declared on queue {queue!r}, so no worker "
                "consumes it (a worker consumes the queues its broker declares; --queues only "
                f"narrows them): declare an actor with queue_name={queue!r}, or call "
                f"broker.declare_queue({queue!r}) in the module your workers load "
                f"(declared: {', '.join(sorted(consumed)) or 'none'})",
            )

    def _project_queues(self) -> set[str]:
        """The queues the project's broker declared (by its actors or by hand), which its
        workers consume; not those goatbeat declared on it only to send."""
        declared = set(self.broker.get_declared_queues())
        with _declared_lock:
            return declared - _declared_by_goatbeat.get(self.broker, set())

    def _warn_unchecked(self, schedule: Schedule, queue: str) -> None:
        with self._lock:
            if queue in self._unchecked:
                return
            self._unchecked.add(queue)
        log_event(
            "submitter.unchecked",
            level=logging.WARNING,
            backend=self.name,
            schedule=schedule.name,
            task=schedule.task,
            queue=queue,
            reason=(
                "the Dramatiq broker declares no actors, so goatbeat cannot check that an actor "
                f"named {schedule.task!r} exists nor that workers consume queue {queue!r} "
                "(only queues their broker declares); give the broker as the module your "
                "workers load (broker='package.module') to have both checked at declaration"
            ),
        )

    # -- submission -----------------------------------------------------------------------------

    def _queue_for(self, occurrence: Occurrence) -> str:
        if occurrence.routing.queue is not None:
            return occurrence.routing.queue
        actor = self.broker.actors.get(occurrence.task)
        if actor is not None:
            return str(actor.queue_name)
        return self.default_queue

    def submit(self, occurrence: Occurrence) -> str | None:
        import dramatiq

        routing = occurrence.routing
        options: dict[str, Any] = {**routing.headers, **key_headers(occurrence)}
        left = expires_left(occurrence, self.expires_from, self.clock)
        if left is not None:
            options["max_age"] = max(1, math.ceil(left * 1000))
        queue = self._queue_for(occurrence)
        message_id = derived_uuid(occurrence.idempotency_key)
        try:
            message: Any = dramatiq.Message(
                queue_name=queue,
                actor_name=occurrence.task,
                args=tuple(occurrence.args),
                kwargs=dict(occurrence.kwargs),
                options=options,
                message_id=message_id,
            )
            with self._lock:
                if self._closed:
                    raise RetryableSubmitError("the Dramatiq submitter is closed")
                if queue not in self._declared:
                    self._declare(queue)
            self.broker.enqueue(message)
        except RetryableSubmitError:
            raise
        except self._permanent as exc:
            raise PermanentSubmitError(
                f"dramatiq refused actor {occurrence.task!r} "
                f"({occurrence.idempotency_key}): {type(exc).__name__}: {exc}"
            ) from exc
        except self._retryable as exc:
            raise RetryableSubmitError(
                f"dramatiq broker unavailable for {occurrence.idempotency_key}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return message_id

    def _declare(self, queue: str) -> None:
        # Declaring is cheap and idempotent; brokers that check (stub, RabbitMQ) refuse to
        # enqueue on a queue they have not declared. It does not make a worker consume it.
        with _declared_lock:
            if queue not in self.broker.get_declared_queues():
                _declared_by_goatbeat.setdefault(self.broker, set()).add(queue)
        self.broker.declare_queue(queue)
        self._declared.add(queue)

    def bound_calls(self, seconds: float) -> None:
        """Socket timeouts of at most ``seconds`` on a Redis broker's client (the
        scheduler's bound of outside calls; :mod:`goatbeat.submitters._redis_bound`)."""
        bound_redis_client(getattr(self.broker, "client", None), seconds)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_broker:
            try:
                self.broker.close()
            except Exception:  # noqa: BLE001 - closing must not raise
                pass


def _check_options(headers: Mapping[str, Any]) -> None:
    """The per-message options Dramatiq's middleware reads must be what it expects: a wrong
    type is not an error there, it silently falls back to the actor's setting or crashes the
    middleware on every delivery."""
    for option in sorted(BACKEND_OPTIONS & set(headers)):
        value = headers[option]
        if option in _ACTOR_NAMES:
            ok = isinstance(value, str) and bool(_NAME.fullmatch(value))
            want = "an actor name"
        else:
            low = 0 if option in _COUNTS else 1
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
            unit = "" if option in _COUNTS else " (milliseconds)"
            want = f"an integer >= {low}{unit}"
        if not ok:
            raise InvalidSchedule(option, value, f"{short_repr(value)} is not {want}")


def _names(actors: Mapping[str, Any]) -> str:
    names = sorted(actors)
    shown = ", ".join(map(repr, names[:20]))
    return shown + (f" and {len(names) - 20} more" if len(names) > 20 else "")


def _unknown_actor(task: str, actors: Mapping[str, Any]) -> str:
    for name, actor in sorted(actors.items()):
        fn = getattr(actor, "fn", None)
        if task == f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}":
            return (
                f"{task!r} is the module path of the function of actor {name!r}; Dramatiq "
                f"finds actors by actor_name: use task={name!r} (or the actor object)"
            )
    return f"the Dramatiq broker declares no actor named {task!r} (it declares {_names(actors)})"
