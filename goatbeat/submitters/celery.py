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
sends the chunk's ``LPUSH`` commands in one pipelined round trip, and on RabbitMQ (py-amqp) writes
the chunk's frames in one socket write and, with publisher confirms, waits once for all the acks
(:mod:`~goatbeat.submitters._amqp_batch`); the messages are exactly those ``send_task``
publishes (routing, ``task_routes``, signals and all). Other transports publish each message at
once inside the same call.

On RabbitMQ, a channel error no retry can fix (404 NOT_FOUND, an unknown exchange; 406
PRECONDITION_FAILED, an exchange or queue declared otherwise than it exists) is
:class:`BrokerRefused`, a PermanentSubmitError, on the occurrence whose message caused it.
Without publisher confirms the broker's close arrives after later messages were written, so
each chunk ends with one round trip on its channel before it is reported (docs/rabbitmq.md).

Each message is built by :class:`~goatbeat.submitters._celery_publish.Publisher`, which does
``send_task``'s per-task work (registry options, route) once per schedule's routing and leaves
out the result bookkeeping a scheduler never reads (about a fifth of the interpreter's time
per message); it steps aside for ``send_task`` where that would not give the same message (a
router function, task protocol 1, inside a Celery task).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import uuid
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
from goatbeat.submitters._amqp_batch import (
    after_classic,
    await_confirms,
    before_classic,
)
from goatbeat.submitters._celery_amqp import BATCH_COMMANDS, UNSENT, ChunkSending
from goatbeat.submitters._celery_app import bound_redis_sockets, error_classes, load_app
from goatbeat.submitters._celery_channel import (
    concrete_channel,
    release,
    round_trip,
    unconfirmed_channel,
)
from goatbeat.submitters._celery_errors import (
    Abandoned,
    BrokerRefused,
    PublishTimedOut,
    Refused,
    is_timeout,
    no_retry_after_timeout,
    refusal,
    suspect,
)
from goatbeat.submitters._celery_publish import Publisher, beat_options
from goatbeat.submitters._expiry import check_expires_from, clock_or_system, expires_left
from goatbeat.submitters.keys import RESERVED_HEADERS, key_headers

__all__ = [
    "BEAT_HEADER",
    "BrokerRefused",
    "CelerySubmitter",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_PUBLISH_TIMEOUT",
    "DEFAULT_RETRY_POLICY",
]

BEAT_HEADER = "celery_beat_task"
"""The header celery beat (5.7) sets to True on every message it sends; goatbeat sends it too,
so code and monitoring that tell scheduled runs by it see goatbeat's."""

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

DEFAULT_PUBLISH_TIMEOUT = 5.0
"""Seconds one publish may take (the socket write, and with ``confirm_publish`` the broker's
confirm) before it is abandoned as undelivered-or-unknown: a broker that blocks publishers
(RabbitMQ's memory or disk alarm) or a frozen Redis would otherwise hold the scheduler inside
the publish for as long as it lasts, past its lease. Below the default lease's local deadline
(lease_ttl - lease_renew_interval = 20 s) with room for the rest of the iteration."""

_MAX_PRIORITY = 255


class CelerySubmitter(ChunkSending, BaseSubmitter):
    """Send each occurrence as a Celery task message.

    ``app`` is a ``celery.Celery``, ``None`` (Celery's current app), a broker URL (``"redis://..."``; a JSON-serialising app is
    created for it) or an import path ``"module:attr"`` (``"module"`` alone looks for ``app``
    then ``celery``, as ``celery -A`` does). ``retry_policy`` is kombu's publish retry policy.
    ``concurrency`` is how many submissions the scheduler may run at once (its
    ``concurrent_submits``); 0 keeps every submission in the scheduler's own thread.
    ``batch_publish=False`` publishes each message on its own even where kombu can batch.
    ``expires_from``: ``"submission"`` (default, as celery beat) or ``"scheduled"``, where
    ``expires`` counts from (see :mod:`goatbeat.submitters._expiry`); from the scheduled
    instant it is sent as an absolute expiry. ``publish_timeout`` (seconds, default
    :data:`DEFAULT_PUBLISH_TIMEOUT`; None: wait forever, as Celery does) bounds each publish
    (on RabbitMQ, a chunk's write and the wait for its confirms): past it the occurrence counts
    as a retryable failure (logged ``submitter.publish_timeout``) and the rest of its chunk is
    not tried; the connection is dropped, except on RabbitMQ with confirms after a complete
    write, where the next submission first waits for the withheld confirms (a message the
    broker confirmed then is answered submitted on its retry, not sent twice). Keep it well
    below the lease's local deadline.
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
        publish_timeout: float | None = DEFAULT_PUBLISH_TIMEOUT,
    ) -> None:
        if publish_timeout is not None and (
            isinstance(publish_timeout, bool)
            or not isinstance(publish_timeout, int | float)
            or not publish_timeout > 0
        ):
            raise InvalidValue(
                "publish_timeout", publish_timeout, f"{publish_timeout!r} must be > 0 seconds"
            )
        self.publish_timeout = None if publish_timeout is None else float(publish_timeout)
        self._timeouts: dict[str, float] = (
            {}
            if publish_timeout is None
            else {"timeout": float(publish_timeout), "confirm_timeout": float(publish_timeout)}
        )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 0:
            raise InvalidValue("concurrency", concurrency, f"{concurrency!r} must be >= 0")
        self.expires_from = check_expires_from(expires_from)
        self.clock = clock_or_system(clock)
        self.app, self._owns_app = load_app(app)
        self._retry_policy: dict[str, Any] = dict(
            DEFAULT_RETRY_POLICY if retry_policy is None else retry_policy
        )
        if publish_timeout is not None:
            # kombu calls the errback before it reconnects and publishes again: a publish that
            # timed out may still be in the broker's hands, so it is not sent a second time
            # from here (goatbeat's own retry resends it later, with the same id).
            self._retry_policy["errback"] = no_retry_after_timeout
        self._retryable, self._permanent = error_classes()
        if publish_timeout is not None:
            bound_redis_sockets(self.app, float(publish_timeout))
        from celery.exceptions import QueueNotFound

        self._missing_queue: type[BaseException] = QueueNotFound
        self.concurrent_submits = concurrency
        self._batch_publish = bool(batch_publish)
        # Producers not in use right now; one per thread submitting at the same moment.
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        # A publish timed out: probe before the next one (_still_blocked).
        self._blocked = False
        # A chunk's confirms the broker withheld past publish_timeout (tag -> task id), on
        # that channel; the task ids of those it confirmed later, answered without a resend.
        self._owed: dict[int, str] = {}
        self._owed_channel: Any = None
        self._owed_since = 0.0
        # Task ids whose messages the broker confirmed (the latest LANDED_LIMIT), so a
        # resubmission after an answer was lost (a timed-out wait, a call the scheduler gave
        # up on) is answered without a second copy; and those written, not yet confirmed.
        self._landed: dict[str, None] = {}
        self._inflight: set[str] = set()
        # The scheduler's bound of one call (bound_calls): a call that outlived it was given
        # up on, and the confirms it then got were never seen by the scheduler.
        self._call_bound: float | None = None
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
        [result] = self._publish_chunk([occurrence], batched=False)
        if isinstance(result, Exception):
            raise result
        return result

    def submit_many(self, occurrences: Sequence[Occurrence]) -> list[str | None | Exception]:
        """Publish ``occurrences`` in one kombu publish batch (``Producer.batch``, kombu >=
        5.7): on Redis their ``LPUSH`` go out in one pipelined round trip when the batch ends,
        instead of one round trip (and one fresh redis client) per message. A batch that
        fails to flush leaves delivery uncertain, so each message in it counts as a retryable
        failure: resubmitted with the same key, at least once. Without batch support (an older
        kombu, ``batch_publish=False``, RabbitMQ) the messages go one by one; on RabbitMQ
        without publisher confirms the chunk ends with one round trip on its channel, so a
        message the broker refused is known, and reported, before the chunk is
        (:meth:`_verify`)."""
        return self._publish_chunk(occurrences, batched=self._batch_publish)

    def _publish_chunk(
        self, occurrences: Sequence[Occurrence], *, batched: bool
    ) -> list[str | None | Exception]:
        """Publish ``occurrences`` through one producer; each one's task id or error, in
        order. The producer goes back to the free list unless an error says its connection
        or channel may be broken (then it is released, and the next chunk starts afresh)."""
        producer = self._check_out()
        try:
            self._still_blocked(producer)
        except RetryableSubmitError as exc:
            release(producer)
            return [exc] * len(occurrences)
        batch = getattr(producer, "batch", None) if batched else None
        results: list[str | None | Exception] = [UNSENT] * len(occurrences)
        healthy = True
        direct = self._publisher.usable()
        channel = self._framable(producer)
        try:
            if channel is not None:
                healthy = self._send_framed(producer, channel, occurrences, direct, results)
                results = [_UNTRIED if r is UNSENT else r for r in results]
                if not (self._owed and self._owed_channel is channel):
                    healthy = healthy and not any(suspect(r) for r in results)
                # else: kept, with the connection the withheld confirms will come on
                return results
            if batch is None:
                self._send_each(producer, occurrences, direct, results)
            else:
                try:
                    with batch(max_size=BATCH_COMMANDS):
                        self._send_each(producer, occurrences, direct, results)
                except Exception as exc:  # the flush: nothing buffered is known to have landed
                    healthy = False
                    error = RetryableSubmitError(
                        "celery broker batch failed, delivery uncertain: "
                        f"{type(exc).__name__}: {exc}"
                    )
                    return [r if isinstance(r, Exception) else error for r in results]
            results = [_UNTRIED if r is UNSENT else r for r in results]
            healthy = not any(suspect(r) for r in results)
            return results
        finally:
            if healthy:
                self._check_in(producer)
            else:
                release(producer)

    def _check_out(self) -> Any:
        with self._lock:
            if self._closed:
                raise RetryableSubmitError("the Celery submitter is closed")
            if self._idle:
                for i, idle in enumerate(self._idle):
                    if self._owed and getattr(idle, "_channel", None) is self._owed_channel:
                        return self._idle.pop(i)  # it owes the confirms to wait for first
                return self._idle.pop()
        return self.app.producer_pool.acquire(block=True)

    @staticmethod
    def _options(occurrence: Occurrence) -> dict[str, Any]:
        """The schedule's routing as ``send_task`` options, always in the same order."""
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
        return options

    def _send(self, producer: Any, occurrence: Occurrence, *, direct: bool) -> str | None:
        """One message, as ``send_task`` sends it (``direct``: through the :class:`Publisher`,
        which builds the same message for less); kombu/redis errors turned into goatbeat's
        SubmitErrors."""
        routing = occurrence.routing
        options = self._options(occurrence)
        left = expires_left(occurrence, self.expires_from, self.clock)
        expires: float | datetime | None = None
        if left is not None and self.expires_from == "scheduled":
            # Absolute, so the time the message waits in the broker counts too.
            expires = occurrence.scheduled_at + timedelta(seconds=routing.expires or 0)
        elif left is not None:
            expires = left
        # As celery beat 5.7 marks every message it sends (set over the schedule's own
        # headers), then goatbeat's last: a user header must not forge the key.
        headers = {**routing.headers, BEAT_HEADER: True, **key_headers(occurrence)}
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
                    timeouts=self._timeouts,
                )
            if expires is not None:
                options["expires"] = expires
            options = beat_options(self.app, occurrence.task, options)
            result = self.app.send_task(
                occurrence.task,
                args=list(occurrence.args),
                kwargs=dict(occurrence.kwargs),
                task_id=occurrence.idempotency_key,
                producer=producer,
                headers=headers,
                retry=True,
                retry_policy=self._retry_policy,
                **self._timeouts,
                **options,
            )
        except Abandoned as exc:
            raise self._timed_out_error(occurrence, exc) from exc
        except self._missing_queue as exc:
            raise PermanentSubmitError(
                f"schedule {occurrence.schedule_name!r}: queue {routing.queue!r} is not in the "
                "Celery app's task_queues and task_create_missing_queues is off"
            ) from exc
        except self._permanent as exc:
            raise PermanentSubmitError(
                f"celery refused task {occurrence.task!r} "
                f"({occurrence.idempotency_key}): {type(exc).__name__}: {exc}"
            ) from exc
        except self._retryable as exc:
            refused = refusal(exc)
            if refused is not None:
                raise Refused(refused) from exc
            if self.publish_timeout is not None and is_timeout(exc):
                raise self._timed_out_error(occurrence, exc) from exc
            raise RetryableSubmitError(
                f"celery broker unavailable for {occurrence.idempotency_key}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return str(result.id)

    def _still_blocked(self, producer: Any) -> None:
        """After a publish timed out, first ask whether the broker takes messages again: a
        probe to a routing key no queue is bound to (the broker drops it), with its confirm
        awaited. While the broker still blocks publishers, each resend would leave one more
        copy waiting in it; the probe is what waits instead, and the submission fails
        (retryable) without publishing anything. Raises RetryableSubmitError then."""
        if not self._blocked:
            return
        if self._owed:
            owed_channel = self._owed_channel
            if concrete_channel(producer) is owed_channel:
                landed: set[str] = set()
                try:
                    await_confirms(owed_channel, self._owed, self.publish_timeout, landed)
                except Exception as exc:
                    if not is_timeout(exc) and not isinstance(exc, TimeoutError):
                        self._forget_owed()  # the channel is gone, and with it what it owed
                        with contextlib.suppress(Exception):
                            producer.connection.collect()
                    raise RetryableSubmitError(
                        "celery broker still withholds the confirms of an earlier chunk "
                        f"({type(exc).__name__}: {exc}); nothing sent, retried later"
                    ) from exc
                finally:
                    for key in landed:
                        self._land(key)
                    with self._lock:
                        self._inflight -= landed
                self._forget_owed()
                self._blocked = False
                return
            alive = getattr(getattr(owed_channel, "connection", None), "sock", None) is not None
            patience = 3 * (self.publish_timeout or DEFAULT_PUBLISH_TIMEOUT)
            if alive and time.monotonic() - self._owed_since < patience:
                # Its producer is busy elsewhere (a call the scheduler gave up on, still
                # waiting): nothing goes out before those confirms are in.
                raise RetryableSubmitError(
                    "an earlier chunk's confirms are awaited on another connection; nothing "
                    "sent, retried later"
                )
            # That connection is gone, or nobody waits on it any more: what it owed is
            # unknown, and a resend may deliver a second copy.
            self._forget_owed()
        channel = unconfirmed_channel(producer)
        if channel is not None:
            # Without confirms a probe would return at once: wait for the answer to the round
            # trip that timed out (and one more) instead.
            try:
                round_trip(producer, channel, self.publish_timeout)
            except Exception as exc:
                if refusal(exc) is not None:
                    # A refusal of a message already reported sent: it can only be logged.
                    log_event(
                        "submitter.refused",
                        level=logging.ERROR,
                        submitter=self.name,
                        key=None,
                        error=f"after the chunk was reported sent (blocked broker): {exc}",
                    )
                else:
                    with contextlib.suppress(Exception):
                        producer.connection.collect()
                raise RetryableSubmitError(
                    "celery broker still blocks publishers (round trip: "
                    f"{type(exc).__name__}: {exc}); nothing sent, retried later"
                ) from exc
            self._blocked = False
            return
        before = before_classic(concrete_channel(producer))
        try:
            with producer.connection._reraise_as_library_errors():
                producer.publish(
                    b"",
                    exchange="",
                    routing_key=f"goatbeat.probe.{uuid.uuid4().hex}",
                    serializer=None,
                    content_type="application/octet-stream",
                    content_encoding="binary",
                    retry=False,
                    declare=[],
                    **self._timeouts,
                )
        except Exception as exc:
            # Dropped, not closed: the probe still waits in the broker, and its late confirm
            # must not be read as another message's.
            with contextlib.suppress(Exception):
                producer.connection.collect()
            raise RetryableSubmitError(
                f"celery broker still blocks publishers (probe: {type(exc).__name__}: {exc}); "
                "nothing sent, retried later"
            ) from exc
        after_classic(getattr(producer, "_channel", None), before)
        self._blocked = False

    def _forget_owed(self) -> None:
        with self._lock:
            self._inflight -= set(self._owed.values())
            self._owed = {}
            self._owed_channel = None

    def _timed_out_error(self, occurrence: Occurrence, exc: BaseException) -> PublishTimedOut:
        self._blocked = True
        log_event(
            "submitter.publish_timeout",
            level=logging.WARNING,
            submitter=self.name,
            key=occurrence.idempotency_key,
            timeout=self.publish_timeout,
            error=str(exc.__cause__ or exc),
        )
        return PublishTimedOut(
            f"celery broker took no message within {self.publish_timeout:g} s for "
            f"{occurrence.idempotency_key} (a blocked or frozen broker: RabbitMQ's memory "
            "or disk alarm?); connection dropped, delivery uncertain, retried later"
        )

    def _check_in(self, producer: Any) -> None:
        if producer is None:
            return
        with self._lock:
            if not self._closed:
                self._idle.append(producer)
                return
        release(producer)

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
            release(producer)
            return
        self._check_in(producer)

    def bound_calls(self, seconds: float) -> None:
        """The scheduler's bound of outside calls. Every ``submit``/``submit_many`` is already
        bounded by the scheduler (a worker thread waited for at most ``seconds``, since this
        submitter declares ``concurrent_submits``); on a Redis broker the socket waits get
        the same bound too (kombu's ``socket_timeout`` and ``socket_connect_timeout``
        transport options, unless the app sets shorter ones), so a call abandoned on a frozen
        Redis also ends, and frees its producer (connections kombu opens from now on), instead of
        hanging until Redis wakes. The
        AMQP publish path is left as kombu configures it."""
        self._call_bound = seconds
        conf = self.app.conf
        url = str(getattr(conf, "broker_url", None) or "")
        if not url.split("://", 1)[0].startswith(("redis", "rediss", "sentinel")):
            return
        options = conf.broker_transport_options
        options = dict(options) if options else {}
        for key in ("socket_timeout", "socket_connect_timeout"):
            current = options.get(key)
            if current is None or current > seconds:
                options[key] = seconds
        conf.broker_transport_options = options
        with self._lock:
            idle, self._idle = self._idle, []
        for producer in idle:  # made before: a fresh one picks the options up
            release(producer)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
        # A submission still in flight releases its producer when it returns.
        for producer in idle:
            release(producer)
        if self._owns_app:
            self.app.close()


_UNTRIED = RetryableSubmitError(
    "not sent: an earlier publish of the same chunk timed out (blocked or frozen broker)"
)
