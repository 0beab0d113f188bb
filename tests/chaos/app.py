"""The app each chaos scheduler process runs: ``--app tests.chaos.app:beat`` (a factory).

Everything a process does that the checker needs is appended to its own record file
(``$GB_CHAOS_DIR/rec-<scheduler id>.jsonl``), one JSON object per line, one ``os.write`` on an
``O_APPEND`` descriptor per line: the kernel has the line as soon as ``write`` returns, so a
SIGKILL right after cannot lose it (only a host crash could, and the harness never crashes the
host, so no fsync). Records, all with ``t`` = real wall time (``time.time()``, never skewed):

- ``submit-start``: the submitter is about to hand an occurrence to the broker (key, id).
- ``submit``: the broker accepted an occurrence (key, execution id, its fencing token, kind).
- ``submit-error``: the submission failed (key, id, ``error``, and ``landed``: whether the
  broker may have taken the message anyway, i.e. the call timed out after sending it).
- ``pending``: the store is about to read ``claimed`` rows for resubmission; ``t`` is taken
  BEFORE the query, so a row booked before ``t`` cannot be in the answer. ``ids`` and
  their ``keys``.
- ``booked``: ``record_outcomes`` committed; ``ids`` (and ``keys``) are the executions it
  marked submitted.
- ``claimed``: ``claim_due`` committed (``t`` AFTER it returned); ``ids``, ``keys``,
  ``tokens`` of the occurrences it returned. With a promoted standby an execution id may be
  handed out again (the sequence is replicated in steps), so the checker names an execution
  by id and key, and tells which database a claim was made on by its ``t``.

The broker is a real Redis (``GB_CHAOS_REDIS``): each accepted occurrence is one ``LPUSH`` of
its key on the list :data:`DELIVERIES`, with no client-side retry (redis-py would otherwise
resend a command after a timeout, unseen) and a socket timeout longer than the lease, so a
frozen Redis can hold a leader inside the call while a standby takes over.

Environment: ``GB_CHAOS_DSN``, ``GB_CHAOS_REDIS``, ``GB_CHAOS_DIR``, ``GB_CHAOS_SID`` (scheduler
id, also the connection's ``application_name`` so the harness can terminate this process's
backends), ``GOATBEAT_CLOCK_OFFSET`` (goatbeat's own test hook: seconds added to the wall clock
of the whole process, a skewed host), ``GOATBEAT_FREEZE_IN_CLAIM`` (the PostgreSQL store's test
hook: SIGSTOP inside the n-th claim transaction), ``GB_CHAOS_FAIL_RATE`` and ``GB_CHAOS_SEED``
(transient submit failures, deterministic per key and attempt, never more than two in a row).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Collection, Sequence
from typing import Any, ClassVar

from goatbeat.beat import Beat
from goatbeat.core.errors import RetryableSubmitError
from goatbeat.core.model import ClaimResult, LeaseGrant, Occurrence, SubmitOutcome
from goatbeat.core.shards import ALL, Shard
from goatbeat.core.store import ScheduleStore
from goatbeat.stores.postgres import DsnConnectionProvider, PostgresStore
from tests.doubles import AcceptingSubmitter

__all__ = [
    "beat",
    "Recorder",
    "RecordingSubmitter",
    "RecordingPostgresStore",
    "CODE_SCHEDULES",
    "DELIVERIES",
    "BROKER_TIMEOUT",
]

CODE_SCHEDULES = 20
"""Schedules declared in code (published by every process at start, identical each time)."""

APP_NAME_PREFIX = "chaos:"
DELIVERIES = "chaos:deliveries"
"""The Redis list every accepted occurrence's key is pushed on."""
BROKER_TIMEOUT = 5.0
"""Socket timeout of the broker calls: longer than the lease (3 s), so a frozen broker can
hold a leader inside its call past its lease (README, guarantee case 3)."""


class Recorder:
    """Appends JSON lines to one file; each line is a single ``write`` on an O_APPEND fd."""

    def __init__(self, path: str | None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self.keys: dict[int, str] = {}
        """The key of each execution id this process submitted last (for ``booked``)."""

    def write(self, record: dict[str, Any]) -> None:
        if self.fd is None:
            return
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


class RecordingSubmitter(AcceptingSubmitter):
    """Pushes every occurrence's key on a real Redis list and records each attempt; optionally
    fails some attempts before the broker is called (retryable)."""

    name: ClassVar[str] = "chaos-recording"

    def __init__(
        self,
        recorder: Recorder,
        sid: str,
        *,
        redis_url: str | None = None,
        fail_rate: float = 0.0,
        seed: int = 0,
    ):
        self.recorder = recorder
        self.sid = sid
        self.fail_rate = fail_rate
        self.seed = seed
        self.client: Any = None
        if redis_url:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            self.client = redis.Redis.from_url(
                redis_url,
                socket_timeout=BROKER_TIMEOUT,
                socket_connect_timeout=BROKER_TIMEOUT,
                retry=Retry(NoBackoff(), 0),
                retry_on_timeout=False,
            )

    def _record(self, kind: str, occurrence: Occurrence, **extra: Any) -> None:
        self.recorder.keys[occurrence.execution_id] = occurrence.idempotency_key
        self.recorder.write(
            {
                "type": kind,
                "key": occurrence.idempotency_key,
                "id": occurrence.execution_id,
                "sid": self.sid,
                "token": occurrence.fencing_token,
                "kind": occurrence.kind.value,
                "attempts": occurrence.attempts,
                **extra,
                "t": time.time(),
            }
        )

    def submit(self, occurrence: Occurrence) -> str | None:
        key = occurrence.idempotency_key
        if (
            self.fail_rate
            and occurrence.attempts < 2
            and random.Random(f"{self.seed}:{key}:{occurrence.attempts}").random() < self.fail_rate
        ):
            self._record("submit-error", occurrence, error="injected", landed=False)
            raise RetryableSubmitError(f"chaos: injected failure of {key}")
        if self.client is not None:
            self._record("submit-start", occurrence)
            try:
                self.client.lpush(DELIVERIES, key)
            except Exception as exc:
                # Only a refused connection sent nothing. After connecting, the command may
                # have been run: a timeout (a frozen server runs it when it wakes), a
                # connection closed by a server shutting down after appending it.
                landed = "refused" not in str(exc)
                error = f"{type(exc).__name__}: {exc}"[:200]
                self._record("submit-error", occurrence, error=error, landed=landed)
                raise RetryableSubmitError(f"chaos broker: {error}") from None
        self._record("submit", occurrence)
        return key

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


class RecordingPostgresStore(PostgresStore):
    """PostgresStore that records when it reads pending rows and what bookkeeping committed."""

    def __init__(self, dsn: str, recorder: Recorder, sid: str) -> None:
        super().__init__(
            connection_provider=DsnConnectionProvider(
                dsn, connect_timeout=2, application_name=APP_NAME_PREFIX + sid
            )
        )
        self.dsn = dsn
        self.recorder = recorder

    def pending(
        self, *, limit: int, exclude: Collection[int] = (), shard: Shard = ALL
    ) -> list[Occurrence]:
        started = time.time()
        rows = super().pending(limit=limit, exclude=exclude, shard=shard)
        if rows:
            self.recorder.write(
                {
                    "type": "pending",
                    "ids": [o.execution_id for o in rows],
                    "keys": [o.idempotency_key for o in rows],
                    "t": started,
                }
            )
        return rows

    def claim_due(self, lease: LeaseGrant, **kwargs: Any) -> ClaimResult:
        result = super().claim_due(lease, **kwargs)
        if result.occurrences:
            self.recorder.write(
                {
                    "type": "claimed",
                    "ids": [o.execution_id for o in result.occurrences],
                    "keys": [o.idempotency_key for o in result.occurrences],
                    "tokens": [o.fencing_token for o in result.occurrences],
                    "t": time.time(),
                }
            )
        return result

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        super().record_outcomes(outcomes)
        ok = [o.execution_id for o in outcomes if o.ok]
        if ok:
            keys = [self.recorder.keys.get(i) for i in ok]
            self.recorder.write({"type": "booked", "ids": ok, "keys": keys, "t": time.time()})


class ChaosBeat(Beat):
    """A Beat whose store is the recording PostgresStore (named connection, see above)."""

    def __init__(self, dsn: str, recorder: Recorder, sid: str, **kwargs: Any) -> None:
        super().__init__(dsn, **kwargs)
        self._chaos = (dsn, recorder, sid)

    @property
    def store(self) -> ScheduleStore:
        if self._store is None:
            dsn, recorder, sid = self._chaos
            self._store = RecordingPostgresStore(dsn, recorder, sid)
        return self._store


def declare_code_schedules(target: Beat) -> None:
    for i in range(CODE_SCHEDULES):
        target.schedule(
            name=f"code-{i:02d}",
            task="tests.chaos.app.noop",
            every=f"{1 + i % 2}s",
            args=[i],
            misfire="run_once",
            misfire_grace="3s",
        )


def noop(*args: Any) -> None:
    return None


def beat() -> Beat:
    """The factory ``--app tests.chaos.app:beat`` calls in each scheduler process."""
    sid = os.environ.get("GB_CHAOS_SID", f"chaos-{os.getpid()}")
    directory = os.environ.get("GB_CHAOS_DIR")
    recorder = Recorder(os.path.join(directory, f"rec-{sid}.jsonl") if directory else None)
    submitter = RecordingSubmitter(
        recorder,
        sid,
        redis_url=os.environ.get("GB_CHAOS_REDIS") or None,
        fail_rate=float(os.environ.get("GB_CHAOS_FAIL_RATE", "0")),
        seed=int(os.environ.get("GB_CHAOS_SEED", "0")),
    )
    # No clock given: every SystemClock of the process takes GOATBEAT_CLOCK_OFFSET.
    app = ChaosBeat(os.environ["GB_CHAOS_DSN"], recorder, sid, submitter=submitter)
    declare_code_schedules(app)
    return app
