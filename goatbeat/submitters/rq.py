"""Submit occurrences to RQ: ``Queue.enqueue_call`` with a job id derived from the key.

``Schedule.task`` is the dotted path of the function (``"proj.jobs.send_report"``), which RQ
stores as a string: the scheduler never imports it, the worker does.

RQ job ids allow only ``[A-Za-z0-9_-]``, so the id is ``goatbeat-<uuid5 of the key>``, stable
for an occurrence. The job is enqueued with ``unique=True`` where RQ offers it (RQ >= 2.4):
RQ then refuses a second job with that id, so a resubmission after a crash while the first job
is still known to RQ (queued, running, or finished within its ``result_ttl``) does not run
twice; goatbeat reports the existing job's id. The key itself is in ``job.meta``
(``goatbeat_idempotency_key``, ``goatbeat_scheduled_at``).

What RQ can honour: ``queue``; ``expires`` as the job ``ttl`` (whole seconds, rounded up: RQ
drops a job still queued after it); ``headers`` as extra ``job.meta`` entries. ``priority``,
``exchange`` and ``routing_key`` have no RQ equivalent and are refused.
"""

from __future__ import annotations

import inspect
import math
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

__all__ = ["RQSubmitter", "job_id_for"]

JOB_ID_PREFIX = "goatbeat-"


def job_id_for(idempotency_key: str) -> str:
    """The RQ job id of an occurrence (a valid RQ id whatever characters the key holds)."""
    return JOB_ID_PREFIX + derived_uuid(idempotency_key)


def _load_connection(connection: Any) -> tuple[Any, bool]:
    if not isinstance(connection, str):
        return connection, False
    import redis

    return redis.Redis.from_url(connection), True


class RQSubmitter:
    """Enqueue each occurrence as an RQ job.

    ``connection`` is a ``redis.Redis`` or a Redis URL (a client is created and closed with the
    submitter). ``default_queue`` is used when the schedule names no queue. ``result_ttl`` is
    passed to RQ when given (it also bounds how long a finished job keeps its id reserved).
    """

    name: ClassVar[str] = "rq"
    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = False
    supports_exchange: ClassVar[bool] = False
    supports_expires: ClassVar[bool] = True
    supports_headers: ClassVar[bool] = True

    def __init__(
        self, connection: Any, *, default_queue: str = "default", result_ttl: int | None = None
    ) -> None:
        from rq import Queue

        if not isinstance(default_queue, str) or not default_queue:
            raise InvalidValue(
                "default_queue", default_queue, f"{default_queue!r} is not a queue name"
            )
        self.connection, self._owns_connection = _load_connection(connection)
        self.default_queue = default_queue
        self.result_ttl = result_ttl
        self._queue_class = Queue
        self._queues: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._has_unique = "unique" in inspect.signature(Queue.enqueue_call).parameters
        try:
            from rq.exceptions import DuplicateJobError
        except ImportError:  # RQ < 2.4: no unique enqueue, nothing to catch
            self._duplicate: tuple[type[BaseException], ...] = ()
        else:
            self._duplicate = (DuplicateJobError,)
        import redis

        self._retryable: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
            redis.exceptions.RedisError,
            ConnectionError,
            TimeoutError,
            OSError,
        )

    def validate(self, schedule: Schedule) -> None:
        check_supported(self, schedule)
        module, _, _ = schedule.task.rpartition(".")
        if not module or not all(part.isidentifier() for part in schedule.task.split(".")):
            raise InvalidSchedule(
                "task",
                schedule.task,
                f"{schedule.task!r} is not the dotted path of a function (module.function)",
            )
        clashing = sorted(set(schedule.routing.headers) & RESERVED_HEADERS)
        if clashing:
            raise InvalidSchedule(
                "headers",
                dict(schedule.routing.headers),
                f"header(s) {', '.join(map(repr, clashing))} are reserved by goatbeat",
            )

    def _queue(self, name: str) -> Any:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queue_class(name, connection=self.connection)
            self._queues[name] = queue
        return queue

    def submit(self, occurrence: Occurrence) -> str | None:
        routing = occurrence.routing
        job_id = job_id_for(occurrence.idempotency_key)
        options: dict[str, Any] = {
            "job_id": job_id,
            "meta": {**routing.headers, **key_headers(occurrence)},
        }
        if routing.expires is not None:
            options["ttl"] = max(1, math.ceil(routing.expires))
        if self.result_ttl is not None:
            options["result_ttl"] = self.result_ttl
        if self._has_unique:
            options["unique"] = True
        with self._lock:
            if self._closed:
                raise RetryableSubmitError("the RQ submitter is closed")
            queue = self._queue(routing.queue or self.default_queue)
        try:
            job = queue.enqueue_call(
                func=occurrence.task,
                args=tuple(occurrence.args),
                kwargs=dict(occurrence.kwargs),
                **options,
            )
        except self._duplicate:
            # Already enqueued by an earlier attempt of this very occurrence: that is success.
            return job_id
        except self._retryable as exc:
            raise RetryableSubmitError(
                f"rq's redis unavailable for {occurrence.idempotency_key}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        except (AttributeError, TypeError, ValueError) as exc:
            # Building or serialising the job failed here, before Redis: it will fail every time.
            raise PermanentSubmitError(
                f"rq refused {occurrence.task!r} ({occurrence.idempotency_key}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return str(job.id)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_connection:
            try:
                self.connection.close()
            except Exception:  # noqa: BLE001 - closing must not raise
                pass
