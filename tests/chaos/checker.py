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
    harness lets the cluster settle before stopping it, so leftovers of a crash are resubmitted
    and no injected failure is ever final). Every submission is of a claimed row, carrying the
    fencing token the row was claimed with.

``unjustified-duplicate``
    A key submitted more than once is allowed only when the row was still ``claimed`` when the
    resubmitting scheduler read it: a crash, a kill, a pause or a lost connection came between
    the earlier submission and its bookkeeping. Precisely: a resubmission must come from a
    ``pending`` read of that row by the same process, and no ``booked`` record of the row may
    predate that read (``booked`` is written after the commit, ``pending`` before the query, and
    all processes share the host's real clock). Each justified duplicate is classified by
    what hit the first submitter (died / bookkeeping failed / booked late).

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
    the lease polls, and in the ``lease.acquired`` log events).

``stalled``
    Liveness at the end: every enabled schedule's final ``next_run_at`` lies after the moment
    faults stopped (the cluster recovered from everything).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from goatbeat.core.model import MisfirePolicy, Schedule
from goatbeat.core.triggers import Trigger, trigger_from_spec

__all__ = [
    "Definition",
    "Segment",
    "ExecRow",
    "Evidence",
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


@dataclass
class Evidence:
    executions: list[ExecRow]
    final: dict[str, Schedule]
    """Final schedule rows by name."""
    segments: dict[str, list[Segment]]
    """Definition history by schedule name, oldest first."""
    records: list[dict[str, Any]]
    """submit / pending / booked records; each has ``src`` (the scheduler id of its file)."""
    lease_polls: list[tuple[float, str, int]] = field(default_factory=list)
    acquisitions: list[tuple[str, int]] = field(default_factory=list)
    """(scheduler id, fencing token) of every ``lease.acquired`` log event."""
    died: set[str] = field(default_factory=set)
    """Scheduler ids whose process was killed or crashed."""
    faults_stopped_at: datetime | None = None
    pauses: list[tuple[str, float, float]] = field(default_factory=list)
    """(scheduler id, SIGSTOP wall time, SIGCONT wall time) of every pause."""
    events: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    """Lease-related log events (wall time, event) by scheduler id."""


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
    _check_duplicates(ev, report)
    _check_misfire(ev, report)
    _check_edits(ev, report)
    _check_tokens(ev, report)
    _check_pauses(ev, report)
    _check_liveness(ev, report)
    return report


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
    for e in ev.executions:
        if not submitted.get(e.key):
            report.add("not-submitted", f"{e.key} (status {e.status}) never submitted")
        elif e.status != "submitted":
            report.add(
                "not-submitted", f"{e.key} ends {e.status} after {submitted[e.key]} submissions"
            )
    for r in ev.records:
        if r["type"] != "submit":
            continue
        row = by_key.get(r["key"])
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


def _check_duplicates(ev: Evidence, report: Report) -> None:
    submits: dict[int, list[dict[str, Any]]] = defaultdict(list)
    pending: dict[tuple[str, int], list[float]] = defaultdict(list)
    booked: dict[int, list[tuple[float, str]]] = defaultdict(list)
    for r in ev.records:
        if r["type"] == "submit":
            submits[r["id"]].append(r)
        elif r["type"] == "pending":
            for i in r["ids"]:
                pending[(r["src"], i)].append(r["t"])
        elif r["type"] == "booked":
            for i in r["ids"]:
                booked[i].append((r["t"], r["src"]))
    causes: Counter[str] = Counter()
    extra = 0
    for exec_id, subs in submits.items():
        if len(subs) < 2:
            continue
        subs.sort(key=lambda r: r["t"])
        for earlier, later in zip(subs, subs[1:], strict=False):
            extra += 1
            reads = [t for t in pending.get((later["src"], exec_id), []) if t <= later["t"]]
            if not reads:
                report.add(
                    "unjustified-duplicate",
                    f"{later['key']} submitted again by {later['src']} without reading it as "
                    "pending (a second claim?)",
                )
                continue
            read_at = max(reads)
            before = [t for t, _ in booked.get(exec_id, []) if t < read_at]
            if before:
                report.add(
                    "unjustified-duplicate",
                    f"{later['key']} resubmitted by {later['src']} from a read at {read_at:.6f}, "
                    f"{read_at - min(before):.3f}s after its bookkeeping had committed",
                )
                continue
            first_booking = [t for t, src in booked.get(exec_id, []) if src == earlier["src"]]
            if first_booking:
                causes["booked-late (pause or slow bookkeeping)"] += 1
            elif earlier["src"] in ev.died:
                causes["submitter died before bookkeeping"] += 1
            else:
                causes["bookkeeping failed (lost connection)"] += 1
    report.figures["duplicate_submissions"] = extra
    report.figures["duplicate_causes"] = dict(causes)


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
        if len(segments) < 2:
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


def _check_tokens(ev: Evidence, report: Report) -> None:
    holders: dict[int, set[str]] = defaultdict(set)
    ordered = sorted(
        (e for e in ev.executions if e.token is not None), key=lambda e: (e.claimed_at, e.id)
    )
    highest: ExecRow | None = None
    for e in ordered:
        assert e.token is not None
        holders[e.token].add(e.scheduler_id or "?")
        if highest is not None and highest.token is not None and e.token < highest.token:
            report.add(
                "token-order",
                f"{e.key} claimed at {e.claimed_at.isoformat()} with token {e.token} after "
                f"{highest.key} was claimed with token {highest.token}",
            )
        if highest is None or (highest.token or 0) < e.token:
            highest = e
    for sid, token in ev.acquisitions:
        holders[token].add(sid)
    last: tuple[float, str, int] | None = None
    changes = 0
    for poll in sorted(ev.lease_polls):
        _, holder, token = poll
        holders[token].add(holder)
        if last is not None:
            if token < last[2]:
                report.add("token-order", f"lease token went from {last[2]} back to {token}")
            elif holder != last[1] and token <= last[2]:
                report.add(
                    "token-order", f"lease went from {last[1]} to {holder} keeping token {token}"
                )
            elif holder != last[1]:
                changes += 1
        last = poll
    for token, sids in sorted(holders.items()):
        if len(sids) > 1:
            report.add("token-holder", f"token {token} used by {sorted(sids)}")
    report.figures["fencing_tokens"] = len(holders)
    report.figures["leader_changes_polled"] = changes


_STAND_DOWN = frozenset({"lease.lost", "claim.refused", "lease.standby"})
_ATTEMPTS = frozenset({"occurrence.submit_retry", "occurrence.submit_failed"})


def _check_pauses(ev: Evidence, report: Report) -> None:
    """A leader paused past its TTL while another took over must stand down on waking."""
    replaced = stood_down = 0
    for sid, stopped, resumed in ev.pauses:
        others = [p for p in ev.lease_polls if stopped < p[0] < resumed and p[1] != sid]
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
        if s.enabled and (s.next_run_at is None or s.next_run_at <= ev.faults_stopped_at):
            report.add(
                "stalled",
                f"{name}: next_run_at {s.next_run_at} not past the end of the faults "
                f"{ev.faults_stopped_at.isoformat()}",
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

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, schedule_name, scheduled_at, idempotency_key, kind, status, "
            "fencing_token, scheduler_id, claimed_at FROM goatbeat_execution"
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
        )
        for r in rows
    ]
    store = PostgresStore(dsn)
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
    acquisitions: list[tuple[str, int]] = []
    events: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for path in sorted(workdir.glob("log-*.jsonl")):
        for rec in _read_jsonl(path):
            event = rec.get("event")
            if event == "lease.acquired":
                acquisitions.append((str(rec["scheduler_id"]), int(rec["fencing_token"])))
            if event in _STAND_DOWN or event in _ATTEMPTS or event == "lease.acquired":
                sid = str(rec.get("scheduler_id") or path.name[len("log-") : -len(".jsonl")])
                events[sid].append((_dt(rec["ts"]).timestamp(), event))
    polls = [
        (float(r["t"]), str(r["holder"]), int(r["token"]))
        for r in (
            _read_jsonl(workdir / "lease.jsonl") if (workdir / "lease.jsonl").exists() else []
        )
    ]
    died: set[str] = set()
    stopped_at = None
    pauses: list[tuple[str, float, float]] = []
    faults_path = workdir / "faults.jsonl"
    for rec in _read_jsonl(faults_path) if faults_path.exists() else []:
        if rec.get("died"):
            died.add(rec["died"])
        if rec.get("fault") == "stop":
            t = float(rec["t"])
            pauses.append((rec["sid"], t, t + float(rec["seconds"])))
        if rec.get("fault") == "end":
            stopped_at = datetime.fromtimestamp(float(rec["t"]), UTC)
    return Evidence(
        executions=executions,
        final=final,
        segments=dict(segments),
        records=records,
        lease_polls=polls,
        acquisitions=acquisitions,
        died=died,
        faults_stopped_at=stopped_at,
        pauses=pauses,
        events=dict(events),
    )
