"""Submit occurrences to RQ: ``Queue.enqueue_call`` with a job id derived from the key.

``Schedule.task`` is the dotted path of the function (``"proj.jobs.send_report"``), which RQ
stores as a string: the worker imports it, walking attributes from the longest module prefix
that imports (``"proj.jobs.os.system"`` is ``os.system`` when ``proj.jobs`` imports ``os``). The
scheduler imports nothing a code schedule names; a stored schedule's task that only an
``allowed_tasks`` pattern admits is imported here once, by the allow-list, to check that it is
defined where its name says (:meth:`RQSubmitter.task_definition`), so the worker cannot be
walked to anything else.

RQ job ids allow only ``[A-Za-z0-9_-]``, so the id is ``goatbeat-<uuid5 of the key>``, stable
for an occurrence. The job is enqueued with ``unique=True`` where RQ offers it (RQ >= 2.4):
RQ then refuses a second job with that id, so a resubmission after a crash while the first job
is still known to RQ (queued, running, or finished within its ``result_ttl``) does not run
twice; goatbeat reports the existing job's id. The key itself is in ``job.meta``
(``goatbeat_idempotency_key``, ``goatbeat_scheduled_at``).

What RQ can honour:

- ``queue``: a name an ``rq worker`` command line can take (letters, digits, ``_ . : -``, not
  starting with ``-``, ``.`` or ``:``); RQ needs no declaration, a worker consumes the queues it
  is started with;
- ``expires`` as the job ``ttl`` (whole seconds, rounded up: RQ drops a job still queued after
  it), counted from submission, or from the scheduled instant with ``expires_from="scheduled"``;
- the job options RQ users pass to ``enqueue`` (``Beat.schedule(options=...)``, stored with the
  headers): ``job_timeout`` (seconds, ``-1`` for none, or RQ's ``"10m"`` form), ``result_ttl``
  (seconds; ``-1`` keeps the result, ``0`` keeps none), ``failure_ttl`` (seconds), ``retry``
  (``3`` or ``{"max": 3, "interval": 10 | [10, 30, 60]}``: ``Retry(max, interval)``; an interval
  needs a worker running RQ's scheduler) and ``at_front`` (``true``: enqueued at the front of its
  queue, what RQ users do where others set a priority);
- the other ``headers`` become ``job.meta`` entries.

``priority``, ``exchange`` and ``routing_key`` have no RQ equivalent and are refused.
"""

from __future__ import annotations

import inspect
import math
import re
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from goatbeat.core.allowlist import defined_at
from goatbeat.core.clock import Clock
from goatbeat.core.errors import (
    InvalidSchedule,
    InvalidValue,
    PermanentSubmitError,
    RetryableSubmitError,
    short_repr,
)
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.submit import BaseSubmitter, check_supported
from goatbeat.submitters._expiry import check_expires_from, clock_or_system, expires_left
from goatbeat.submitters._redis_bound import bound_redis_client
from goatbeat.submitters.dotted import import_dotted
from goatbeat.submitters.keys import RESERVED_HEADERS, derived_uuid, key_headers

__all__ = ["RQSubmitter", "job_id_for", "BACKEND_OPTIONS"]

JOB_ID_PREFIX = "goatbeat-"

BACKEND_OPTIONS = frozenset({"job_timeout", "result_ttl", "failure_ttl", "retry", "at_front"})
"""The per-schedule job options (``Beat.schedule(options=...)``) the RQ submitter takes."""

# What an `rq worker QUEUE...` command line can be given: no spaces, nothing an option parser
# or a shell would read otherwise. RQ itself accepts any string and would wait on it forever.
_QUEUE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
_TIMEOUT = re.compile(r"([0-9]+)([dhms]?)", re.IGNORECASE)
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def job_id_for(idempotency_key: str) -> str:
    """The RQ job id of an occurrence (a valid RQ id whatever characters the key holds)."""
    return JOB_ID_PREFIX + derived_uuid(idempotency_key)


def _load_connection(connection: Any) -> tuple[Any, bool]:
    if not isinstance(connection, str):
        return connection, False
    import redis

    return redis.Redis.from_url(connection), True


class RQSubmitter(BaseSubmitter):
    """Enqueue each occurrence as an RQ job.

    ``connection`` is a ``redis.Redis`` or a Redis URL (a client is created and closed with the
    submitter). ``default_queue`` is used when the schedule names no queue. ``result_ttl`` is
    passed to RQ when given and the schedule sets none (it also bounds how long a finished job
    keeps its id reserved). ``expires_from``: ``"submission"`` (default) or ``"scheduled"``,
    where ``expires`` counts from (see :mod:`goatbeat.submitters._expiry`).
    """

    name: ClassVar[str] = "rq"
    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = False
    supports_exchange: ClassVar[bool] = False
    supports_expires: ClassVar[bool] = True
    supports_headers: ClassVar[bool] = True
    backend_options: frozenset[str] | None = BACKEND_OPTIONS
    """Job options RQ users pass to ``enqueue`` (``Beat.schedule(options=)``)."""

    def __init__(
        self,
        connection: Any,
        *,
        default_queue: str = "default",
        result_ttl: int | None = None,
        expires_from: str = "submission",
        clock: Clock | None = None,
    ) -> None:
        from rq import Queue, Retry

        if not isinstance(default_queue, str) or not _QUEUE.fullmatch(default_queue):
            raise InvalidValue(
                "default_queue", default_queue, f"{default_queue!r} is not an RQ queue name"
            )
        if result_ttl is not None:
            _check_option("result_ttl", result_ttl)
        self.expires_from = check_expires_from(expires_from)
        self.clock = clock_or_system(clock)
        self._retry_class: Any = Retry
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

    def task_definition(self, task: str) -> str:
        """Where the callable ``task`` resolves to is defined (``module.qualname``), imported in
        this process as RQ's worker would import it; ``LookupError`` when it resolves to
        nothing defined anywhere. The allow-list checks a name an ``allowed_tasks`` pattern
        matches against it."""
        return defined_at(import_dotted(task))

    def validate(self, schedule: Schedule) -> None:
        check_supported(self, schedule)
        module, _, _ = schedule.task.rpartition(".")
        if not module or not all(part.isidentifier() for part in schedule.task.split(".")):
            raise InvalidSchedule(
                "task",
                schedule.task,
                f"{schedule.task!r} is not the dotted path of a function (module.function)",
            )
        queue = schedule.routing.queue
        if queue is not None and not _QUEUE.fullmatch(queue):
            raise InvalidSchedule(
                "queue",
                queue,
                f"{queue!r} is not an RQ queue name an `rq worker` can be given "
                "(letters, digits, '_.:-', not starting with '-', '.' or ':')",
            )
        headers = schedule.routing.headers
        for option in sorted(BACKEND_OPTIONS & set(headers)):
            _check_option(option, headers[option])
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
        meta = {k: v for k, v in routing.headers.items() if k not in BACKEND_OPTIONS}
        options: dict[str, Any] = {"job_id": job_id, "meta": {**meta, **key_headers(occurrence)}}
        left = expires_left(occurrence, self.expires_from, self.clock)
        if left is not None:
            options["ttl"] = max(1, math.ceil(left))
        if self.result_ttl is not None:
            options["result_ttl"] = self.result_ttl
        try:
            options.update(self._job_options(routing.headers))
        except (TypeError, ValueError) as exc:
            # Only a row written around validate() gets here; it would fail every time.
            raise PermanentSubmitError(
                f"rq job options of {occurrence.idempotency_key}: {exc}"
            ) from exc
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

    def _job_options(self, headers: Mapping[str, Any]) -> dict[str, Any]:
        """``enqueue_call`` keywords for the job options among ``headers``."""
        out: dict[str, Any] = {}
        for option in BACKEND_OPTIONS & set(headers):
            value = headers[option]
            _check_option(option, value)
            if option == "job_timeout":
                out["timeout"] = _seconds(value)
            elif option == "retry":
                if isinstance(value, Mapping):
                    out["retry"] = self._retry_class(
                        max=value["max"], interval=value.get("interval", 0)
                    )
                else:
                    out["retry"] = self._retry_class(max=value)
            else:
                out[option] = value
        return out

    def bound_calls(self, seconds: float) -> None:
        """Socket timeouts of at most ``seconds`` on the Redis client (the scheduler's bound
        of outside calls; :mod:`goatbeat.submitters._redis_bound`)."""
        bound_redis_client(self.connection, seconds)

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


def _seconds(value: int | str) -> int:
    """RQ's timeout forms: an integer, or digits and a unit (``"90"``, ``"10m"``, ``"1h"``)."""
    if isinstance(value, int):
        return value
    match = _TIMEOUT.fullmatch(value)
    if match is None:
        raise ValueError(f"job_timeout: {value!r} is not an RQ timeout")
    return int(match.group(1)) * _UNIT[match.group(2).lower()]


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_option(option: str, value: Any) -> None:
    """Raise InvalidSchedule naming ``option`` when RQ would refuse ``value`` or misread it."""
    if option == "job_timeout":
        ok = _is_int(value, 1) or (_is_int(value, -1) and value == -1)
        if isinstance(value, str):
            match = _TIMEOUT.fullmatch(value)
            ok = match is not None and int(match.group(1)) > 0
        want = "seconds >= 1, -1 for no limit, or RQ's '10m' form (units d, h, m, s)"
    elif option == "result_ttl":
        ok = _is_int(value, -1)
        want = "seconds: -1 keeps the result, 0 keeps none"
    elif option == "failure_ttl":
        ok = _is_int(value, 1)
        want = "seconds >= 1"
    elif option == "retry":
        ok = _is_int(value, 1) or _retry_ok(value)
        want = (
            "a number of retries >= 1, or {'max': >= 1, 'interval': seconds >= 0 or a list of them}"
        )
    else:  # at_front
        ok = isinstance(value, bool)
        want = "true or false"
    if not ok:
        raise InvalidSchedule(option, value, f"{short_repr(value)} is not {want}")


def _retry_ok(value: Any) -> bool:
    if not isinstance(value, Mapping) or "max" not in value:
        return False
    if set(value) - {"max", "interval"} or not _is_int(value["max"], 1):
        return False
    interval = value.get("interval", 0)
    if isinstance(interval, list):
        return bool(interval) and all(_is_int(i, 0) for i in interval)
    return _is_int(interval, 0)
