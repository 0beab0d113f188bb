"""The chaos checker must catch each broken guarantee (otherwise a green chaos run proves
nothing). Small hand-built evidence: a clean history passes, each tampering is named."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from goatbeat.core.model import MisfirePolicy, Schedule, Source, idempotency_key
from goatbeat.core.triggers import IntervalTrigger
from tests.chaos.checker import (
    CASES,
    Definition,
    Evidence,
    ExecRow,
    Promotion,
    Segment,
    check,
    expected_claims,
)

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def definition(policy: MisfirePolicy = MisfirePolicy.RUN_ONCE, grace: float = 2, limit: int = 100):
    return Definition(
        trigger=IntervalTrigger("1s"),
        misfire=policy,
        grace=timedelta(seconds=grace),
        catch_up_limit=limit,
    )


class History:
    """One schedule ``s`` firing every second from T0, claimed by a leader."""

    def __init__(self, d: Definition | None = None) -> None:
        self.d = d or definition()
        self.rows: list[ExecRow] = []
        self.records: list[dict] = []
        self.next_id = 1

    def claim(self, at: datetime, instants: list[datetime], token: int = 1, sid: str = "a"):
        for t in instants:
            key = idempotency_key("s", t)
            row = ExecRow(
                id=self.next_id,
                name="s",
                scheduled_at=t,
                key=key,
                kind="scheduled",
                status="submitted",
                token=token,
                scheduler_id=sid,
                claimed_at=at,
            )
            self.next_id += 1
            self.rows.append(row)
            wall = max(at, t).timestamp() + 0.01  # claimed ahead: sent at its instant
            self.records.append(
                {"type": "submit", "key": key, "id": row.id, "token": token, "src": sid, "t": wall}
            )
            self.records.append({"type": "booked", "ids": [row.id], "src": sid, "t": wall + 0.01})

    def evidence(self, next_run_at: datetime, **changes) -> Evidence:
        final = Schedule(
            name="s",
            task="t.f",
            trigger=self.d.trigger,
            misfire=self.d.misfire,
            misfire_grace=self.d.grace,
            catch_up_limit=self.d.catch_up_limit,
            source=Source.ADMIN,
            next_run_at=next_run_at,
            created_at=T0,
        )
        ev = Evidence(
            executions=self.rows,
            final={"s": final},
            segments={"s": [Segment(start=T0, definition=self.d)]},
            records=self.records,
        )
        return dataclasses.replace(ev, **changes)


def steady(h: History, seconds: int = 5) -> datetime:
    """Claims each second on time (10 ms late); returns the final next_run_at."""
    for i in range(1, seconds + 1):
        h.claim(T0 + i * S + timedelta(milliseconds=10), [T0 + i * S])
    return T0 + (seconds + 1) * S


def kinds(ev: Evidence) -> set[str]:
    return {k for k, _ in check(ev).violations}


def test_a_clean_history_passes() -> None:
    h = History()
    report = check(h.evidence(steady(h)))
    assert report.ok, report.summary()
    assert report.figures["occurrences_checked"] == 5


def test_claims_made_ahead_of_their_instant_pass() -> None:
    # claim_ahead: each instant claimed 200 ms before it, planned at the instant itself.
    h = History()
    for i in range(1, 6):
        h.claim(T0 + i * S - timedelta(milliseconds=200), [T0 + i * S])
    report = check(h.evidence(T0 + 6 * S))
    assert report.ok, report.summary()
    assert report.figures["occurrences_checked"] == 5


def test_a_claim_ahead_that_skips_an_instant_is_still_a_lost_occurrence() -> None:
    h = History()
    h.claim(T0 + S - timedelta(milliseconds=200), [T0 + S])
    h.claim(T0 + 3 * S - timedelta(milliseconds=200), [T0 + 3 * S])  # 2 s never claimed
    assert "misfire" in kinds(h.evidence(T0 + 4 * S))


def test_an_instant_claimed_ahead_just_before_an_edit_is_not_owed_again() -> None:
    h = History()
    h.claim(T0 + S - timedelta(milliseconds=200), [T0 + S])
    h.claim(T0 + 2 * S - timedelta(milliseconds=200), [T0 + 2 * S])
    # An edit at 1.9 s (same trigger) resets next_run_at to 2 s, already claimed ahead at 1.8 s.
    edit = T0 + 2 * S - timedelta(milliseconds=100)
    h.claim(T0 + 3 * S - timedelta(milliseconds=200), [T0 + 3 * S])
    segments = [Segment(start=T0, definition=h.d), Segment(start=edit, definition=h.d)]
    report = check(h.evidence(T0 + 4 * S, segments={"s": segments}))
    assert report.ok, report.summary()
    # Without the earlier claim, 2 s is owed by the new segment and lost.
    h.rows = [r for r in h.rows if r.scheduled_at != T0 + 2 * S]
    assert "misfire" in kinds(h.evidence(T0 + 4 * S, segments={"s": segments}))


def test_an_on_time_occurrence_missing_is_lost() -> None:
    h = History()
    nxt = steady(h)
    h.rows = [r for r in h.rows if r.scheduled_at != T0 + 3 * S]
    assert "misfire" in kinds(h.evidence(nxt))


def test_an_outage_under_run_once_owes_exactly_the_latest_late_instant() -> None:
    h = History()
    h.claim(T0 + S + timedelta(milliseconds=5), [T0 + S])
    # Down from 1 s to 10 s: at 10.005 s, instants 2..8 are late (grace 2 s), 9 and 10 on time.
    h.claim(T0 + 10 * S + timedelta(milliseconds=5), [T0 + i * S for i in (9, 10)])
    assert check(h.evidence(T0 + 11 * S)).ok
    bad = History()
    bad.claim(T0 + S + timedelta(milliseconds=5), [T0 + S])
    bad.claim(T0 + 10 * S + timedelta(milliseconds=5), [T0 + i * S for i in (8, 9, 10)])
    assert "misfire" in kinds(bad.evidence(T0 + 11 * S))


@pytest.mark.parametrize(
    ("policy", "limit", "want"),
    [
        (MisfirePolicy.SKIP, 100, [9, 10]),
        (MisfirePolicy.RUN_ONCE, 100, [9, 10]),
        (MisfirePolicy.RUN_ALL, 4, [7, 8, 9, 10]),
        # catch_up_limit caps the whole catch-up, on-time runs included.
        (MisfirePolicy.RUN_ALL, 2, [9, 10]),
        (MisfirePolicy.SKIP, 1, [10]),
        (MisfirePolicy.RUN_ONCE, 1, [10]),
    ],
)
def test_expected_claims_follow_the_policy(policy, limit, want) -> None:
    window = [T0 + i * S for i in range(2, 11)]
    at = T0 + 10 * S + timedelta(milliseconds=5)
    got = expected_claims(definition(policy, 2, limit), window, at)
    assert got == [T0 + i * S for i in want]


def test_run_once_with_nothing_on_time_claims_the_latest_late_instant() -> None:
    window = [T0 + i * S for i in range(2, 6)]
    got = expected_claims(definition(), window, T0 + 20 * S)
    assert got == [T0 + 5 * S]


def test_a_row_never_submitted_is_reported() -> None:
    h = History()
    nxt = steady(h)
    h.records = [r for r in h.records if r.get("id") != 2 and 2 not in r.get("ids", [])]
    assert "not-submitted" in kinds(h.evidence(nxt))


def test_a_resubmission_without_a_pending_read_is_an_unjustified_duplicate() -> None:
    h = History()
    nxt = steady(h)
    again = dict(h.records[0], t=h.records[0]["t"] + 5, src="b")
    h.records.append(again)
    assert "unjustified-duplicate" in kinds(h.evidence(nxt))


def test_a_resubmission_read_after_the_bookkeeping_is_an_unjustified_duplicate() -> None:
    h = History()
    nxt = steady(h)
    booked_at = h.records[1]["t"]
    h.records.append({"type": "pending", "ids": [1], "src": "b", "t": booked_at + 1})
    h.records.append(dict(h.records[0], t=booked_at + 1.1, src="b"))
    assert "unjustified-duplicate" in kinds(h.evidence(nxt))


def test_a_resubmission_of_a_row_left_claimed_by_a_dead_submitter_is_justified() -> None:
    h = History()
    nxt = steady(h)
    h.records = [r for r in h.records if not (r["type"] == "booked" and r["ids"] == [1])]
    first = h.records[0]
    h.records.append({"type": "pending", "ids": [1], "src": "b", "t": first["t"] + 3})
    h.records.append(dict(first, t=first["t"] + 3.1, src="b"))
    report = check(h.evidence(nxt, died={"a"}))
    assert report.ok, report.summary()
    assert report.figures["duplicates_by_cause"] == {CASES[1]: 1}


def test_a_claim_after_an_edit_that_follows_the_old_trigger_is_stale() -> None:
    h = History()
    nxt = steady(h, 3)
    edited = definition(grace=2)
    edited = dataclasses.replace(edited, trigger=IntervalTrigger("2s"), description="edit-1")
    edit_at = T0 + 3 * S + timedelta(milliseconds=500)
    h.claim(T0 + 5 * S + timedelta(milliseconds=10), [T0 + 5 * S])  # odd second: old trigger
    ev = h.evidence(T0 + 6 * S)
    ev.segments["s"].append(Segment(start=edit_at, definition=edited, answered=edit_at))
    ev.final["s"] = dataclasses.replace(ev.final["s"], trigger=edited.trigger, description="edit-1")
    assert "stale-claim" in kinds(ev)
    assert nxt  # the old segment itself was clean


def test_a_final_row_without_the_last_edit_is_an_overwritten_edit() -> None:
    h = History()
    nxt = steady(h, 3)
    edited = dataclasses.replace(definition(), trigger=IntervalTrigger("2s"), description="e")
    ev = h.evidence(nxt)
    ev.segments["s"].append(Segment(start=T0 + 3.5 * S, definition=edited))
    assert "edit-overwritten" in kinds(ev)


def test_a_claim_with_an_older_token_after_a_newer_one_breaks_token_order() -> None:
    h = History()
    h.claim(T0 + S + timedelta(milliseconds=10), [T0 + S], token=2, sid="b")
    h.claim(T0 + 2 * S + timedelta(milliseconds=10), [T0 + 2 * S], token=1, sid="a")
    assert "token-order" in kinds(h.evidence(T0 + 3 * S))


def test_one_token_used_by_two_schedulers_is_reported() -> None:
    h = History()
    h.claim(T0 + S + timedelta(milliseconds=10), [T0 + S], token=1, sid="a")
    h.claim(T0 + 2 * S + timedelta(milliseconds=10), [T0 + 2 * S], token=1, sid="b")
    assert "token-holder" in kinds(h.evidence(T0 + 3 * S))


def test_a_schedule_advanced_past_instants_without_claims_lost_them() -> None:
    h = History()
    steady(h, 3)
    assert "misfire" in kinds(h.evidence(T0 + 8 * S))


def test_a_schedule_that_stopped_advancing_is_stalled() -> None:
    h = History()
    nxt = steady(h)
    assert "stalled" in kinds(h.evidence(nxt, faults_stopped_at=nxt + S))


def paused_history(submissions_after_resume: int) -> Evidence:
    """Leader ``a`` paused from 1.5 s to 5.5 s while ``b`` took over; after waking it hands
    ``submissions_after_resume`` occurrences to the backend, then logs lease.lost at 9 s."""
    h = History()
    steady(h, 5)
    for i in range(submissions_after_resume):
        h.claim(T0 + (6 + i) * S + timedelta(milliseconds=10), [T0 + (6 + i) * S])
    resumed = (T0 + 5.5 * S).timestamp()
    return h.evidence(
        T0 + (6 + submissions_after_resume) * S,
        pauses=[("a", resumed - 4, resumed)],
        lease_polls=[(resumed - 4.5, "a", 1, "scheduler"), (resumed - 1, "b", 2, "scheduler")],
        events={"a": [((T0 + 9 * S).timestamp(), "lease.lost")]},
    )


def test_a_paused_leader_may_finish_the_one_submission_in_flight_then_stands_down() -> None:
    report = check(paused_history(1))
    assert "no-stand-down" not in {k for k, _ in report.violations}
    assert report.figures["pauses_replaced"] == report.figures["pauses_stood_down"] == 1


def test_a_paused_leader_that_keeps_submitting_after_waking_is_reported() -> None:
    assert "no-stand-down" in kinds(paused_history(3))


# -- the broker, missed runs, refused and damaged schedules --------------------------------------


def test_a_leader_hung_inside_the_broker_call_is_case_3() -> None:
    h = History()
    nxt = steady(h)
    first = h.records[0]
    began = first["t"]
    # It started the call at its instant, a standby read the row pending 1 s later and
    # resubmitted; the hung call returned after 3 s, and booked after that.
    first["t"] = began + 3
    h.records.append({"type": "submit-start", "key": first["key"], "id": 1, "src": "a",
                      "t": began})  # fmt: skip
    h.records.append({"type": "pending", "ids": [1], "src": "b", "t": began + 1})
    h.records.append(dict(first, t=began + 1.1, src="b"))
    for r in h.records:
        if r["type"] == "booked" and r["ids"] == [1]:
            r["t"] = began + 3.5
    broker = Counter({r.key: 1 for r in h.rows}) + Counter({first["key"]: 1})
    report = check(h.evidence(nxt, broker=broker))
    assert report.ok, report.summary()
    assert report.figures["duplicates_by_cause"] == {CASES[3]: 1}


def test_broker_copies_beyond_the_accepted_ones_need_an_attempt_that_may_have_landed() -> None:
    h = History()
    nxt = steady(h)
    key = h.rows[0].key
    broker = Counter({r.key: 1 for r in h.rows}) + Counter({key: 1})
    assert "broker-duplicate" in kinds(h.evidence(nxt, broker=broker))
    h.records.append({"type": "submit-error", "key": key, "id": 1, "src": "a", "t": 0.0,
                      "landed": True})  # fmt: skip
    report = check(h.evidence(nxt, broker=broker))
    assert report.ok, report.summary()
    assert report.figures["duplicates_by_cause"] == {CASES[4]: 1}


def test_an_accepted_submission_missing_from_the_broker_is_lost() -> None:
    h = History()
    nxt = steady(h)
    broker = Counter({r.key: 1 for r in h.rows[1:]})
    assert "lost-message" in kinds(h.evidence(nxt, broker=broker))


def _missed(h: History, index: int, error_at: float) -> None:
    row = h.rows[index]
    h.rows[index] = dataclasses.replace(
        row, status="submit_failed", error="missed: not accepted within its misfire grace"
    )
    h.records = [r for r in h.records if r.get("id") != row.id and row.id not in r.get("ids", [])]
    h.records.append({"type": "submit-error", "key": row.key, "id": row.id, "src": "a",
                      "t": error_at, "landed": False})  # fmt: skip


def test_a_run_missed_while_the_broker_was_down_is_allowed_and_counted() -> None:
    h = History()
    nxt = steady(h)
    due = (h.rows[2].scheduled_at + h.d.grace).timestamp()
    _missed(h, 2, due + 0.5)
    outage = [(due - 3, due + 1)]
    report = check(h.evidence(nxt, broker_faults=outage))
    assert report.ok, report.summary()
    assert report.figures["missed_in_broker_outages"] == 1
    # Without a broker fault, the same miss is a lost occurrence.
    assert "not-submitted" in kinds(h.evidence(nxt))
    # Declared missed long before its grace ran out: reported.
    early = History()
    nxt = steady(early)
    due = (early.rows[2].scheduled_at + early.d.grace).timestamp()
    _missed(early, 2, due - 1.5)
    assert "early-miss" in kinds(early.evidence(nxt, broker_faults=[(due - 3, due)]))


def _evil(name: str, *, status: str, error: str, submitted: bool = False) -> tuple[Any, ...]:
    final = Schedule(
        name=name,
        task="os.system",
        trigger=IntervalTrigger("1s"),
        source=Source.ADMIN,
        last_status="refused",
        created_at=T0,
    )
    row = ExecRow(id=99, name=name, scheduled_at=T0, key=f"{name}:x", kind="scheduled",
                  status=status, token=1, scheduler_id="a", claimed_at=T0, error=error)  # fmt: skip
    records = [{"type": "submit", "key": row.key, "id": 99, "token": 1, "src": "a", "t": 1.0}]
    return final, row, records if submitted else []


def test_a_refused_schedule_must_never_reach_the_broker() -> None:
    h = History()
    nxt = steady(h)
    final, row, _ = _evil("evil-000", status="submit_failed", error="refused: not known")
    ev = h.evidence(nxt)
    ok = dataclasses.replace(ev, final={**ev.final, "evil-000": final}, executions=[*h.rows, row])
    assert check(ok).ok, check(ok).summary()
    final, row, records = _evil("evil-000", status="submitted", error="", submitted=True)
    bad = dataclasses.replace(
        ev,
        final={**ev.final, "evil-000": final},
        executions=[*h.rows, row],
        records=[*h.records, *records],
    )
    assert "refused" in kinds(bad)


def test_a_damaged_schedule_may_only_stop_running() -> None:
    h = History()
    nxt = steady(h)
    damaged_at = (T0 + 3 * S).timestamp()
    report = check(h.evidence(nxt, damaged={"s": damaged_at + 5}))
    assert report.ok, report.summary()
    assert "damaged" in kinds(h.evidence(nxt, damaged={"s": damaged_at - 2}))


def test_a_broker_copy_from_a_call_its_process_died_in_is_case_1() -> None:
    h = History()
    nxt = steady(h)
    key = h.rows[0].key
    broker = Counter({r.key: 1 for r in h.rows}) + Counter({key: 1})
    h.records.append({"type": "submit-start", "key": key, "id": 1, "src": "x", "attempts": 0,
                      "t": h.rows[0].scheduled_at.timestamp() + 0.5})  # fmt: skip
    assert "broker-duplicate" in kinds(h.evidence(nxt, broker=broker))  # x did not die
    report = check(h.evidence(nxt, broker=broker, died={"x"}))
    assert report.ok, report.summary()
    assert report.figures["duplicates_by_cause"] == {CASES[1]: 1}


def test_a_submission_before_its_instant_is_early() -> None:
    h = History()
    nxt = steady(h)
    assert check(h.evidence(nxt)).figures["early"] == 0
    h.records[0]["t"] = h.rows[0].scheduled_at.timestamp() - 0.2
    assert "early" in kinds(h.evidence(nxt))


def test_a_missed_run_whose_earlier_submission_was_never_booked_is_allowed() -> None:
    h = History()
    nxt = steady(h)
    row = h.rows[2]
    due = (row.scheduled_at + h.d.grace).timestamp()
    submit = next(r for r in h.records if r["type"] == "submit" and r["id"] == row.id)
    _missed(h, 2, due + 0.5)
    h.records.append(dict(submit, src="dead"))  # accepted, then its scheduler died unbooked
    report = check(h.evidence(nxt, broker_faults=[(due - 3, due + 1)], died={"dead"}))
    assert report.ok, report.summary()
    assert report.figures["missed_though_delivered"] == 1
    h.records.append({"type": "booked", "ids": [row.id], "src": "dead", "t": due})
    assert "not-submitted" in kinds(h.evidence(nxt, broker_faults=[(due - 3, due + 1)]))


def test_a_lone_copy_of_a_run_reported_failed_is_no_duplicate() -> None:
    h = History()
    nxt = steady(h)
    row = h.rows[2]
    due = (row.scheduled_at + h.d.grace).timestamp()
    _missed(h, 2, due + 0.5)
    h.records[-1]["landed"] = True  # the connection closed after the broker appended it
    broker = Counter({r.key: 1 for r in h.rows})
    report = check(h.evidence(nxt, broker=broker, broker_faults=[(due - 3, due + 1)]))
    assert report.ok, report.summary()
    assert report.figures["duplicates_by_cause"] == {}
    assert report.figures["missed_though_delivered"] == 1


# -- a promoted standby ----------------------------------------------------------------------


def _promoted(
    *, sync: bool = False, lost: bool = True, replay_at: float = 3.5, logged: bool = True
) -> tuple[History, dict]:
    """Claims at 1..3 s replicated; the claim of 4 s (id 4, token 1) committed on the old
    primary at 4.01 s and sent, its WAL never shipped; crash at 4.3 s, promotion at 5.3 s;
    the new primary hands out id 4 again: 4 s and 5 s claimed at 5.6 s with token 2."""
    h = History()
    for i in range(1, 4):
        h.claim(T0 + i * S + timedelta(milliseconds=10), [T0 + i * S])
    at = (T0 + 4 * S).timestamp()
    key4 = idempotency_key("s", T0 + 4 * S)
    h.records += [
        {"type": "claimed", "ids": [4], "keys": [key4], "tokens": [1], "src": "a", "t": at + 0.01},
        {"type": "submit", "key": key4, "id": 4, "token": 1, "src": "a", "t": at + 0.02},
    ]
    h.next_id = 4
    h.claim(T0 + 5 * S + timedelta(milliseconds=600), [T0 + 4 * S, T0 + 5 * S], token=2, sid="b")
    new = [r for r in h.records if r.get("src") == "b" and r["type"] == "submit"]
    h.records.append(
        {
            "type": "claimed",
            "ids": [r["id"] for r in new],
            "keys": [r["key"] for r in new],
            "tokens": [2, 2],
            "src": "b",
            "t": new[0]["t"] - 0.005,
        }
    )
    promotion = Promotion(
        n=1,
        sync=sync,
        crash_at=at + 0.3,
        crashed_at=at + 0.31,
        promote_at=at + 1.3,
        promoted_at=at + 1.5,
        replay_ts=T0.timestamp() + replay_at,
        lost_claims={(4, key4): 1} if lost else {},
        leases_standby={"scheduler": ("a", 1)},
    )
    changes = [(at + 1.8, "b", "promotion: the database is on a new timeline", [key4])]
    extra = {
        # b worked on the old primary and leads on the promoted one: it must say so.
        "events": {"b": [(at - 2, "lease.standby"), (at + 1.9, "lease.acquired")]},
        "promotions": [promotion],
        "changes": changes if logged else [],
        "starts": {"a": T0.timestamp(), "b": T0.timestamp()},
        "acquisitions": [("a", 1, "scheduler"), ("b", 2, "scheduler")],
        "acquired_at": [T0.timestamp(), at + 1.55],
    }
    return h, extra


def test_a_claim_lost_with_the_wal_not_shipped_explains_its_repeat() -> None:
    h, extra = _promoted()
    report = check(h.evidence(T0 + 6 * S, **extra))
    assert report.ok, report.summary()
    assert report.figures["doubled"] == 1
    assert report.figures["doubled_explained_by_the_wal_not_shipped"] == 1
    assert report.figures["doubled_named_by_goatbeat"] == 1
    assert report.figures["first_claim_by_a_scheduler_up_before_the_crash"] == 1


def test_a_repeat_the_promotion_did_not_lose_is_a_violation() -> None:
    h, extra = _promoted(lost=False)
    assert {"wrong-token", "unjustified-duplicate"} <= kinds(h.evidence(T0 + 6 * S, **extra))


def test_a_synchronous_standby_that_lost_a_claim_is_a_violation() -> None:
    h, extra = _promoted(sync=True)
    assert "promotion-lost" in kinds(h.evidence(T0 + 6 * S, **extra))


def test_a_lost_claim_acknowledged_before_the_standbys_last_replayed_commit_is_unexplained():
    h, extra = _promoted(replay_at=4.5)  # the standby had a commit later than that claim's
    assert "promotion-unexplained" in kinds(h.evidence(T0 + 6 * S, **extra))


def test_a_promotion_goatbeat_did_not_log_is_a_violation() -> None:
    h, extra = _promoted(logged=False)
    assert "promotion-not-logged" in kinds(h.evidence(T0 + 6 * S, **extra))


def test_a_token_issued_only_by_the_old_primary_may_be_issued_again() -> None:
    h, extra = _promoted()
    at = (T0 + 4 * S).timestamp()
    # "c" took the lease with token 2 on the old primary after the standby's copy (token 1).
    extra["acquisitions"] = [*extra["acquisitions"], ("c", 2, "scheduler")]
    extra["acquired_at"] = [*extra["acquired_at"], at + 0.1]
    report = check(h.evidence(T0 + 6 * S, **extra))
    assert report.ok, report.summary()
    # Had the standby's copy already held token 2, two holders of token 2 is a violation.
    extra["promotions"] = [
        dataclasses.replace(extra["promotions"][0], leases_standby={"scheduler": ("c", 2)})
    ]
    assert "token-holder" in kinds(h.evidence(T0 + 6 * S, **extra))


def test_a_second_call_of_the_same_process_cut_by_its_death_may_have_landed() -> None:
    # "a" sent row 3, read it again as pending (its bookkeeping not yet visible), called the
    # broker again with the same attempts count and was killed inside that call.
    h = History()
    nxt = steady(h)
    row = h.rows[2]
    submit = next(r for r in h.records if r["type"] == "submit" and r["id"] == row.id)
    start = {k: submit[k] for k in ("key", "id", "token", "src")}
    h.records += [
        dict(start, type="submit-start", t=submit["t"] - 0.001),
        dict(start, type="submit-start", t=submit["t"] + 1),
    ]
    broker = Counter({r.key: 1 for r in h.rows})
    broker[row.key] = 2
    report = check(h.evidence(nxt, broker=broker, died={"a"}))
    assert report.ok, report.summary()
    assert "broker-duplicate" in kinds(h.evidence(nxt, broker=broker))  # nobody died: no cause


def test_a_claim_begun_just_before_an_edit_may_follow_the_new_definition() -> None:
    # Every 2 s, then an edit at 7.5 s to every 3 s; a claim whose transaction began 1 ms
    # before the edit's read the row after the edit committed: it claims 9 s, an instant of
    # the new definition only (seen in a soak, 1.5 ms apart).
    h = History(definition())
    h.d = dataclasses.replace(h.d, trigger=IntervalTrigger("2s"))
    for i in (2, 4, 6):
        h.claim(T0 + i * S + timedelta(milliseconds=10), [T0 + i * S])
    edit = T0 + 7 * S + timedelta(milliseconds=500)
    new = dataclasses.replace(h.d, trigger=IntervalTrigger("3s"))
    assert new.trigger.next_after(edit) == T0 + 9 * S
    h.claim(edit - timedelta(milliseconds=1), [T0 + 9 * S])
    segments = [Segment(start=T0, definition=h.d), Segment(start=edit, definition=new)]
    h.d = new  # the final row carries the edit
    report = check(h.evidence(T0 + 12 * S, segments={"s": segments}))
    assert report.ok, report.summary()
    # Begun seconds before the edit, the same claim is stale.
    h.rows[-1] = dataclasses.replace(h.rows[-1], claimed_at=edit - 3 * S)
    assert "stale-claim" in kinds(h.evidence(T0 + 12 * S, segments={"s": segments}))
