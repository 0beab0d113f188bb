"""Submit occurrences to Celery by task name (``app.send_task``).

The task module is never imported: the scheduler only needs the broker, not the project's code.
The idempotency key travels twice, as the Celery task id and as the ``goatbeat_idempotency_key``
message header (with ``goatbeat_scheduled_at``), so a task sees it as ``self.request.id`` and in
``self.request.headers``, and a resubmission after a crash carries the same id.

Producers are taken from the app's pool and kept for the submitter's lifetime: acquiring one
per message costs a pool round trip that a scheduler dispatching thousands of occurrences per
batch can feel. kombu's publish retry reconnects a producer when the broker restarts. A kombu
producer must not be shared between threads, so each concurrent :meth:`CelerySubmitter.submit`
checks one out of a small free list (at most ``concurrency`` of them exist when the scheduler
uses the submitter). The scheduler sends from a thread of its own while it claims the next
batch, and with ``concurrency`` > 1 from that many threads.

The scheduler hands the submitter chunks of occurrences (:meth:`CelerySubmitter.submit_many`):
each chunk is published inside kombu's ``Producer.batch()`` (kombu >= 5.7), which on Redis
sends the chunk's ``LPUSH`` commands in one pipelined round trip; the messages are exactly those
``send_task`` publishes (routing, ``task_routes``, signals and all). Transports without batch
support publish each message at once inside the same call.

Each message is built by :class:`~goatbeat.submitters._celery_publish.Publisher`, which does
``send_task``'s per-task work (registry options, route) once per schedule's routing and leaves
out the result bookkeeping a scheduler never reads (about a fifth of the interpreter's time
per message); it steps aside for ``send_task`` where that would not give the same message (a
router function, task protocol 1, inside a Celery task).
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from goatbeat.core.clock import Clock
from goatbeat.core.errors import (
    InvalidSchedule,
    InvalidValue,
    PermanentSubmitError,
    RetryableSubmitError,
)
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.observability import log_event
from goatbeat.core.submit import BaseSubmitter, check_supported
from goatbeat.submitters._celery_publish import Publisher
from goatbeat.submitters._expiry import check_expires_from, clock_or_system, expires_left
from goatbeat.submitters.keys import RESERVED_HEADERS, key_headers

__all__ = ["CelerySubmitter", "DEFAULT_RETRY_POLICY", "DEFAULT_CONCURRENCY"]

DEFAULT_CONCURRENCY = 1
"""Submissions in flight at once. Declaring any lets the scheduler send a batch from a thread
of its own while it claims the next; sending is mostly CPU work under the GIL, so more than
one sending thread measured no faster on a small machine (bench/bench_dispatch.py)."""

DEFAULT_RETRY_POLICY: Mapping[str, float] = {
    # Short on purpose: goatbeat retries a failed submission itself, with backoff, and a long
    # in-place retry would stall every other due occurrence behind a dead broker.
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}

# Celery's protocol-2 headers: a user header with one of these names would replace what Celery
# wrote (the task name, its id...) and the worker would run something else or nothing at all.
_CELERY_HEADERS = frozenset(
    {
        "lang", "task", "id", "shadow", "eta", "expires", "group", "group_index", "retries",
        "timelimit", "root_id", "parent_id", "argsrepr", "kwargsrepr", "origin",
        "ignore_result", "replaced_task_nesting", "stamped_headers", "stamps",
    }
)  # fmt: skip

# Dotted or colon-separated names ("proj.tasks.add", "celery.backend_cleanup", "app:job"):
# Celery accepts any string, but an empty segment is always a typo in a dotted path.
_TASK_NAME = re.compile(r"[^\s.:]+(?:[.:][^\s.:]+)*")

_MAX_PRIORITY = 255

_BATCH_COMMANDS = 100_000
"""kombu's batch ``max_size`` counts Redis commands; the scheduler's chunks (50 messages) stay
far below it, so each chunk is flushed exactly once, when it ends."""


def _load_app(app: Any) -> tuple[Any, bool]:
    """The Celery app and whether this submitter created it (and so must close it)."""
    if app is None:
        from celery import current_app

        # The project's app once its module is imported, as for ``@shared_task``.
        return current_app._get_current_object(), False
    if not isinstance(app, str):
        return app, False
    if "://" in app:
        from celery import Celery

        created = Celery("goatbeat", broker=app, set_as_current=False)
        created.conf.task_serializer = "json"
        return created, True
    module_name, _, attr = app.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidValue("celery_app", app, f"cannot import {module_name!r}: {exc}") from None
    candidates = [attr] if attr else ["app", "celery"]
    for candidate in candidates:
        found = getattr(module, candidate, None)
        if found is not None:
            return found, False
    raise InvalidValue(
        "celery_app", app, f"{module_name!r} has no attribute {' or '.join(candidates)}"
    )


def _error_classes() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(retryable, permanent) exception classes of the installed kombu / redis."""
    from kombu import exceptions as kombu_exc

    retryable: list[type[BaseException]] = [
        kombu_exc.OperationalError,
        kombu_exc.ChannelError,
        kombu_exc.ConnectionError,
        ConnectionError,
        TimeoutError,
        OSError,
    ]
    try:
        from redis import exceptions as redis_exc
    except ImportError:  # an AMQP-only project: kombu wraps its errors already
        pass
    else:
        retryable.append(redis_exc.RedisError)
    permanent: list[type[BaseException]] = [
        kombu_exc.EncodeError,
        kombu_exc.ContentDisallowed,
        TypeError,
        ValueError,
    ]
    return tuple(retryable), tuple(permanent)


class CelerySubmitter(BaseSubmitter):
    """Send each occurrence as a Celery task message.

    ``app`` is a ``celery.Celery``, ``None`` (Celery's current app), a broker URL (``"redis://..."``; a JSON-serialising app is
    created for it) or an import path ``"module:attr"`` (``"module"`` alone looks for ``app``
    then ``celery``, as ``celery -A`` does). ``retry_policy`` is kombu's publish retry policy.
    ``concurrency`` is how many submissions the scheduler may run at once (its
    ``concurrent_submits``); 0 keeps every submission in the scheduler's own thread.
    ``batch_publish=False`` publishes each message on its own even where kombu can batch.
    ``expires_from``: ``"submission"`` (default, as celery beat) or ``"scheduled"``, where
    ``expires`` counts from (see :mod:`goatbeat.submitters._expiry`); from the scheduled
    instant it is sent as an absolute expiry.
    """

    name: ClassVar[str] = "celery"
    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = True
    supports_exchange: ClassVar[bool] = True
    supports_expires: ClassVar[bool] = True
    supports_headers: ClassVar[bool] = True
    backend_options: frozenset[str] | None = frozenset()
    """None: Celery's routing options are the schedule's own fields."""

    def __init__(
        self,
        app: Any = None,
        *,
        retry_policy: Mapping[str, float] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        batch_publish: bool = True,
        expires_from: str = "submission",
        clock: Clock | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 0:
            raise InvalidValue("concurrency", concurrency, f"{concurrency!r} must be >= 0")
        self.expires_from = check_expires_from(expires_from)
        self.clock = clock_or_system(clock)
        self.app, self._owns_app = _load_app(app)
        self._retry_policy = dict(DEFAULT_RETRY_POLICY if retry_policy is None else retry_policy)
        self._retryable, self._permanent = _error_classes()
        self.concurrent_submits = concurrency
        self._batch_publish = bool(batch_publish)
        # Producers not in use right now; one per thread submitting at the same moment.
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        self._modules_loaded = False
        self._publisher = Publisher(self.app)

    def known_tasks(self) -> frozenset[str]:
        """The app's registered tasks (``app.tasks``), once the modules its configuration
        names are loaded as a worker loads them (``imports``/``include``, and what
        ``autodiscover_tasks()`` finds in the installed apps): never a module a schedule
        names. A module that fails to import is logged and skipped."""
        if not self._modules_loaded:
            self._modules_loaded = True
            try:
                self.app.loader.import_default_modules()
            except Exception as exc:  # the registry is what loaded; the failure is logged
                log_event(
                    "submitter.unchecked",
                    level=logging.WARNING,
                    submitter=self.name,
                    error=f"loading the Celery app's task modules failed: {exc!r}",
                )
        return frozenset(self.app.tasks)

    def validate(self, schedule: Schedule) -> None:
        check_supported(self, schedule)
        if not _TASK_NAME.fullmatch(schedule.task):
            raise InvalidSchedule(
                "task", schedule.task, f"{schedule.task!r} is not a Celery task name"
            )
        routing = schedule.routing
        if routing.priority is not None and not 0 <= routing.priority <= _MAX_PRIORITY:
            raise InvalidSchedule(
                "priority",
                routing.priority,
                f"priority={routing.priority} is outside Celery's range 0..{_MAX_PRIORITY}",
            )
        clashing = sorted(set(routing.headers) & (_CELERY_HEADERS | RESERVED_HEADERS))
        if clashing:
            raise InvalidSchedule(
                "headers",
                dict(routing.headers),
                f"header(s) {', '.join(map(repr, clashing))} are reserved by Celery or goatbeat",
            )

    def submit(self, occurrence: Occurrence) -> str | None:
        producer = self._check_out()
        try:
            task_id = self._send(producer, occurrence, direct=self._publisher.usable())
        except PermanentSubmitError:
            self._check_in(producer)
            raise
        except BaseException:
            # The connection may be half-dead: start from a fresh producer next time.
            _release(producer)
            raise
        self._check_in(producer)
        return task_id

    def submit_many(self, occurrences: Sequence[Occurrence]) -> list[str | None | Exception]:
        """Publish ``occurrences`` in one kombu publish batch (``Producer.batch``, kombu >=
        5.7): on Redis their ``LPUSH`` go out in one pipelined round trip when the batch ends,
        instead of one round trip (and one fresh redis client) per message. A batch that
        fails to flush leaves delivery uncertain, so each message in it counts as a retryable
        failure: resubmitted with the same key, at least once. Without batch support (an older
        kombu, ``batch_publish=False``) the messages go one by one."""
        producer = self._check_out()
        batch = getattr(producer, "batch", None) if self._batch_publish else None
        results: list[str | None | Exception] = []
        healthy = True
        direct = self._publisher.usable()
        try:
            if batch is None:
                results = [self._send_or_error(producer, occ, direct) for occ in occurrences]
                healthy = not any(_suspect(r) for r in results)
                return results
            try:
                with batch(max_size=_BATCH_COMMANDS):
                    for occ in occurrences:
                        results.append(self._send_or_error(producer, occ, direct))
            except Exception as exc:  # the flush: nothing buffered is known to have landed
                healthy = False
                error = RetryableSubmitError(
                    f"celery broker batch failed, delivery uncertain: {type(exc).__name__}: {exc}"
                )
                results = [r if isinstance(r, Exception) else error for r in results]
                results += [error] * (len(occurrences) - len(results))
            else:
                healthy = not any(_suspect(r) for r in results)
            return results
        finally:
            if healthy:
                self._check_in(producer)
            else:
                _release(producer)

    def _send_or_error(
        self, producer: Any, occurrence: Occurrence, direct: bool
    ) -> str | None | Exception:
        try:
            return self._send(producer, occurrence, direct=direct)
        except Exception as exc:  # reported for this occurrence; the others still go
            return exc

    def _check_out(self) -> Any:
        with self._lock:
            if self._closed:
                raise RetryableSubmitError("the Celery submitter is closed")
            if self._idle:
                return self._idle.pop()
        return self.app.producer_pool.acquire(block=True)

    def _send(self, producer: Any, occurrence: Occurrence, *, direct: bool) -> str | None:
        """One message, as ``send_task`` sends it (``direct``: through the :class:`Publisher`,
        which builds the same message for less); kombu/redis errors turned into goatbeat's
        SubmitErrors."""
        routing = occurrence.routing
        options: dict[str, Any] = {}
        if routing.queue is not None:
            options["queue"] = routing.queue
        if routing.exchange is not None:
            options["exchange"] = routing.exchange
        if routing.routing_key is not None:
            options["routing_key"] = routing.routing_key
        if routing.priority is not None:
            options["priority"] = routing.priority
        left = expires_left(occurrence, self.expires_from, self.clock)
        expires: float | datetime | None = None
        if left is not None and self.expires_from == "scheduled":
            # Absolute, so the time the message waits in the broker counts too.
            expires = occurrence.scheduled_at + timedelta(seconds=routing.expires or 0)
        elif left is not None:
            expires = left
        # goatbeat's headers last: a user header must not forge the key.
        headers = {**routing.headers, **key_headers(occurrence)}
        try:
            if direct:
                return self._publisher.publish(
                    producer,
                    occurrence.task,
                    args=occurrence.args,
                    kwargs=occurrence.kwargs,
                    task_id=occurrence.idempotency_key,
                    headers=headers,
                    options=options,
                    expires=expires,
                    retry_policy=self._retry_policy,
                )
            if expires is not None:
                options["expires"] = expires
            result = self.app.send_task(
                occurrence.task,
                args=list(occurrence.args),
                kwargs=dict(occurrence.kwargs),
                task_id=occurrence.idempotency_key,
                producer=producer,
                headers=headers,
                retry=True,
                retry_policy=self._retry_policy,
                **options,
            )
        except self._permanent as exc:
            raise PermanentSubmitError(
                f"celery refused task {occurrence.task!r} "
                f"({occurrence.idempotency_key}): {type(exc).__name__}: {exc}"
            ) from exc
        except self._retryable as exc:
            raise RetryableSubmitError(
                f"celery broker unavailable for {occurrence.idempotency_key}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return str(result.id)

    def _check_in(self, producer: Any) -> None:
        if producer is None:
            return
        with self._lock:
            if not self._closed:
                self._idle.append(producer)
                return
        _release(producer)

    def prepare(self) -> None:
        """Open what the first submission needs, ahead of it: the broker's transport (kombu
        imports it on first use), a producer and its connection, kept for that submission.
        Called from a thread while the scheduler starts; a failure is left for the first
        submission to meet, and handle, as it would have."""
        try:
            producer = self._check_out()
        except Exception:  # closed, or the pool cannot be built: the first send will say
            return
        try:
            producer.connection.ensure_connection(max_retries=1, timeout=5)
        except Exception:  # the broker is down: the first send retries it as usual
            _release(producer)
            return
        self._check_in(producer)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
        # A submission still in flight releases its producer when it returns.
        for producer in idle:
            _release(producer)
        if self._owns_app:
            self.app.close()


def _suspect(result: object) -> bool:
    """Whether a submission's result says the producer's connection may be broken."""
    return isinstance(result, Exception) and not isinstance(result, PermanentSubmitError)


def _release(producer: Any) -> None:
    if producer is not None:
        try:
            producer.release()
        except Exception:  # noqa: BLE001 - best effort: closing, or an already failing connection
            pass
