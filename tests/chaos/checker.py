"""The chaos checker: reads what happened and says which guarantee, if any, was broken.

Evidence (see :func:`load_evidence`): the executions table and the final schedule rows (read
after the run), the per-process record files of ``tests/chaos/app.py`` (``submit``,
``pending``, ``booked``), the harness's definition log (each schedule's definition at creation
and after every admin edit that landed, with the DATABASE time of that write), its lease
observations, and the scheduler processes' JSON logs.

What is asserted, and what is allowed (and why):

``duplicate-claim``
    No idempotency key twice in the executions table, no (schedule, instant) twice.

``not-submitted`` / ``unknown-submission`` / ``wrong-token``
    Every execution appears at least once in the submission logs and ends ``submitted`` (the
    harness lets the cluster settle and drains what is left, so leftovers of a crash are
    resubmitted), except an occurrence *missed* because the broker stayed down past its grace
    (``submit_failed``, error ``missed: ...``): that is allowed only when its failed attempts
    fell in a broker fault, the last one after its grace ran out. Such a row may also have an
    earlier accepted submission whose bookkeeping never landed (its scheduler died, lost its
    connection or stalled): the one that gave up could not know; counted apart. Every submission is of a
    claimed row, carrying the fencing token the row was claimed with.

``refused`` / ``damaged``
    A schedule written with SQL naming a task outside the allow-list (``os.system``) reaches
    the broker never: its executions end ``submit_failed`` with ``refused: ...`` and the row
    ends ``last_status='refused'``. A schedule whose row was damaged with SQL (the ``damage`` fault) is
    tolerated only as "that schedule does not run": no claim of it after the damage; every
    other guarantee still holds for every other schedule.

``lost-message`` / ``broker-duplicate``
    What reached the real broker (Redis, kept on disk) is compared with the submissions: each
    accepted submission is in the broker; a key in the broker more often than it was accepted
    is allowed only for failed attempts that may have landed (a call that timed out after
    sending: README guarantee case 4).

``unjustified-duplicate``
    A key submitted more than once is allowed only when the row was still ``claimed`` when the
    resubmitting scheduler read it: a crash, a kill, a pause or a lost connection came between
    the earlier submission and its bookkeeping. Precisely: a resubmission must come from a
    ``pending`` read of that row by the same process, and no ``booked`` record of the row may
    predate that read (``booked`` is written after the commit, ``pending`` before the query, and
    all processes share the host's real clock). Each justified duplicate is classified by the
    case of the README's guarantee list that allows it, from what hit the first submitter:
    1 it died between submission and bookkeeping; 2 its bookkeeping failed (lost connection);
    3 it hung inside the broker call (the resubmitting read fell inside that call) or stalled
    between the call and its bookkeeping (it booked later); 4 (broker side, above). There is
    no other cause: a duplicate that fits none is a violation.

``misfire`` (lost or wrongly planned occurrences), per schedule and per definition segment
    A segment starts at the database time ``S`` a definition was written (creation or an edit)
    and lasts until the next edit. The claims of a schedule are grouped by ``claimed_at``
    (the transaction's ``now()``). The instant the planner used is ``claimed_at``, or for a
    claim made ahead (``claim_ahead``) the instant it claimed, which lies after ``claimed_at``:
    the later of the two. For the group planned at
    ``c``, preceded by the group at ``p`` (or ``S``), the occurrences owed are the trigger's
    instants in ``(p, c]``; those with ``c - t <= grace`` are on time and must be claimed;
    the late ones follow the policy: ``skip`` claims none, ``run_once`` claims the latest late
    one only when nothing was on time, ``run_all`` claims the latest ``catch_up_limit``; of all
    that, the latest ``catch_up_limit`` (the cap of every catch-up). The group must be exactly
    that set. After the last group of the final segment, instants before
    the schedule's final ``next_run_at`` were passed over by a claim that inserted nothing; only
    ``skip`` may do that, and only for instants that were late (``t < next_run_at - grace``).
    After the last group of an edited segment, unclaimed instants were dropped by the edit
    (an edit recomputes ``next_run_at`` from now): allowed. An instant a claim made ahead took
    just before an edit counts for the new segment too: its key exists, so it is not owed twice.
    How timely claims were is never asserted (no timing assertions); an outage longer than the
    grace makes occurrences late, and the policy decides what happens to them.

``early``
    No occurrence reaches the broker before its instant: every broker call of a scheduled
    occurrence starts at or after ``scheduled_at`` (claims made ahead wait for it). The
    records use the host's clock, which is also the database's.

``stale-claim`` / ``edit-overwritten``
    A claim whose instants are not the trigger's in force at its ``claimed_at`` (a stale claim
    acting on an old definition after an edit landed) is a violation, except a claim that
    committed between the edit's transaction start and its read of the row (it then precedes
    the edit; recognised because its instants fit the old definition and it started before the
    editor got its answer). The final row of every edited schedule must carry the last edit's
    definition, with ``next_run_at`` on that trigger after the edit.

``token-order`` / ``token-holder``
    Fencing tokens never decrease in the order claims happened (``claimed_at``), nor in the
    harness's polls of the lease row; one token belongs to one scheduler (in the executions, in
    the lease polls, and in the ``lease.acquired`` log events). With shards each shard's lease
    has its own tokens: every rule holds per lease, an execution's lease being the one of its
    schedule's shard (``shard_of(name, shards)``).

``stalled``
    Liveness at the end: every enabled schedule's final ``next_run_at`` lies after the moment
    faults stopped (the cluster recovered from everything).

``promotion-*`` (a run with a streaming standby, ``promotions.jsonl``)
    Each promotion's evidence is the difference between what the crashed primary had
    committed (its data directory started alone afterwards) and what the standby held when it
    was promoted. A claim in that difference was in the WAL not shipped, and so was its
    process's bookkeeping there. The records say on which database a claim was made: a
    ``claimed`` record (written after the commit returned) before the promotion began is the
    old primary's, and a ``pending`` read issued before the crash ended was answered by it;
    the harness leaves a second with no primary between the two. An execution is therefore
    named by (id, key, and the promotion that lost it, if one did): ids are handed out again
    after a promotion. With a **synchronous** standby the difference must be empty: nothing
    lost, so nothing doubled (``promotion-lost``). With an **asynchronous** one, a key sent
    under two claims (``doubled``) is allowed only when every earlier claim is in the
    difference, committed after the standby's last replayed transaction (its ``claimed``
    record after ``pg_last_xact_replay_timestamp()``, else ``promotion-unexplained``); a
    resubmission after a bookkeeping the difference holds is case 5. Every promotion is
    followed by goatbeat's ``store.database_changed`` ERROR (``promotion-not-logged``) and
    by a claim on the promoted primary (``promotion-no-claim``). A submission of a lost claim
    is no ``wrong-token`` / ``unknown-submission``; fencing tokens are checked per database
    history (a token the old primary issued after the standby's copy may be issued again).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from goatbeat.core.model import MisfirePolicy, Schedule
from goatbeat.core.shards import lease_name, shard_of
from goatbeat.core.triggers import Trigger, trigger_from_spec

CLAIM_OVERLAP = timedelta(seconds=1)
"""How long before an edit's transaction a claim's may have begun and still read the edited
row (a claim transaction reads its schedules first thing: milliseconds)."""
EVIL_PREFIX = "evil-"
"""Names of the schedules the harness writes with SQL, naming a task nobody allowed."""

CASES = {
    1: "1 crash between submission and bookkeeping",
    2: "2 database error between submission and bookkeeping",
    3: "3 leader stalled in or after the broker call while a standby resubmitted",
    4: "4 reported failed, but the broker had taken it",
    5: "5 its bookkeeping was in the WAL an asynchronous standby never got (promoted)",
}
"""The README's guarantee cases, the only causes of a duplicate."""

__all__ = [
    "CASES",
    "EVIL_PREFIX",
    "Definition",
    "Segment",
    "ExecRow",
    "Evidence",
    "Promotion",
    "Report",
    "check",
    "expected_claims",
    "load_evidence",
]


@dataclass(frozen=True, slots=True)
class Definition:
    """What the checker needs of a schedule's definition."""

    trigger: Trigger
    misfire: MisfirePolicy
    grace: timedelta
    catch_up_limit: int
    description: str = ""

    @classmethod
    def of(cls, schedule: Schedule) -> Definition:
        return cls(
            trigger=schedule.trigger,
            misfire=schedule.misfire,
            grace=schedule.misfire_grace,
            catch_up_limit=schedule.catch_up_limit,
            description=schedule.description,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger.to_spec(),
            "misfire": self.misfire.value,
            "grace": self.grace.total_seconds(),
            "catch_up_limit": self.catch_up_limit,
            "description": self.description,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Definition:
        return cls(
            trigger=trigger_from_spec(data["trigger"]),
            misfire=MisfirePolicy(data["misfire"]),
            grace=timedelta(seconds=float(data["grace"])),
            catch_up_limit=int(data["catch_up_limit"]),
            description=str(data.get("description", "")),
        )


@dataclass(frozen=True, slots=True)
class Segment:
    """A definition in force from ``start`` (database time of the write) to the next one.
    ``answered`` is when the writer had its answer (real wall time): the write committed
    before it."""

    start: datetime
    definition: Definition
    answered: datetime | None = None


@dataclass(frozen=True, slots=True)
class ExecRow:
    id: int
    name: str
    scheduled_at: datetime
    key: str
    kind: str
    status: str
    token: int | None
    scheduler_id: str | None
    claimed_at: datetime
    error: str | None = None
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class Promotion:
    """One crash of the primary and promotion of the standby (wall times, host clock)."""

    n: int
    sync: bool
    crash_at: float
    crashed_at: float
    promote_at: float
    promoted_at: float
    replay_ts: float | None = None
    """The old primary's commit time of the last transaction the standby replayed."""
    frozen_at: float | None = None
    wal_not_shipped_bytes: int = 0
    lost_claims: Mapping[tuple[int, str], int | None] = field(default_factory=dict)
    """(id, key) -> fencing token of the claims the old primary had and the standby had not."""
    lost_updates: frozenset[tuple[int, str]] = frozenset()
    """(id, key) of rows both had, updated (status, attempts) only on the old primary."""
    only_on_standby: int = 0
    leases_standby: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """Lease rows the promoted database started with: name -> (holder, token)."""

    @classmethod
    def from_json(cls, rec: Mapping[str, Any]) -> Promotion:
        from goatbeat.core.instance import split_instance

        return cls(
            n=int(rec["n"]),
            sync=bool(rec["sync"]),
            crash_at=float(rec["crash_at"]),
            crashed_at=float(rec["crashed_at"]),
            promote_at=float(rec["promote_at"]),
            promoted_at=float(rec["promoted_at"]),
            replay_ts=None if rec.get("replay_ts") is None else float(rec["replay_ts"]),
            frozen_at=None if rec.get("frozen_at") is None else float(rec["frozen_at"]),
            wal_not_shipped_bytes=int(rec.get("wal_not_shipped_bytes") or 0),
            lost_claims={(int(r[0]), str(r[1])): r[2] for r in rec.get("lost_claims", [])},
            lost_updates=frozenset((int(r[0]), str(r[1])) for r in rec.get("lost_updates", [])),
            only_on_standby=len(rec.get("only_on_standby", [])),
            leases_standby={
                str(k): (split_instance(str(v[0]))[0], int(v[1]))
                for k, v in (rec.get("leases_standby") or {}).items()
            },
        )


@dataclass
class Evidence:
    executions: list[ExecRow]
    final: dict[str, Schedule]
    """Final schedule rows by name."""
    segments: dict[str, list[Segment]]
    """Definition history by schedule name, oldest first."""
    records: list[dict[str, Any]]
    """submit / pending / booked records; each has ``src`` (the scheduler id of its file)."""
    lease_polls: list[tuple[float, str, int, str]] = field(default_factory=list)
    """(wall time, holder, token, lease name) of every change the harness saw."""
    acquisitions: list[tuple[str, int, str]] = field(default_factory=list)
    """(scheduler id, fencing token, lease name) of every ``lease.acquired`` log event."""
    shards: int = 1
    died: set[str] = field(default_factory=set)
    """Scheduler ids whose process was killed or crashed."""
    faults_stopped_at: datetime | None = None
    pauses: list[tuple[str, float, float]] = field(default_factory=list)
    """(scheduler id, SIGSTOP wall time, SIGCONT wall time) of every pause."""
    events: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    """Lease-related log events (wall time, event) by scheduler id."""
    broker: Counter[str] | None = None
    """How many times each key reached the broker (None: no broker in this run)."""
    broker_faults: list[tuple[float, float]] = field(default_factory=list)
    """(start, end) wall times of every broker stop or freeze."""
    damaged: dict[str, float] = field(default_factory=dict)
    """Schedules damaged with SQL, and when."""
    leader_faults: list[tuple[str, str, float]] = field(default_factory=list)
    """(fault, scheduler id, wall time) of every fault aimed at the leader."""
    fault_times: list[float] = field(default_factory=list)
    """Wall time of every fault injected (of any kind)."""
    promotions: list[Promotion] = field(default_factory=list)
    """Each promotion of the standby, in order (a run with ``standby``)."""
    changes: list[tuple[float, str, str, list[str]]] = field(default_factory=list)
    """(wall time, scheduler id, reason, lost_keys) of every ``store.database_changed``."""
    starts: dict[str, float] = field(default_factory=dict)
    """When each scheduler process was started."""
    acquired_at: list[float] = field(default_factory=list)
    """Wall time of each of ``acquisitions`` (same order), when known."""

    def commit_epoch(self, t: float) -> int:
        """The database a commit acknowledged at ``t`` was made on: the number of promotions
        begun before (0: the first primary)."""
        return sum(1 for p in self.promotions if p.promote_at <= t)

    def read_epoch(self, t: float) -> int:
        """The database a read issued at ``t`` was answered by (promotions whose crash ended
        before: no primary answers between the crash and the promotion)."""
        return sum(1 for p in self.promotions if p.crashed_at <= t)

    def lost_at(self, epoch: int, pair: tuple[int, str]) -> Promotion | None:
        """The promotion that lost the claim ``pair`` (id, key) made on database ``epoch``."""
        if epoch < len(self.promotions) and pair in self.promotions[epoch].lost_claims:
            return self.promotions[epoch]
        return None


@dataclass
class Report:
    violations: list[tuple[str, str]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, kind: str, detail: str) -> None:
        self.violations.append((kind, detail))

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self, limit: int = 30) -> str:
        lines = [f"{k}: {v}" for k, v in self.figures.items()]
        counts = Counter(k for k, _ in self.violations)
        lines.append(f"violations: {len(self.violations)} {dict(counts) if counts else ''}")
        for kind, detail in self.violations[:limit]:
            lines.append(f"  {kind}: {detail}")
        if len(self.violations) > limit:
            lines.append(f"  ... {len(self.violations) - limit} more")
        return "\n".join(lines)


# -- the policy, from the spec -----------------------------------------------------------------


def instants_between(trigger: Trigger, after: datetime, until: datetime) -> list[datetime]:
    """The trigger's instants in ``(after, until]``."""
    out: list[datetime] = []
    t = trigger.next_after(after)
    while t is not None and t <= until:
        out.append(t)
        t = trigger.next_after(t)
    return out


def expected_claims(
    definition: Definition, window: Sequence[datetime], at: datetime
) -> list[datetime]:
    """What a claim at ``at`` must claim of the owed instants ``window`` (oldest first),
    written from the spec rather than from goatbeat's planner."""
    on_time = [t for t in window if at - t <= definition.grace]
    late = [t for t in window if at - t > definition.grace]
    if definition.misfire is MisfirePolicy.SKIP:
        kept: list[datetime] = []
    elif definition.misfire is MisfirePolicy.RUN_ONCE:
        kept = late[-1:] if late and not on_time else []
    else:
        kept = late
    # catch_up_limit caps every catch-up, on-time occurrences included.
    return (kept + on_time)[-definition.catch_up_limit :]


# -- the checks ----------------------------------------------------------------------------------


def check(ev: Evidence) -> Report:
    report = Report()
    scheduled = [e for e in ev.executions if e.kind == "scheduled"]
    report.figures.update(
        executions=len(ev.executions),
        scheduled_occurrences=len(scheduled),
        manual_runs=len(ev.executions) - len(scheduled),
        schedules=len(ev.final),
        submissions=sum(1 for r in ev.records if r["type"] == "submit"),
    )
    _check_unique(ev, report)
    _check_submissions(ev, report)
    _check_refused(ev, report)
    _check_damaged(ev, report)
    _check_duplicates(ev, report)
    _check_broker(ev, report)
    _check_early(ev, report)
    _check_misfire(ev, report)
    _check_edits(ev, report)
    _check_tokens(ev, report)
    _check_pauses(ev, report)
    _check_liveness(ev, report)
    _takeovers(ev, report)
    if ev.promotions:
        _check_promotions(ev, report)
    return report


def _keys_of(ev: Evidence, r: Mapping[str, Any]) -> list[str | None]:
    """The keys of a pending/booked/claimed record's ids (records written before keys were
    recorded: looked up in the final table)."""
    keys = r.get("keys")
    if keys is not None:
        return list(keys)
    by_id = _by_id(ev)
    return [by_id[i].key if i in by_id else None for i in r["ids"]]


def _by_id(ev: Evidence) -> dict[int, ExecRow]:
    cached = getattr(ev, "_by_id_cache", None)
    if cached is None:
        cached = {e.id: e for e in ev.executions}
        object.__setattr__(ev, "_by_id_cache", cached)
    return cached


Claim = tuple[int, str, int | None]
"""An execution as the checker names it: (id, key, the promotion that lost it or None)."""


class _Claims:
    """Which claim each submission was of: the latest ``claimed`` or ``pending`` record of
    the same process naming its (id, key), and on which database that happened."""

    def __init__(self, ev: Evidence) -> None:
        self.ev = ev
        self.seen: dict[tuple[str, int, str], list[tuple[float, int]]] = defaultdict(list)
        for r in ev.records:
            if r["type"] not in ("claimed", "pending"):
                continue
            t = float(r["t"])
            epoch = ev.commit_epoch(t) if r["type"] == "claimed" else ev.read_epoch(t)
            for i, key in zip(r["ids"], _keys_of(ev, r), strict=False):
                if key is not None:
                    self.seen[(str(r["src"]), int(i), key)].append((t, epoch))
        for v in self.seen.values():
            v.sort()

    def epoch_of(self, src: str, exec_id: int, key: str, t: float) -> int | None:
        found = [e for at, e in self.seen.get((src, exec_id, key), []) if at <= t]
        return found[-1] if found else None

    def of(self, r: Mapping[str, Any]) -> Claim:
        """The claim submission (or submit-start) ``r`` was of."""
        exec_id, key = int(r["id"]), str(r["key"])
        if not self.ev.promotions:
            return (exec_id, key, None)
        epoch = self.epoch_of(str(r["src"]), exec_id, key, float(r["t"]))
        if epoch is None:
            epoch = self.ev.commit_epoch(float(r["t"]))
        lost = self.ev.lost_at(epoch, (exec_id, key))
        return (exec_id, key, None if lost is None else lost.n)

    def of_read(self, exec_id: int, key: str, t: float, commit: bool) -> Claim:
        """The claim a pending read (or a booking, ``commit``) of (id, key) at ``t`` was of."""
        if not self.ev.promotions:
            return (exec_id, key, None)
        epoch = self.ev.commit_epoch(t) if commit else self.ev.read_epoch(t)
        lost = self.ev.lost_at(epoch, (exec_id, key))
        return (exec_id, key, None if lost is None else lost.n)


def _exempt(ev: Evidence, name: str) -> bool:
    """Schedules the scheduling checks leave alone: refused (written with SQL, never run) and
    damaged ones (checked by :func:`_check_refused` / :func:`_check_damaged`)."""
    return name.startswith(EVIL_PREFIX) or name in ev.damaged


def _in_broker_fault(ev: Evidence, t: float, slack: float = 1.0) -> bool:
    # A call may start just before the fault and fail when its timeout ends after it.
    from tests.chaos.app import BROKER_TIMEOUT

    return any(a - slack <= t <= b + BROKER_TIMEOUT + slack for a, b in ev.broker_faults)


def _missed_during_broker_fault(ev: Evidence, e: ExecRow, report: Report) -> bool:
    """Whether ``e`` (``submit_failed``, ``missed: ...``) is a miss the spec allows: its
    attempts failed during a broker fault and the last one came after its grace ran out."""
    errors = [r for r in ev.records if r["type"] == "submit-error" and r["key"] == e.key]
    if not errors or not any(_in_broker_fault(ev, r["t"]) for r in errors):
        return False
    last = max(r["t"] for r in errors)
    segments = ev.segments.get(e.name) or []
    if segments:
        # The grace in force when it was retried: an edit may have shortened it since the claim.
        first = _segment_index(segments, e.claimed_at)
        graces = [
            seg.definition.grace
            for i, seg in enumerate(segments)
            if i >= first and seg.start.timestamp() <= last
        ]
        due = (e.scheduled_at + min(graces)).timestamp()
        if last < due - 1.0:  # decided by the store's clock; the records use the host's
            report.add(
                "early-miss",
                f"{e.key} declared missed after its attempt at {last:.3f}, before its grace "
                f"ran out at {due:.3f}",
            )
    return True


def _check_unique(ev: Evidence, report: Report) -> None:
    for key, n in Counter(e.key for e in ev.executions).items():
        if n > 1:
            report.add("duplicate-claim", f"key {key} claimed {n} times")
    pairs = Counter((e.name, e.scheduled_at) for e in ev.executions if e.kind == "scheduled")
    for (name, at), n in pairs.items():
        if n > 1:
            report.add("duplicate-claim", f"{name} at {at.isoformat()} claimed {n} times")


def _check_submissions(ev: Evidence, report: Report) -> None:
    by_key = {e.key: e for e in ev.executions}
    submitted = Counter(r["key"] for r in ev.records if r["type"] == "submit")
    booked = {i for r in ev.records if r["type"] == "booked" for i in r["ids"]}
    missed = delivered_anyway = 0
    for e in ev.executions:
        if _exempt(ev, e.name):
            continue
        if (
            e.status == "submit_failed"
            and (e.error or "").startswith("missed:")
            and e.id not in booked
            and _missed_during_broker_fault(ev, e, report)
        ):
            # With a submission on record, its outcome was unknown to the scheduler that gave
            # up (cases 1-3 of the guarantee: it died, failed its bookkeeping or stalled), so
            # the row says missed while that copy reached the broker.
            missed += 1
            delivered_anyway += bool(submitted.get(e.key) or (ev.broker or {}).get(e.key))
            continue
        if not submitted.get(e.key):
            report.add("not-submitted", f"{e.key} (status {e.status}) never submitted")
        elif e.status != "submitted":
            report.add(
                "not-submitted", f"{e.key} ends {e.status} after {submitted[e.key]} submissions"
            )
    report.figures["missed_in_broker_outages"] = missed
    report.figures["missed_though_delivered"] = delivered_anyway
    claims = _Claims(ev)
    sent_lost: set[str] = set()
    for r in ev.records:
        if r["type"] != "submit":
            continue
        row = by_key.get(r["key"])
        if claims.of(r)[2] is not None:
            # Its claim was committed on the old primary and never reached the standby:
            # _check_promotions judges it.
            sent_lost.add(r["key"])
            continue
        if row is None:
            report.add(
                "unknown-submission", f"{r['key']} submitted by {r['src']} but never claimed"
            )
        elif row.id != r["id"] or row.token != r["token"]:
            report.add(
                "wrong-token",
                f"{r['key']} submitted by {r['src']} as execution {r['id']} token {r['token']}, "
                f"claimed as {row.id} token {row.token}",
            )
    if ev.promotions:
        report.figures["sent_then_claim_lost"] = len(sent_lost)


def _check_duplicates(ev: Evidence, report: Report) -> None:
    claims = _Claims(ev)
    submits: dict[Claim, list[dict[str, Any]]] = defaultdict(list)
    starts: dict[tuple[str, Claim], list[float]] = defaultdict(list)
    pending: dict[tuple[str, Claim], list[float]] = defaultdict(list)
    booked: dict[Claim, list[tuple[float, str]]] = defaultdict(list)
    for r in ev.records:
        if r["type"] == "submit-start":
            starts[(r["src"], claims.of(r))].append(r["t"])
        if r["type"] == "submit":
            submits[claims.of(r)].append(r)
        elif r["type"] == "pending":
            for i, key in zip(r["ids"], _keys_of(ev, r), strict=False):
                if key is not None:
                    pending[(r["src"], claims.of_read(i, key, r["t"], False))].append(r["t"])
        elif r["type"] == "booked":
            for i, key in zip(r["ids"], _keys_of(ev, r), strict=False):
                if key is not None:
                    booked[claims.of_read(i, key, r["t"], True)].append((r["t"], r["src"]))
    causes: Counter[str] = Counter()
    extra = 0
    for exec_id, subs in submits.items():
        if len(subs) < 2:
            continue

        def began(r: dict[str, Any], exec_id: int = exec_id) -> float:
            """When the broker call of submission ``r`` began (its record is written after
            the call returned, which for a hung call is after a standby's resubmission)."""
            calls = [t for t in starts.get((r["src"], exec_id), []) if t <= r["t"]]
            return max(calls) if calls else float(r["t"])

        subs.sort(key=began)
        for earlier, later in zip(subs, subs[1:], strict=False):
            extra += 1
            reads = [t for t in pending.get((later["src"], exec_id), []) if t <= began(later)]
            if not reads:
                report.add(
                    "unjustified-duplicate",
                    f"{later['key']} submitted again by {later['src']} without reading it as "
                    "pending (a second claim?)",
                )
                continue
            read_at = max(reads)
            before = [
                t
                for t, _ in booked.get(exec_id, [])
                if t < read_at and not _booking_lost(ev, exec_id, t, read_at)
            ]
            if before:
                report.add(
                    "unjustified-duplicate",
                    f"{later['key']} resubmitted by {later['src']} from a read at {read_at:.6f}, "
                    f"{read_at - min(before):.3f}s after its bookkeeping had committed",
                )
                continue
            in_call = began(earlier) <= read_at <= earlier["t"]
            first_booking = [t for t, src in booked.get(exec_id, []) if src == earlier["src"]]
            if any(t < read_at for t, _ in booked.get(exec_id, [])):
                causes[CASES[5]] += 1  # every booking before the read is in a lost WAL
            elif in_call or first_booking:
                causes[CASES[3]] += 1
            elif earlier["src"] in ev.died:
                causes[CASES[1]] += 1
            else:
                causes[CASES[2]] += 1
    report.figures["duplicate_submissions"] = extra
    report.figures["duplicates_by_cause"] = dict(causes)


def _booking_lost(ev: Evidence, claim: Claim, booked_at: float, read_at: float) -> bool:
    """Whether a booking of ``claim`` at ``booked_at`` was in the WAL a promotion between it
    and ``read_at`` lost (the old primary had it, the standby did not)."""
    exec_id, key, _ = claim
    return any(
        booked_at < p.promote_at <= read_at and (exec_id, key) in p.lost_updates
        for p in ev.promotions
    )


def _check_broker(ev: Evidence, report: Report) -> None:
    """What reached the broker, against what was accepted and what may have landed."""
    if ev.broker is None:
        return
    accepted = Counter(r["key"] for r in ev.records if r["type"] == "submit")
    # Calls that may have delivered without being counted as accepted: one that failed after
    # sending (a timeout: case 4), and one cut short by the death of its process (case 1).
    failed_after_sending = Counter(
        r["key"] for r in ev.records if r["type"] == "submit-error" and r.get("landed")
    )
    # Counted per call: a process may resubmit its own occurrence (same attempts) and die
    # inside that second call, the first one having ended.
    calls: Counter[tuple[Any, ...]] = Counter()
    for r in ev.records:
        if r["src"] in ev.died and r["type"] in ("submit-start", "submit", "submit-error"):
            one = 1 if r["type"] == "submit-start" else -1
            calls[(r["src"], r["id"], r.get("attempts"), r["key"])] += one
    cut_by_death: Counter[str] = Counter()
    for (_, _, _, key), open_calls in calls.items():
        if open_calls > 0:
            cut_by_death[key] += open_calls
    causes: Counter[str] = Counter()
    for key in sorted(set(accepted) | set(ev.broker)):
        there, took = ev.broker.get(key, 0), accepted.get(key, 0)
        if there < took:
            report.add("lost-message", f"{key}: accepted {took} times, in the broker {there}")
            continue
        extra = there - took
        died = min(extra, cut_by_death.get(key, 0))
        timed_out = min(extra - died, failed_after_sending.get(key, 0))
        if extra > died + timed_out:
            report.add(
                "broker-duplicate",
                f"{key}: in the broker {there} times, accepted {took}; no documented cause "
                f"for {extra - died - timed_out} of the copies",
            )
        # Duplicates are the copies beyond the first; those of accepted submissions are
        # classified by _check_duplicates. A lone copy from a call cut short is no duplicate.
        unseen = max(0, there - max(took, 1))
        causes[CASES[1]] += min(unseen, died)
        causes[CASES[4]] += max(0, unseen - died)
    found = report.figures.setdefault("duplicates_by_cause", {})
    for cause, n in causes.items():
        if n:
            found[cause] = found.get(cause, 0) + n
    report.figures["broker_messages"] = sum(ev.broker.values())
    report.figures["broker_duplicates"] = sum(n - 1 for n in ev.broker.values() if n > 1)


def _check_early(ev: Evidence, report: Report) -> None:
    by_key = {e.key: e for e in ev.executions if e.kind == "scheduled"}
    early = 0
    for r in ev.records:
        if r["type"] not in ("submit-start", "submit"):
            continue
        row = by_key.get(r["key"])
        # "submit" alone (no broker) is the accepted call; with a broker, its start counts.
        if row is None or (r["type"] == "submit" and ev.broker is not None):
            continue
        ahead = row.scheduled_at.timestamp() - float(r["t"])
        if ahead > 0.001:
            early += 1
            report.add("early", f"{r['key']} handed to the broker {ahead:.3f}s before its instant")
    report.figures["early"] = early


def _check_refused(ev: Evidence, report: Report) -> None:
    """Schedules written with SQL naming ``os.system``: refused, never submitted."""
    names = sorted(n for n in ev.final if n.startswith(EVIL_PREFIX))
    sent = {r["key"] for r in ev.records if r["type"] in ("submit", "submit-start")}
    for name in names:
        final = ev.final[name]
        if final.last_status != "refused" or final.next_run_at is not None:
            report.add("refused", f"{name} ends {final.last_status}, next {final.next_run_at}")
        for e in ev.executions:
            if e.name != name:
                continue
            if e.key in sent:
                report.add("refused", f"{e.key} of a task outside the allow-list was submitted")
            if e.status != "submit_failed" or not (e.error or "").startswith("refused: "):
                report.add("refused", f"{e.key} ends {e.status} ({e.error})")
    report.figures["refused_schedules"] = len(names)


def _check_damaged(ev: Evidence, report: Report) -> None:
    """A damaged schedule does not run after the damage (a claim in flight may still land)."""
    for name, at in sorted(ev.damaged.items()):
        late = [
            e.key
            for e in ev.executions
            if e.name == name and e.kind == "scheduled" and e.claimed_at.timestamp() > at + 1.0
        ]
        if late:
            report.add("damaged", f"{name} damaged at {at:.3f} still claimed {late[:3]}")
    report.figures["damaged_schedules"] = len(ev.damaged)


def _takeovers(ev: Evidence, report: Report) -> None:
    """Seconds from a fault aimed at the leader to the next occurrence a scheduler handed to
    the broker: another one for a kill, a SIGSTOP or a freeze inside the claim; any one after
    its connections were terminated (it may keep the lease). Samples another fault overlapped
    are left out. Figures only, never asserted."""
    submits = sorted((float(r["t"]), str(r["src"])) for r in ev.records if r["type"] == "submit")
    out: dict[str, list[float]] = defaultdict(list)
    for kind, sid, t in ev.leader_faults:
        after = [at for at, src in submits if at > t and (kind == "terminate" or src != sid)]
        if not after:
            continue
        # Only where no other fault (a broker outage, say) began meanwhile: that one's delay.
        if any(t < other <= after[0] for other in ev.fault_times):
            continue
        out[kind].append(after[0] - t)
    report.figures["takeover_s"] = {
        kind: {
            "n": len(v),
            "p50": round(sorted(v)[len(v) // 2], 2),
            "max": round(max(v), 2),
        }
        for kind, v in sorted(out.items())
    }


def _segment_index(segments: Sequence[Segment], at: datetime) -> int:
    index = 0
    for i, seg in enumerate(segments):
        if seg.start < at:
            index = i
    return index


def _fits(definition: Definition, instants: Iterable[datetime], after: datetime) -> bool:
    trig = definition.trigger
    for t in instants:
        if t <= after or trig.next_after(t - timedelta(microseconds=1)) != t:
            return False
    return True


def _check_misfire(ev: Evidence, report: Report) -> None:
    checked = lost = late_dropped = 0
    groups_by_name: dict[str, dict[datetime, list[datetime]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for e in ev.executions:
        if e.kind == "scheduled":
            groups_by_name[e.name][e.claimed_at].append(e.scheduled_at)
    for name, schedule in sorted(ev.final.items()):
        if _exempt(ev, name):
            continue
        segments = ev.segments.get(name)
        if not segments:
            report.add("misfire", f"{name}: no definition history")
            continue
        assigned: dict[int, list[tuple[datetime, list[datetime]]]] = defaultdict(list)
        for claimed_at, instants in sorted(groups_by_name.get(name, {}).items()):
            instants.sort()
            i = _segment_index(segments, claimed_at)
            seg = segments[i]
            if not _fits(seg.definition, instants, seg.start):
                prev = segments[i - 1] if i > 0 else None
                raced = (
                    prev is not None
                    and seg.answered is not None
                    and claimed_at < seg.answered
                    and _fits(prev.definition, instants, prev.start)
                )
                # The other way round: a claim whose transaction began just before the edit's
                # (its claimed_at) and read the row after the edit committed follows the NEW
                # definition: it belongs to the edit's segment.
                after = segments[i + 1] if i + 1 < len(segments) else None
                if (
                    after is not None
                    and after.start - claimed_at < CLAIM_OVERLAP
                    and _fits(after.definition, instants, after.start)
                ):
                    assigned[i + 1].append((claimed_at, instants))
                    continue
                if not raced:
                    report.add(
                        "stale-claim",
                        f"{name}: claim at {claimed_at.isoformat()} of "
                        f"{[t.isoformat() for t in instants[:3]]} does not follow the definition "
                        f"written at {seg.start.isoformat()}",
                    )
                    continue
                i -= 1
            assigned[i].append((claimed_at, instants))
        # Instants claimed under earlier segments: a claim made ahead just before an edit may
        # hold an instant that falls after the edit (same key, so never claimed again).
        earlier: set[datetime] = set()
        for i, seg in enumerate(segments):
            d = seg.definition
            prev = seg.start
            if i > 0:
                earlier.update(t for _, instants in assigned.get(i - 1, []) for t in instants)
            for claimed_at, instants in assigned.get(i, []):
                # A claim made ahead was planned at the instant it claimed (see the docstring).
                planned_at = max(claimed_at, instants[-1])
                window = instants_between(d.trigger, prev, planned_at)
                want = expected_claims(d, window, planned_at)
                checked += len(window)
                late_dropped += len(window) - len(want)
                got = set(instants)
                missing = [t for t in want if t not in got and t not in earlier]
                unexpected = sorted(got - set(want))
                if missing:
                    lost += len(missing)
                    report.add(
                        "misfire",
                        f"{name} ({d.misfire.value}, grace {d.grace.total_seconds():g}s): claim at "
                        f"{planned_at.isoformat()} lost {[t.isoformat() for t in missing[:5]]}",
                    )
                if unexpected:
                    report.add(
                        "misfire",
                        f"{name} ({d.misfire.value}): claim at {planned_at.isoformat()} claimed "
                        f"{[t.isoformat() for t in unexpected[:5]]} the policy drops",
                    )
                prev = max(prev, planned_at)
            last_segment = i == len(segments) - 1
            if last_segment and schedule.enabled and schedule.next_run_at is not None:
                nxt = schedule.next_run_at
                passed = instants_between(d.trigger, prev, nxt - timedelta(microseconds=1))
                checked += len(passed)
                for t in passed:
                    if t in earlier:
                        continue
                    if d.misfire is not MisfirePolicy.SKIP or not t < nxt - d.grace:
                        lost += 1
                        report.add(
                            "misfire",
                            f"{name} ({d.misfire.value}): {t.isoformat()} passed over without a "
                            f"claim (next_run_at {nxt.isoformat()})",
                        )
                    else:
                        late_dropped += 1
    report.figures["occurrences_checked"] = checked
    report.figures["dropped_by_policy"] = late_dropped
    report.figures["lost"] = lost


def _check_edits(ev: Evidence, report: Report) -> None:
    edits = 0
    for name, segments in ev.segments.items():
        if len(segments) < 2 or _exempt(ev, name):
            continue
        edits += len(segments) - 1
        last = segments[-1]
        final = ev.final.get(name)
        if final is None:
            report.add("edit-overwritten", f"{name}: row missing at the end")
            continue
        if Definition.of(final) != last.definition:
            report.add(
                "edit-overwritten",
                f"{name}: final definition {Definition.of(final).to_json()} is not the last "
                f"edit's {last.definition.to_json()}",
            )
        nxt = final.next_run_at
        if final.enabled and (nxt is None or not _fits(last.definition, [nxt], last.start)):
            report.add(
                "edit-overwritten",
                f"{name}: final next_run_at {nxt} is not an instant of the last edit's trigger "
                f"after {last.start.isoformat()}",
            )
    report.figures["admin_edits_checked"] = edits


def _token_use(ev: Evidence, lease: str, token: int, t: float | None) -> tuple[Any, ...]:
    """``(lease, token)``; for a token the old primary issued beyond the standby's copy of
    the lease, which the promotion forgot (it may be issued again): ``(lease, token, n)``."""
    if ev.promotions and t is not None:
        epoch = ev.commit_epoch(t)
        if epoch < len(ev.promotions):
            p = ev.promotions[epoch]
            kept = p.leases_standby.get(lease)
            if kept is None or token > kept[1]:
                return (lease, token, p.n)
    return (lease, token)


def _check_tokens(ev: Evidence, report: Report) -> None:
    holders: dict[tuple[Any, ...], set[str]] = defaultdict(set)
    ordered = sorted(
        (e for e in ev.executions if e.token is not None), key=lambda e: (e.claimed_at, e.id)
    )
    highest: dict[str, ExecRow] = {}
    for e in ordered:
        assert e.token is not None
        lease = lease_name(shard_of(e.name, ev.shards), ev.shards)
        holders[lease, e.token].add(e.scheduler_id or "?")
        top = highest.get(lease)
        if top is not None and top.token is not None and e.token < top.token:
            report.add(
                "token-order",
                f"{e.key} claimed at {e.claimed_at.isoformat()} with token {e.token} after "
                f"{top.key} was claimed with token {top.token} ({lease})",
            )
        if top is None or (top.token or 0) < e.token:
            highest[lease] = e
    for n, (sid, token, lease) in enumerate(ev.acquisitions):
        at = ev.acquired_at[n] if n < len(ev.acquired_at) else None
        holders[_token_use(ev, lease, token, at)].add(sid)
    last: dict[str, tuple[float, str, int, str]] = {}
    changes = 0
    epoch = 0
    for poll in sorted(ev.lease_polls):
        t, holder, token, lease = poll
        while ev.promotions and epoch < ev.commit_epoch(t):
            # A new database history: what the promoted one started with is the baseline.
            p = ev.promotions[epoch]
            for name, (kept_holder, kept_token) in p.leases_standby.items():
                last[name] = (p.promote_at, kept_holder, kept_token, name)
            epoch += 1
        holders[_token_use(ev, lease, token, t)].add(holder)
        before = last.get(lease)
        if before is not None:
            if token < before[2]:
                report.add("token-order", f"{lease} token went from {before[2]} back to {token}")
            elif holder != before[1] and token <= before[2]:
                report.add(
                    "token-order",
                    f"{lease} went from {before[1]} to {holder} keeping token {token}",
                )
            elif holder != before[1]:
                changes += 1
        last[lease] = poll
    for use, sids in sorted(holders.items(), key=str):
        if len(sids) > 1:
            report.add("token-holder", f"{use[0]} token {use[1]} used by {sorted(sids)}")
    report.figures["fencing_tokens"] = len(holders)
    report.figures["leader_changes_polled"] = changes


_STAND_DOWN = frozenset({"lease.lost", "claim.refused", "lease.standby"})
_ATTEMPTS = frozenset({"occurrence.submit_retry", "occurrence.submit_failed"})


def _check_pauses(ev: Evidence, report: Report) -> None:
    """A leader paused past its TTL while another took over must stand down on waking."""
    replaced = stood_down = 0
    for sid, stopped, resumed in ev.pauses:
        # The leases it held when it stopped (the last poll of each before the pause).
        held: dict[str, str] = {}
        for t, holder, _token, lease in sorted(ev.lease_polls):
            if t <= stopped:
                held[lease] = holder
        mine = {lease for lease, holder in held.items() if holder == sid}
        others = [
            p for p in ev.lease_polls if stopped < p[0] < resumed and p[1] != sid and p[3] in mine
        ]
        if not others:
            continue  # nobody took over (the database was down too...): nothing to refuse
        replaced += 1
        after = sorted((t, e) for t, e in ev.events.get(sid, []) if t >= resumed)
        down_at = next((t for t, e in after if e in _STAND_DOWN or e == "lease.acquired"), None)
        if down_at is not None:
            stood_down += 1
        until = float("inf") if down_at is None else down_at
        # What it handed to the backend between waking up and standing down (log lines such
        # as occurrence.resubmitted are intentions, not submissions). The one submission
        # already past its lease check when SIGSTOP landed may go out; no more.
        acted = [
            f"submitted {r['key']}"
            for r in ev.records
            if r["type"] == "submit" and r["src"] == sid and resumed <= r["t"] < until
        ] + [e for t, e in after if t < until and e in _ATTEMPTS]
        if len(acted) > 1:
            report.add(
                "no-stand-down",
                f"{sid} resumed at {resumed:.3f} after {others[0][1]} took the lease and "
                f"acted {len(acted)} times before standing down: {acted[:3]}",
            )
    report.figures["pauses_replaced"] = replaced
    report.figures["pauses_stood_down"] = stood_down


def _check_liveness(ev: Evidence, report: Report) -> None:
    if ev.faults_stopped_at is None:
        return
    for name, s in sorted(ev.final.items()):
        if _exempt(ev, name):
            continue
        if s.enabled and (s.next_run_at is None or s.next_run_at <= ev.faults_stopped_at):
            report.add(
                "stalled",
                f"{name}: next_run_at {s.next_run_at} not past the end of the faults "
                f"{ev.faults_stopped_at.isoformat()}",
            )


def _check_promotions(ev: Evidence, report: Report) -> None:
    """A run with a streaming standby: see the module docstring (``promotion-*``)."""
    claims = _Claims(ev)
    claimed_at: dict[Claim, float] = {}
    for r in ev.records:
        if r["type"] in ("claimed", "submit-start", "submit"):
            t = float(r["t"])
            if r["type"] == "claimed":
                epoch = ev.commit_epoch(t)
                for i, key in zip(r["ids"], _keys_of(ev, r), strict=False):
                    if key is None:
                        continue
                    lost = ev.lost_at(epoch, (int(i), key))
                    claimed_at.setdefault((int(i), key, None if lost is None else lost.n), t)
            else:  # a manual run has no claimed record: its first broker call, later still
                claimed_at.setdefault(claims.of(r), t)
    by_key: dict[str, set[Claim]] = defaultdict(set)
    for r in ev.records:
        if r["type"] == "submit":
            by_key[str(r["key"])].add(claims.of(r))
    doubled = {k: cs for k, cs in by_key.items() if len(cs) > 1}
    explained = while_frozen = 0
    for key, cs in sorted(doubled.items()):
        for c in sorted(cs, key=str):
            if c[2] is None:
                continue
            p = ev.promotions[c[2] - 1]
            at = claimed_at.get(c)
            if p.replay_ts is not None and at is not None and at < p.replay_ts:
                report.add(
                    "promotion-unexplained",
                    f"{key}: claim {c[0]} acknowledged at {at:.6f}, before the last commit "
                    f"the standby replayed ({p.replay_ts:.6f}), yet promotion {p.n} lost it",
                )
                continue
            explained += 1
            while_frozen += p.frozen_at is not None and at is not None and at >= p.frozen_at
    names: list[int] = []
    firsts: list[float] = []
    by_survivor = 0
    claimed_records = sorted(
        (float(r["t"]), str(r["src"])) for r in ev.records if r["type"] == "claimed"
    )
    # A claim, a pending read or a booking: the promoted primary answered.
    answers = sorted(
        (float(r["t"]), str(r["src"]))
        for r in ev.records
        if r["type"] in ("claimed", "pending", "booked")
    )
    for index, p in enumerate(ev.promotions):
        until = ev.promotions[index + 1].promote_at if index + 1 < len(ev.promotions) else math.inf
        if p.sync and (p.lost_claims or p.lost_updates):
            report.add(
                "promotion-lost",
                f"promotion {p.n} of a synchronous standby lost {len(p.lost_claims)} claims and "
                f"{len(p.lost_updates)} updates the primary had committed",
            )
        if p.only_on_standby:
            report.add(
                "promotion-lost", f"promotion {p.n}: {p.only_on_standby} rows only the standby had"
            )
        changes = [c for c in ev.changes if p.promote_at <= c[0] < until]
        # Who must have said it: a scheduler that worked on the old primary (a lease event
        # before the crash) and on the promoted one (a lease event after the promotion).
        witnesses = sorted(
            sid
            for sid, seen in ev.events.items()
            if any(t < p.crash_at for t, _ in seen)
            and any(p.promote_at <= t < until for t, _ in seen)
        )
        told = {sid for _, sid, reason, _ in changes if reason.startswith("promotion")}
        if witnesses and not told:
            report.add(
                "promotion-not-logged",
                f"no store.database_changed after promotion {p.n}, though {witnesses} "
                "worked on both databases",
            )
        named = {k for _, _, _, keys in changes for k in keys}
        mine = [k for k, cs in doubled.items() if any(c[2] == p.n for c in cs)]
        names.append(sum(1 for k in mine if k in named))
        first = next(((t, src) for t, src in claimed_records if p.promote_at <= t < until), None)
        if first is None:
            report.add("promotion-no-claim", f"nothing was claimed after promotion {p.n}")
            continue
        by_survivor += ev.starts.get(first[1], math.inf) < p.crash_at
        back = next((t for t, _ in answers if t >= p.promote_at), first[0])
        firsts.append(min(back, first[0]) - p.promote_at)
    report.figures.update(
        promotions=len(ev.promotions),
        promotions_synchronous=sum(p.sync for p in ev.promotions),
        wal_not_shipped_bytes=[p.wal_not_shipped_bytes for p in ev.promotions],
        claims_lost_at_promotion=sum(len(p.lost_claims) for p in ev.promotions),
        updates_lost_at_promotion=sum(len(p.lost_updates) for p in ev.promotions),
        doubled=len(doubled),
        doubled_explained_by_the_wal_not_shipped=explained,
        doubled_claimed_while_walsender_frozen=while_frozen,
        doubled_named_by_goatbeat=sum(names),
        back_after_promote_s=({"n": len(firsts), "max": round(max(firsts), 2)} if firsts else {}),
        first_claim_by_a_scheduler_up_before_the_crash=by_survivor,
    )


# -- loading -------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by SIGKILL in a log (never in a record: one write each)
    return out


def _dt(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def load_evidence(workdir: Path, dsn: str) -> Evidence:
    import psycopg

    from goatbeat.stores.postgres import PostgresStore

    # Bounded: a server that does not answer ends the check with an error, never a hang.
    with psycopg.connect(dsn, connect_timeout=10, options="-c statement_timeout=120000") as conn:
        rows = conn.execute(
            "SELECT id, schedule_name, scheduled_at, idempotency_key, kind, status, "
            "fencing_token, scheduler_id, claimed_at, error, attempts FROM goatbeat_execution"
        ).fetchall()
    executions = [
        ExecRow(
            id=int(r[0]),
            name=r[1],
            scheduled_at=r[2].astimezone(UTC),
            key=r[3],
            kind=r[4],
            status=r[5],
            token=None if r[6] is None else int(r[6]),
            scheduler_id=r[7],
            claimed_at=r[8].astimezone(UTC),
            error=r[9],
            attempts=int(r[10]),
        )
        for r in rows
    ]
    store = PostgresStore(dsn)
    store.bound_calls(60.0)
    try:
        final = {s.name: s for s in store.list_schedules()}
    finally:
        store.close()
    segments: dict[str, list[Segment]] = defaultdict(list)
    defs_path = workdir / "defs.jsonl"
    for rec in _read_jsonl(defs_path) if defs_path.exists() else []:
        answered = rec.get("answered")
        segments[rec["name"]].append(
            Segment(
                start=_dt(rec["start"]),
                definition=Definition.from_json(rec["definition"]),
                answered=None if answered is None else datetime.fromtimestamp(answered, UTC),
            )
        )
    for name, s in final.items():
        if name not in segments and s.created_at is not None:
            segments[name] = [Segment(start=s.created_at, definition=Definition.of(s))]
    for segs in segments.values():
        segs.sort(key=lambda seg: seg.start)
    records: list[dict[str, Any]] = []
    for path in sorted(workdir.glob("rec-*.jsonl")):
        src = path.name[len("rec-") : -len(".jsonl")]
        for rec in _read_jsonl(path):
            rec["src"] = src
            records.append(rec)
    acquisitions: list[tuple[str, int, str]] = []
    acquired_at: list[float] = []
    changes: list[tuple[float, str, str, list[str]]] = []
    events: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for path in sorted(workdir.glob("log-*.jsonl")):
        for rec in _read_jsonl(path):
            event = rec.get("event")
            if event == "lease.acquired":
                acquisitions.append(
                    (
                        str(rec["scheduler_id"]),
                        int(rec["fencing_token"]),
                        str(rec.get("lease") or "scheduler"),
                    )
                )
                acquired_at.append(_dt(rec["ts"]).timestamp())
            if event == "store.database_changed" and rec.get("level") == "ERROR":
                changes.append(
                    (
                        _dt(rec["ts"]).timestamp(),
                        str(rec.get("scheduler_id")),
                        str(rec.get("reason")),
                        [str(k) for k in rec.get("lost_keys") or []],
                    )
                )
            if event in _STAND_DOWN or event in _ATTEMPTS or event == "lease.acquired":
                sid = str(rec.get("scheduler_id") or path.name[len("log-") : -len(".jsonl")])
                events[sid].append((_dt(rec["ts"]).timestamp(), event))
    polls = [
        (float(r["t"]), str(r["holder"]), int(r["token"]), str(r.get("lease") or "scheduler"))
        for r in (
            _read_jsonl(workdir / "lease.jsonl") if (workdir / "lease.jsonl").exists() else []
        )
    ]
    died: set[str] = set()
    stopped_at = None
    pauses: list[tuple[str, float, float]] = []
    broker_faults: list[tuple[float, float]] = []
    broker_down: float | None = None
    damaged: dict[str, float] = {}
    leader_faults: list[tuple[str, str, float]] = []
    fault_times: list[float] = []
    starts: dict[str, float] = {}
    faults_path = workdir / "faults.jsonl"
    for rec in _read_jsonl(faults_path) if faults_path.exists() else []:
        kind = rec.get("fault")
        if kind == "start":
            starts.setdefault(str(rec["sid"]), float(rec["t"]))
        if kind not in (None, "start", "exit", "drain", "broker-back", "thawed", "end"):
            fault_times.append(float(rec["t"]))
        if rec.get("died"):
            died.add(rec["died"])
        if kind in ("stop", "frozen"):
            t = float(rec["t"])
            pauses.append((rec["sid"], t, t + float(rec["seconds"])))
        if kind in ("kill", "stop", "terminate", "frozen"):
            leader_faults.append((str(kind), str(rec["sid"]), float(rec["t"])))
        if kind in ("broker-stop", "broker-freeze"):
            broker_down = float(rec["t"])
        if kind == "broker-back" and broker_down is not None:
            broker_faults.append((broker_down, float(rec["t"])))
            broker_down = None
        if kind == "damage":
            damaged[str(rec["name"])] = float(rec["t"])
        if kind == "end":
            stopped_at = datetime.fromtimestamp(float(rec["t"]), UTC)
    if broker_down is not None:
        broker_faults.append((broker_down, float("inf")))
    config_path = workdir / "config.json"
    shards = int(json.loads(config_path.read_text())["shards"]) if config_path.exists() else 1
    broker_path = workdir / "broker.json"
    broker = Counter(json.loads(broker_path.read_text())) if broker_path.exists() else None
    promotions_path = workdir / "promotions.jsonl"
    promotions = [
        Promotion.from_json(rec)
        for rec in (_read_jsonl(promotions_path) if promotions_path.exists() else [])
    ]
    promotions.sort(key=lambda p: p.promote_at)
    return Evidence(
        promotions=promotions,
        changes=changes,
        starts=starts,
        acquired_at=acquired_at,
        executions=executions,
        final=final,
        segments=dict(segments),
        records=records,
        lease_polls=polls,
        acquisitions=acquisitions,
        shards=shards,
        died=died,
        faults_stopped_at=stopped_at,
        pauses=pauses,
        events=dict(events),
        broker=broker,
        broker_faults=broker_faults,
        damaged=damaged,
        leader_faults=leader_faults,
        fault_times=fault_times,
    )
