"""Conformance: the submit backoff in the execution row, and missed occurrences (every store).

A failed submission that will be retried leaves its row ``claimed`` with ``retry_at`` = the
store's now plus ``retry_in``: ``pending()`` leaves it out until then, whoever asks (the backoff
outlives the scheduler that failed), and ``next_retry_at()`` says when to wake. A final failure
whose grace ran out (``missed``) counts in the schedule's ``missed_count``."""

from __future__ import annotations

from datetime import timedelta

from goatbeat.core.model import ExecutionStatus, SubmitOutcome
from goatbeat.core.store import ScheduleStore
from tests.conformance.conftest import Backend
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, lease


def test_a_row_backing_off_is_left_out_of_pending_until_its_retry(
    backend: Backend, store: ScheduleStore
) -> None:
    store.publish([hourly("later"), hourly("now"), hourly("plain")])
    grant = lease(store)
    occ = {o.schedule_name: o for o in claim_all(store, grant, T0 + HOUR)}
    assert store.next_retry_at() is None

    before = store.now()
    store.record_outcomes(
        [
            SubmitOutcome(
                execution_id=occ["later"].execution_id, ok=False, error="down", retry_in=3600.0
            ),
        ]
    )

    # Another store object (another scheduler): the backoff is in the rows, not in a process.
    other = backend.make()
    for reader in (store, other):
        assert [p.schedule_name for p in reader.pending(limit=10)] == ["now", "plain"]
        retry_at = reader.next_retry_at()
        assert retry_at is not None
        assert before + timedelta(minutes=59) < retry_at < store.now() + timedelta(minutes=61)
    later = store.executions(name="later")[0]
    assert (later.status, later.attempts, later.error) == (ExecutionStatus.CLAIMED, 1, "down")

    # A retry due at once is pending at once, and is the earliest retry.
    store.record_outcomes(
        [SubmitOutcome(execution_id=occ["now"].execution_id, ok=False, retry_in=0.0)]
    )
    assert [p.schedule_name for p in store.pending(limit=10)] == ["now", "plain"]
    earliest = store.next_retry_at()
    assert earliest is not None and earliest <= store.now()

    # Submitted at last: the rows leave the backoff.
    store.record_outcomes([SubmitOutcome(execution_id=occ["now"].execution_id, ok=True)])
    assert store.next_retry_at() == retry_at
    store.record_outcomes([SubmitOutcome(execution_id=occ["later"].execution_id, ok=True)])
    assert store.next_retry_at() is None


def test_pending_rows_carry_their_schedules_grace(store: ScheduleStore) -> None:
    store.publish([hourly("a", misfire_grace=timedelta(minutes=10))])
    store.request_run("a")
    (manual,) = store.pending(limit=10)
    assert manual.misfire_grace == timedelta(minutes=10)


def test_a_missed_failure_counts_in_missed_count_and_shows_in_last_status(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("a"), hourly("b")])
    grant = lease(store)
    first = {o.schedule_name: o for o in claim_all(store, grant, T0 + HOUR)}
    second = {o.schedule_name: o for o in claim_all(store, grant, T0 + 2 * HOUR)}

    store.record_outcomes(
        [
            SubmitOutcome(
                execution_id=first["a"].execution_id,
                ok=False,
                final=True,
                missed=True,
                error="missed: grace ran out",
            ),
            SubmitOutcome(
                execution_id=second["a"].execution_id,
                ok=False,
                final=True,
                missed=True,
                error="missed: grace ran out",
            ),
            SubmitOutcome(
                execution_id=first["b"].execution_id, ok=False, final=True, error="no such task"
            ),
        ]
    )

    a, b = store.get("a"), store.get("b")
    assert (a.missed_count, a.last_status) == (2, "missed")
    assert (b.missed_count, b.last_status) == (0, "submit_failed")
    statuses = {e.idempotency_key: e.status for e in store.executions(limit=10)}
    assert statuses[first["a"].idempotency_key] is ExecutionStatus.SUBMIT_FAILED
    assert statuses[second["a"].idempotency_key] is ExecutionStatus.SUBMIT_FAILED
    # A late report about a row no longer claimed counts nothing twice.
    store.record_outcomes(
        [SubmitOutcome(execution_id=first["a"].execution_id, ok=False, final=True, missed=True)]
    )
    assert store.get("a").missed_count == 2
