"""A chunk's sending, for :class:`~goatbeat.submitters.celery.CelerySubmitter`: on RabbitMQ
through py-amqp the chunk's frames in one socket write (:mod:`~goatbeat.submitters._amqp_batch`)
and one wait for its confirms, or one round trip on its channel without them; elsewhere one
message after the other. A channel error the broker raised (404, 406) is put on the message
that caused it, and what the broker discarded after it is sent again.

:class:`ChunkSending` is mixed into the submitter, whose state (its lock, the confirms it is
owed, the task ids known landed or in flight) it reads and updates; the message itself is the
submitter's (``_send``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from goatbeat.core.errors import RetryableSubmitError
from goatbeat.core.model import Occurrence
from goatbeat.core.observability import log_event
from goatbeat.submitters._amqp_batch import (
    FrameBatch,
    after_classic,
    batchable,
    before_classic,
    forget_tags,
)
from goatbeat.submitters._celery_channel import round_trip, same, unconfirmed_channel
from goatbeat.submitters._celery_errors import (
    BrokerRefused,
    PublishTimedOut,
    Refused,
    is_timeout,
    named_exchange,
    refusal,
    suspect,
)
from goatbeat.submitters._celery_publish import Publisher

__all__ = ["BATCH_COMMANDS", "ChunkSending", "LANDED_LIMIT", "UNSENT"]

BATCH_COMMANDS = 100_000
"""kombu's batch ``max_size`` counts Redis commands; the scheduler's chunks (50 messages) stay
far below it, so each chunk is flushed exactly once, when it ends."""

LANDED_LIMIT = 10_000
"""Confirmed task ids remembered, to answer a resubmission without a second copy."""

UNSENT: Any = RetryableSubmitError("not sent")
"""A chunk's placeholder for a message not (or not yet) sent."""

_BASIC_PUBLISH = (60, 40)
"""The AMQP (class, method) of ``basic.publish``, as a channel error names it."""


class ChunkSending:
    """The sending half of :class:`~goatbeat.submitters.celery.CelerySubmitter` (a mixin):
    :meth:`_send_framed` and :meth:`_send_each` publish a chunk and put each message's fate
    in ``results``."""

    # The submitter's, set by its __init__ (see CelerySubmitter.__init__ for what each holds).
    name: ClassVar[str]
    publish_timeout: float | None
    _batch_publish: bool
    _publisher: Publisher
    _lock: threading.Lock
    _blocked: bool
    _owed: dict[int, str]
    _owed_channel: Any
    _owed_since: float
    _landed: dict[str, None]
    _inflight: set[str]
    _call_bound: float | None

    @abstractmethod
    def _send(self, producer: Any, occurrence: Occurrence, *, direct: bool) -> str | None:
        """One message (the submitter's)."""

    @abstractmethod
    def _timed_out_error(self, occurrence: Occurrence, exc: BaseException) -> PublishTimedOut:
        """The error of a publish that timed out (the submitter's)."""

    @staticmethod
    @abstractmethod
    def _options(occurrence: Occurrence) -> dict[str, Any]:
        """The schedule's routing as ``send_task`` options (the submitter's)."""

    def _framable(self, producer: Any) -> Any | None:
        """``producer``'s py-amqp channel when this chunk can go out in one socket write
        (:mod:`~goatbeat.submitters._amqp_batch`): RabbitMQ through py-amqp, connected, a
        ``Producer.batch`` to publish in, ``batch_publish`` on; else None (one by one)."""
        if not self._batch_publish or getattr(producer, "batch", None) is None:
            return None
        try:
            if not producer.connection.connected:
                return None  # the first publish connects, with kombu's retry policy
            channel = producer.channel
        except Exception:  # the publish will meet it, and handle it
            return None
        return channel if batchable(channel) else None

    def _send_framed(
        self,
        producer: Any,
        channel: Any,
        occurrences: Sequence[Occurrence],
        direct: bool,
        results: list[str | None | Exception],
    ) -> bool:
        """Publish ``occurrences`` through a :class:`FrameBatch`: every message built and
        published by kombu as usual, the frames written in one go, then with confirms one
        wait for all the acks, without them one round trip (:meth:`_verify`). Each message's
        fate is its occurrence's: acked (or routed) is submitted, nacked or unknown is
        retryable, refused (404/406) is :class:`BrokerRefused` and what the broker discarded
        after it is sent again. Returns False when the connection was dropped."""
        todo = list(range(len(occurrences)))
        started = time.monotonic()
        for _ in range(len(occurrences) + 2):  # each round settles at least one message
            if not todo:
                break
            session = FrameBatch(channel, self.publish_timeout)
            written: set[str] = set()
            vars(channel)["create_publish_batch"] = functools.partial(same, session)
            try:
                with producer.batch(max_size=BATCH_COMMANDS):
                    for index in todo:
                        session.owner = index
                        result = self._send_or_error(producer, occurrences[index], direct)
                        results[index] = result
                        if isinstance(result, Refused):  # a declaration's: this message's own
                            self._attribute(result.error, occurrences, results, [], index)
                        elif isinstance(result, PublishTimedOut):
                            break
                    written = {occurrences[i].idempotency_key for i in set(session.owners)}
                    if session.confirm:
                        with self._lock:
                            self._inflight |= written
                    settled = session.settle()
            except Exception as exc:  # kombu's batch itself (a channel replaced under it)
                uncertain = RetryableSubmitError(
                    f"celery broker batch failed, delivery uncertain: {type(exc).__name__}: {exc}"
                )
                for index in todo:
                    if not isinstance(results[index], Exception):
                        results[index] = uncertain
                return False
            finally:
                vars(channel).pop("create_publish_batch", None)
                if session.confirm:
                    with self._lock:
                        self._inflight -= written - set(self._owed.values())
            todo = []
            first: dict[int, int] = {}
            for position, owner in enumerate(session.owners):
                first.setdefault(owner, position)
            sent = [i for i in sorted(first) if not isinstance(results[i], Exception)]
            error = settled.error
            if error is None and not session.confirm:
                todo = self._verify(producer, occurrences, results, sent)
                continue
            unknown: list[int] = []
            for index in sent:
                outcome = settled.outcomes[first[index]]
                if outcome == "ok":
                    if self._abandoned(started):
                        self._land(occurrences[index].idempotency_key)
                elif outcome == "nack":
                    results[index] = RetryableSubmitError(
                        f"celery broker refused (nack) {occurrences[index].idempotency_key}; "
                        "retried later"
                    )
                elif outcome == "unknown":
                    unknown.append(index)
            if error is None or not unknown:
                continue
            refused = refusal(error)
            if refused is not None and settled.written:
                todo = self._attribute(refused, occurrences, results, unknown, None)
                continue
            timed_out = is_timeout(error) or isinstance(error, TimeoutError)
            if timed_out and settled.written and session.confirm and not self._owed:
                # Written, acks withheld (a broker blocking publishers): the connection stays,
                # and the next submission waits for those acks first (_still_blocked), so a
                # message the broker took after all is not sent twice.
                first_tag = {i: settled.base + 1 + first[i] for i in unknown}
                with self._lock:
                    self._owed = {first_tag[i]: occurrences[i].idempotency_key for i in unknown}
                    self._owed_channel = channel
                    self._owed_since = time.monotonic()
                    self._inflight |= set(self._owed.values())
                abandoned = self._timed_out_error(occurrences[unknown[0]], error)
                for index in unknown:
                    results[index] = abandoned
                return True
            # Not written, partly written, or no answer: the connection cannot be trusted
            # (a frame half on the wire, late acks for tags given out), so it goes.
            with contextlib.suppress(Exception):
                producer.connection.collect()
            if timed_out:
                failure: Exception = self._timed_out_error(occurrences[unknown[0]], error)
            else:
                failure = RetryableSubmitError(
                    f"celery broker failed before it confirmed, delivery uncertain: "
                    f"{type(error).__name__}: {error}"
                )
            for index in unknown:
                results[index] = failure
            return False
        return True

    def _send_each(
        self,
        producer: Any,
        occurrences: Sequence[Occurrence],
        direct: bool,
        results: list[str | None | Exception],
    ) -> None:
        """Send ``occurrences`` one after the other, putting each one's result in
        ``results``; stops after a publish that timed out (the rest is left unsent). A channel
        error the broker raised is put on the message that caused it (:meth:`_attribute`),
        and what the broker discarded after it is sent again, on the channel py-amqp reopened.
        On RabbitMQ without confirms the chunk ends with a round trip (:meth:`_verify`)."""
        todo = list(range(len(occurrences)))
        # Indexes of messages sent on a RabbitMQ channel without confirms since its last
        # round trip: accepted, or not, as far as anybody knows yet.
        unverified: list[int] = []
        unconfirmed: bool | None = None
        # Each resend follows a refusal that settled at least one message: bounded anyway.
        budget = 3 * len(occurrences) + 3
        while todo and budget > 0:
            budget -= 1
            index = todo.pop(0)
            before = before_classic(getattr(producer, "_channel", None))
            result = self._send_or_error(producer, occurrences[index], direct)
            results[index] = result
            if not isinstance(result, Exception):
                after_classic(getattr(producer, "_channel", None), before)
            elif suspect(result):
                forget_tags(getattr(producer, "_channel", None))
            if isinstance(result, Refused):
                todo[:0] = self._attribute(result.error, occurrences, results, unverified, index)
            elif isinstance(result, PublishTimedOut):
                return
            elif not isinstance(result, Exception):
                if unconfirmed is None:
                    unconfirmed = unconfirmed_channel(producer) is not None
                if unconfirmed:
                    unverified.append(index)
            if not todo and unverified:
                todo = self._verify(producer, occurrences, results, unverified)

    def _send_or_error(
        self, producer: Any, occurrence: Occurrence, direct: bool
    ) -> str | None | Exception:
        key = occurrence.idempotency_key
        if key in self._landed:
            # Its message was confirmed after its publish had been given up on: delivered.
            with self._lock:
                self._landed.pop(key, None)
            return key
        if key in self._inflight:
            return RetryableSubmitError(
                f"{key}: its message awaits the broker's confirm on another connection; "
                "not sent again, retried later"
            )
        try:
            return self._send(producer, occurrence, direct=direct)
        except Exception as exc:  # reported for this occurrence; the others still go
            return exc

    def _attribute(
        self,
        error: BaseException,
        occurrences: Sequence[Occurrence],
        results: list[str | None | Exception],
        unverified: list[int],
        current: int | None,
    ) -> list[int]:
        """Put a channel error the broker raised (404 or 406, :func:`refusal`) on the message
        that caused it, in ``results``, and settle the chunk's unverified messages; returns
        the indexes of the messages the broker never took, to send again.

        The broker closes the channel on the first method it refuses and discards every
        later one on it. An error on a declaration (a queue's, an exchange's: synchronous)
        is the ``current`` message's own, and everything sent before it on the channel was
        accepted. An error on a ``basic.publish`` is the current message's when the channel
        has confirms (nothing is left unverified there); without them it arrives later, and
        belongs to one of the ``unverified`` messages: the only one, or the first whose
        exchange the broker's text names. The unverified messages before it were accepted,
        those after it were discarded, and the ``current`` one was not sent (the error was
        read before it went out): those are returned. When the culprit cannot be told, every
        unverified message counts as a retryable failure, delivery uncertain."""
        text = f"({getattr(error, 'reply_code', '?')}) {getattr(error, 'reply_text', error)}"
        on_publish = getattr(error, "method_sig", None) == _BASIC_PUBLISH
        culprit: int | None = None
        if current is not None and (not on_publish or not unverified):
            culprit, unverified[:] = current, []
        elif on_publish and unverified:
            named = named_exchange(error)
            if len(unverified) == 1:
                culprit = unverified[0]
            else:
                culprit = next(
                    (i for i in unverified if named in self._exchanges(occurrences[i])), None
                )
        resend: list[int] = []
        if culprit is None:
            uncertain = RetryableSubmitError(
                f"RabbitMQ refused one of {len(unverified)} unconfirmed messages {text}, "
                "which one is unknown without publisher confirms: delivery uncertain, "
                "retried later"
            )
            for i in unverified:
                results[i] = uncertain
        else:
            occ = occurrences[culprit]
            exchange = next(iter(sorted(self._exchanges(occ))), None)
            results[culprit] = BrokerRefused(occ, error, named_exchange(error) or exchange)
            resend = [i for i in unverified if i > culprit]
        if current is not None and current != culprit:
            resend.append(current)
        for i in resend:
            results[i] = UNSENT
        unverified[:] = []
        log_event(
            "submitter.refused",
            level=logging.ERROR,
            submitter=self.name,
            key=None if culprit is None else occurrences[culprit].idempotency_key,
            error=text,
        )
        return resend

    def _exchanges(self, occurrence: Occurrence) -> set[str]:
        """The exchange names ``occurrence``'s message may have gone to: its schedule's own,
        and the one its route or queue gives it (the :class:`Publisher`'s record)."""
        names = set()
        if occurrence.routing.exchange is not None:
            names.add(occurrence.routing.exchange)
        names |= self._publisher.exchanges(occurrence.task, self._options(occurrence))
        return names

    def _verify(
        self,
        producer: Any,
        occurrences: Sequence[Occurrence],
        results: list[str | None | Exception],
        unverified: list[int],
    ) -> list[int]:
        """End a chunk sent without publisher confirms with one round trip on its channel
        (``basic.qos`` and its ``qos-ok``, bounded by ``publish_timeout``): the broker handles
        a channel's methods in order, so the answer says every message before it was routed,
        and a channel close arriving instead names the refused one (:meth:`_attribute`). A
        round trip that times out (a broker blocking publishers) leaves the messages reported
        sent, as written to the socket, and the next submission waits for the answer first
        (:meth:`_still_blocked`); a connection that fails leaves their delivery uncertain:
        retryable. Returns what the broker discarded after a refusal, to send again."""
        channel = unconfirmed_channel(producer)
        if channel is None:
            unverified[:] = []
            return []
        try:
            round_trip(producer, channel, self.publish_timeout)
        except Exception as exc:
            refused = refusal(exc)
            if refused is not None:
                return self._attribute(refused, occurrences, results, unverified, None)
            if is_timeout(exc):
                self._blocked = True
            else:
                uncertain = RetryableSubmitError(
                    "celery broker connection failed before it answered for the chunk, "
                    f"delivery uncertain: {type(exc).__name__}: {exc}"
                )
                for i in unverified:
                    results[i] = uncertain
        unverified[:] = []
        return []

    def _abandoned(self, started: float) -> bool:
        """Whether a call that started at ``started`` (monotonic) has outlived the scheduler's
        bound of it, so the scheduler no longer waits for its answer."""
        bound = self._call_bound
        return bound is not None and time.monotonic() - started >= 0.8 * bound

    def _land(self, key: str) -> None:
        """Remember that the broker confirmed ``key``'s message (the latest few thousand)."""
        with self._lock:
            self._landed[key] = None
            if len(self._landed) > LANDED_LIMIT:
                del self._landed[next(iter(self._landed))]
