"""Submit occurrences to Dramatiq by actor name (a ``dramatiq.Message`` enqueued on the broker).

``Schedule.task`` is the *actor name* (Dramatiq's ``actor_name``, by default the function's
name), not a dotted path: the actor's module is never imported. When the broker already knows
the actor (the project imported its actors), its queue is the default queue.

The idempotency key travels in the message options (``goatbeat_idempotency_key``,
``goatbeat_scheduled_at``; a task reads them through the ``CurrentMessage`` middleware), and the
message id is a UUID derived from the key, so a resubmission after a crash carries the same id.
Dramatiq itself does not de-duplicate: a worker that must run once keeps the ids it has seen.

What Dramatiq can honour, and how:

- ``queue``: the message goes to that queue (a worker must consume it, so some actor in the
  worker's broker must be declared on it, or the worker started with ``--queues``);
- ``expires``: the ``max_age`` option (milliseconds) of the default ``AgeLimit`` middleware;
  the age counts from submission;
- ``headers``: merged into the message options, where middleware reads them (``time_limit``,
  ``max_retries``... work as Dramatiq documents them);
- ``priority``: not per message — Dramatiq priority is an actor setting, so it is refused;
- ``exchange`` / ``routing_key``: AMQP routing Dramatiq does not expose; refused.
"""

from __future__ import annotations

import math
import re
import threading
from typing import Any, ClassVar

from goatbeat.core.errors import (
    InvalidSchedule,
    InvalidValue,
    PermanentSubmitError,
    RetryableSubmitError,
)
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.submit import check_supported
from goatbeat.submitters._keys import RESERVED_HEADERS, derived_uuid, key_headers

__all__ = ["DramatiqSubmitter"]

# The names dramatiq.Actor accepts; anything else is rejected by every Dramatiq worker.
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9._-]*")
# Options the brokers set themselves; a header of that name would corrupt delivery.
_BROKER_OPTIONS = frozenset({"redis_message_id", "eta", "max_age"})


def _load_broker(broker: Any) -> tuple[Any, bool]:
    if broker is None:
        import dramatiq

        # The project's broker once its actors module has called dramatiq.set_broker().
        return dramatiq.get_broker(), False
    if not isinstance(broker, str):
        return broker, False
    from dramatiq.brokers.redis import RedisBroker

    # dramatiq's own annotations are partial; the broker is used duck-typed anyway.
    factory: Any = RedisBroker
    return factory(url=broker), True


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


class DramatiqSubmitter:
    """Enqueue each occurrence as a Dramatiq message.

    ``broker`` is a ``dramatiq.Broker``, ``None`` (``dramatiq.get_broker()``) or a Redis URL (a ``RedisBroker`` is created and closed
    with the submitter). ``default_queue`` is used when neither the schedule nor a declared actor
    names one.
    """

    name: ClassVar[str] = "dramatiq"
    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = False
    supports_exchange: ClassVar[bool] = False
    supports_expires: ClassVar[bool] = True
    supports_headers: ClassVar[bool] = True

    def __init__(self, broker: Any = None, *, default_queue: str = "default") -> None:
        if not _NAME.fullmatch(default_queue):
            raise InvalidValue(
                "default_queue", default_queue, f"{default_queue!r} is not a Dramatiq queue name"
            )
        self.broker, self._owns_broker = _load_broker(broker)
        self.default_queue = default_queue
        self._retryable, self._permanent = _error_classes()
        self._declared: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    def validate(self, schedule: Schedule) -> None:
        check_supported(self, schedule)
        if not _NAME.fullmatch(schedule.task):
            raise InvalidSchedule(
                "task",
                schedule.task,
                f"{schedule.task!r} is not a Dramatiq actor name (letters, digits, '._-')",
            )
        queue = schedule.routing.queue
        if queue is not None and not _NAME.fullmatch(queue):
            raise InvalidSchedule("queue", queue, f"{queue!r} is not a Dramatiq queue name")
        clashing = sorted(set(schedule.routing.headers) & (_BROKER_OPTIONS | RESERVED_HEADERS))
        if clashing:
            raise InvalidSchedule(
                "headers",
                dict(schedule.routing.headers),
                f"header(s) {', '.join(map(repr, clashing))} are reserved by Dramatiq or goatbeat",
            )

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
        if routing.expires is not None:
            options["max_age"] = max(1, math.ceil(routing.expires * 1000))
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
                    # Declaring is cheap and idempotent; brokers that check (stub, RabbitMQ)
                    # refuse to enqueue on a queue they have not declared.
                    self.broker.declare_queue(queue)
                    self._declared.add(queue)
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
