"""The chaos harness: scheduler processes, faults, admin edits, and the evidence they leave.

:class:`ChaosRun` starts ``schedulers`` real processes (``python -m goatbeat --app
tests.chaos.app:beat scheduler`` with a 3 s lease renewed every second), creates hundreds of
admin schedules firing every few seconds next to the code schedules, then for ``duration``
seconds injects faults drawn from ``random.Random(seed)``:

``kill``       SIGKILL the leader (anywhere: mid-claim, between submission and bookkeeping...)
``crash``      restart a node with ``GOATBEAT_CRASH_AFTER_SUBMIT=n`` so it dies right after its
               n-th submission, before the bookkeeping (the scheduler's own test hook)
``stop``       SIGSTOP the leader for longer than the lease TTL, then SIGCONT: it must stand
               down (refused, or its local deadline expired) while another node leads
``terminate``  ``pg_terminate_backend`` on every connection of the leader
``restart``    restart PostgreSQL cleanly (``-m fast``)
``outage``     kill PostgreSQL (``-m immediate``) and keep it down 0.5-4 s
``freeze-claim``  restart a node with ``GOATBEAT_FREEZE_IN_CLAIM=n``: it SIGSTOPs itself inside
               its n-th claim transaction (after the compare-and-set, locks held); a watcher
               sends SIGCONT 0.5-3 s after its lease could have expired
``broker-stop``   stop the broker (a real Redis, kept on disk) for 1-8 s, then start it again
``broker-freeze`` SIGSTOP the broker for 1-6 s (often past the lease: a leader then hangs
               inside its broker call while a standby takes over), then SIGCONT
``evil-row``   write a schedule with SQL naming ``os.system``: the scheduler must refuse it
``damage``     corrupt an admin schedule's trigger JSON (a zone that does not exist) with SQL:
               the damaged-row quarantine takes that schedule out (``schedule.invalid``) and
               nothing else may stop running
``promote``    (with ``standby``, see below) crash the primary's host under load, every process
               of it SIGKILLed at once, and promote the streaming standby
``standby``    (``ChaosConfig.standby``: ``"sync"`` or ``"async"``) a streaming standby of the
               primary (``pg_basebackup -R``): with ``"sync"`` the primary's
               ``synchronous_standby_names`` names it and ``synchronous_commit`` is on, so
               every commit waits for it. Everything connects with a multi-host URL (primary,
               standby) and ``target_session_attrs=read-write``, so the schedulers find the
               promoted one by themselves. The ``promote`` fault: for ``"async"`` the admin
               edits are paused and shipped first (the checker trusts the definition log),
               then the walsender is SIGSTOPped ``walsender_freeze`` seconds (2 by default,
               longer until a claim was committed meanwhile, at most 10 s more: committed WAL
               that never reaches the standby, as under replication lag); the
               primary's host is crashed, the standby's replay position and its claims and
               leases are read (what the promoted database starts from), it is promoted, and
               the old primary's data directory is started alone on a port nobody else knows
               and read (the forensic copy: what it had committed). The difference of the two
               is written to ``promotions.jsonl``: the claims and the bookkeeping that were in
               the WAL not shipped. A new standby of the promoted primary takes the old one's
               port, so a long run promotes again and again. ``promote_at``: one promotion at
               that moment instead of a ``promote`` among the random faults.
Each restarted node gets a new scheduler id and a random clock skew for the whole process
(``GOATBEAT_CLOCK_OFFSET``, goatbeat's own hook: none, minutes or hours, either way), and
``--max-submit-retries 2``, so a broker outage longer than an occurrence's grace makes it
missed. A thread edits admin schedules all along (trigger, misfire policy, grace) and asks for
manual runs; another polls the lease row.

At the end faults stop, every node is brought up, the cluster settles (leftovers resubmitted),
and the nodes get SIGTERM; a last ``--once`` scheduler drains what is still owed. The broker's
list is saved (``broker.json``). Everything goes into ``workdir`` for
:mod:`tests.chaos.checker`.
The seed and the fault schedule are printed, so ``--seed`` replays the same decisions (the
timing of the processes themselves is not deterministic).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from goatbeat.core.clock import OFFSET_ENV
from goatbeat.core.errors import ConflictError, StoreError
from goatbeat.core.instance import split_instance
from goatbeat.core.model import MisfirePolicy, Schedule, Source
from goatbeat.core.shards import lease_name
from goatbeat.core.triggers import CronTrigger, IntervalTrigger, Trigger
from goatbeat.stores.postgres import FREEZE_ENV, DsnConnectionProvider, PostgresStore
from tests.chaos.app import APP_NAME_PREFIX, DELIVERIES
from tests.chaos.checker import EVIL_PREFIX, Definition
from tests.chaos.pg import (
    CALL_TIMEOUT,
    ChaosPostgres,
    StandbyPostgres,
    crash_host,
    read_crashed,
    read_state,
    wal_bytes,
)
from tests.services import RedisServer

__all__ = ["ChaosConfig", "ChaosRun", "FAULTS", "OPTIONAL_FAULTS"]

ROOT = Path(__file__).resolve().parents[2]
FAULTS = (
    "kill",
    "crash",
    "stop",
    "terminate",
    "restart",
    "outage",
    "freeze-claim",
    "broker-stop",
    "broker-freeze",
    "evil-row",
    "damage",
)
OPTIONAL_FAULTS: tuple[str, ...] = ("promote",)
"""Faults only a ``--faults`` list (or ``--standby``) asks for (see the module docstring)."""
DRAIN_BOUND = 180.0
"""Seconds the end drain may take in all; each ``--once`` scheduler gets at most a minute."""
MAX_SUBMIT_RETRIES = 2
_SKEWS = (0.0, 0.0, 90.0, -300.0, 3600.0, -7200.0, 5 * 3600.0)
_TRIGGERS: tuple[Callable[[], Trigger], ...] = (
    lambda: IntervalTrigger("1s"),
    lambda: IntervalTrigger("2s"),
    lambda: IntervalTrigger("3s"),
    lambda: IntervalTrigger("5s"),
    lambda: CronTrigger("*/2 * * * * *"),
    lambda: CronTrigger("1-59/3 * * * * *"),
)
_POLICIES: tuple[tuple[MisfirePolicy, float, int], ...] = (
    (MisfirePolicy.RUN_ONCE, 3.0, 100),
    (MisfirePolicy.RUN_ONCE, 10.0, 100),
    (MisfirePolicy.SKIP, 2.0, 100),
    (MisfirePolicy.RUN_ALL, 2.0, 3),
    (MisfirePolicy.RUN_ALL, 6.0, 100),
)


@dataclass
class ChaosConfig:
    seed: int
    duration: float = 100.0
    schedulers: int = 3
    admin_schedules: int = 280
    lease_ttl: float = 3.0
    lease_renew: float = 1.0
    fault_gap: tuple[float, float] = (2.0, 5.0)
    faults: tuple[str, ...] = FAULTS
    edit_gap: float = 0.25
    fail_rate: float = 0.01
    settle: float = 12.0
    min_faults: int = 0
    """Faults injected at least, however long they take: on a loaded machine a fault's own
    pauses and restarts can eat a short run's duration (the sharded run once got 4 in 30 s)."""
    shards: int = 1
    """``--shards`` of every scheduler: each shard's lease is polled and its tokens checked
    apart, faults aimed at "the leader" hit a random shard's holder."""
    log: Callable[[str], None] = print
    standby: str | None = None
    """``"sync"`` or ``"async"``: a streaming standby, a multi-host URL, the ``promote`` fault
    (module docstring). None: one server, no promotion."""
    promote_at: float | None = None
    """Seconds after the faults begin: one promotion then (a bounded run), instead of a
    ``promote`` drawn among the faults."""
    walsender_freeze: float | None = None
    """Seconds the walsender is SIGSTOPped before the crash; None: 2 for ``"async"``, 0 for
    ``"sync"`` (a synchronous commit waits for the standby, so a frozen walsender would only
    stall every commit)."""


@dataclass
class _Node:
    name: str
    incarnation: int = 0
    proc: subprocess.Popen[bytes] | None = None
    sid: str = ""
    skew: float = 0.0
    stopped: bool = False
    expected_exit: bool = False
    freeze_armed: bool = False


@dataclass
class RunStats:
    faults: Counter[str] = field(default_factory=Counter)
    edits: int = 0
    edit_conflicts: int = 0
    edit_errors: int = 0
    manual_runs: int = 0
    restarts: int = 0
    unexpected_exits: Counter[str] = field(default_factory=Counter)


class ChaosRun:
    def __init__(self, config: ChaosConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.rng = random.Random(config.seed)
        self.server: ChaosPostgres | None = None
        self.standby: StandbyPostgres | None = None
        self._editing = threading.Lock()
        """Held by the editor during each edit: a promotion of an asynchronous standby pauses
        the edits and waits for it."""
        self._draining: subprocess.Popen[bytes] | None = None
        self.broker: RedisServer | None = None
        self._broker_frozen = False
        self.dsn = ""
        self.nodes = [_Node(name=f"node{i}") for i in range(config.schedulers)]
        self.stats = RunStats()
        self._stop = threading.Event()
        self._edits_on = threading.Event()
        self._threads: list[threading.Thread] = []
        self._files: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.admin_names: list[str] = []
        self.errors: list[str] = []
        """Exceptions of the background threads: the run is void if any."""

    # -- plumbing -------------------------------------------------------------------------------

    def _append(self, name: str, record: dict[str, Any]) -> None:
        with self._lock:
            fh = self._files.get(name)
            if fh is None:
                fh = self._files[name] = open(self.workdir / name, "a")  # noqa: SIM115
            fh.write(json.dumps(record, default=str) + "\n")
            fh.flush()

    def fault(self, kind: str, **detail: Any) -> None:
        self.stats.faults[kind] += 1
        self._append("faults.jsonl", {"fault": kind, "t": time.time(), **detail})
        self.config.log(f"  fault {kind} {detail}")

    def _store(self, label: str) -> PostgresStore:
        store = PostgresStore(
            connection_provider=DsnConnectionProvider(
                self.dsn, connect_timeout=2, application_name=f"harness:{label}"
            )
        )
        # Every wait for the server bounded (a statement, a connection), as the scheduler's.
        store.bound_calls(CALL_TIMEOUT)
        return store

    def _sql(self) -> Any:
        """A plain psycopg connection to the primary, every wait bounded."""
        import psycopg

        return psycopg.connect(
            self.dsn,
            connect_timeout=2,
            options=f"-c statement_timeout={int(CALL_TIMEOUT * 1000)}",
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def run(self) -> None:
        """Everything up to the evidence; always cleans up its processes and server."""
        cfg = self.config
        cfg.log(
            f"chaos: seed={cfg.seed} duration={cfg.duration:g}s schedulers={cfg.schedulers} "
            f"workdir={self.workdir}"
        )
        self.workdir.mkdir(parents=True, exist_ok=True)
        if any(self.workdir.iterdir()):
            # Evidence is appended to and the broker reloads its data directory: an earlier
            # run's records would be checked as this one's.
            raise ValueError(f"chaos workdir {self.workdir} is not empty")
        self.server = ChaosPostgres().start()
        self.dsn = self.server.dsn
        if cfg.standby is not None:
            if cfg.standby not in ("sync", "async"):
                raise ValueError(f"standby must be 'sync' or 'async', not {cfg.standby!r}")
            self.standby = StandbyPostgres(self.server, synchronous=cfg.standby == "sync").start()
            # Both hosts, the writable one wanted: after a promotion the schedulers (and the
            # harness) find the new primary by themselves.
            self.dsn = (
                f"postgresql://postgres@127.0.0.1:{self.server.port},127.0.0.1:"
                f"{self.standby.port}/postgres?target_session_attrs=read-write&connect_timeout=2"
            )
        self.broker = RedisServer(data_dir=self.workdir / "redis").start()
        try:
            self._run()
        finally:
            self._shutdown()

    def _run(self) -> None:
        cfg = self.config
        assert self.server is not None
        (self.workdir / "config.json").write_text(
            json.dumps({"shards": cfg.shards, "standby": cfg.standby})
        )
        setup = self._store("setup")
        setup.migrate()
        self._create_admin_schedules(setup)
        setup.close()
        for node in self.nodes:
            self._start(node)
        self._spawn(self._lease_poller)
        self._spawn(self._editor)
        self._spawn(self._freeze_watcher)
        self._edits_on.set()
        deadline = time.monotonic() + cfg.duration
        self._sleep(min(3.0, cfg.duration / 4))
        bag: list[str] = []
        # Past the duration only while fewer faults than min_faults were injected (an attempt
        # may find no leader to hit), and never beyond three times the duration.
        cap = deadline + 2 * cfg.duration
        began = time.monotonic()
        promote_due = cfg.promote_at is not None and cfg.standby is not None
        while time.monotonic() < deadline or (
            sum(self.stats.faults.values()) < cfg.min_faults and time.monotonic() < cap
        ):
            if not bag:
                # Shuffled rounds rather than independent draws: a short run still gets every
                # kind of fault, in an order the seed decides.
                bag = list(cfg.faults)
                self.rng.shuffle(bag)
            self._supervise()
            if promote_due and time.monotonic() - began >= (cfg.promote_at or 0.0):
                promote_due = False
                self._inject("promote")
            elif bag:
                self._inject(bag.pop())
            self._supervise()
            self._sleep(self.rng.uniform(*cfg.fault_gap))
        self._edits_on.clear()
        self.fault("end")
        # Settle: every node up, no faults, so leftovers of the last crash are resubmitted.
        settle_until = time.monotonic() + cfg.settle
        while time.monotonic() < settle_until:
            self._supervise()
            self._sleep(0.2)
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.expected_exit = True
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.config.log(f"  {node.sid} ignored SIGTERM for 20 s: killed")
                    node.proc.kill()
                    node.proc.wait(timeout=10)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=20)
        self._drain()
        self._save_broker()

    def _drain(self) -> None:
        """One last leader at a time, ``scheduler --once`` without injected failures, until
        nothing is left ``claimed``: what the cluster left at SIGTERM (a retry not yet due) is
        what any next leader submits when its retry is due."""
        store = self._store("drain")
        deadline = time.monotonic() + DRAIN_BOUND
        try:
            for attempt in range(40):
                if time.monotonic() > deadline:
                    break
                node = _Node(name="drain", incarnation=attempt)
                # A long lease: its one iteration may submit for up to 30 s. With the run's 3 s,
                # a loaded machine (two CPU burners) got ~90 submissions a run out of it, each
                # run starting in ~20 s, and new claims of every run outgrew them.
                self._start(
                    node,
                    fail_rate=0.0,
                    extra=[
                        "--once", "--batch-size", "100000",
                        "--lease-ttl", "30s", "--lease-renew-interval", "5s",
                    ],
                )  # fmt: skip
                assert node.proc is not None
                self._draining = node.proc
                try:
                    node.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait(timeout=10)
                    self.errors.append(f"drain: {node.sid} was still running after 60 s")
                self._draining = None
                self._append(
                    "faults.jsonl",
                    {
                        "fault": "drain",
                        "t": time.time(),
                        "sid": node.sid,
                        "rc": node.proc.returncode,
                    },
                )
                try:
                    if not store.pending(limit=1) and store.next_retry_at() is None:
                        return
                    retry_at = store.next_retry_at()
                    wait = 0.5 if retry_at is None else (retry_at - store.now()).total_seconds()
                except StoreError as exc:
                    self.config.log(f"  drain: {exc}")
                    wait = 1.0
                time.sleep(min(max(wait, 0.1), 30.0, max(0.0, deadline - time.monotonic())))
        finally:
            store.close()
        # Reported, not raised: the checker still reads what there is (and names what is left).
        self.errors.append(f"the drain left claimed rows after {DRAIN_BOUND:g} s or 40 runs")

    def _shutdown(self) -> None:
        self._stop.set()
        if self._draining is not None and self._draining.poll() is None:
            self._draining.kill()
            self._draining.wait(timeout=10)
        if self.broker is not None and self.broker.proc is not None and self._broker_frozen:
            os.kill(self.broker.proc.pid, signal.SIGCONT)
            self._broker_frozen = False
        for node in self.nodes:
            proc = node.proc
            if proc is not None and proc.poll() is None:
                if node.stopped:
                    os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=10)
        for thread in self._threads:
            thread.join(timeout=10)
        for fh in self._files.values():
            fh.close()
        self._files.clear()

    def stop_server(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            self.broker = None
        if self.standby is not None:
            self.standby.stop()
            self.standby = None
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _save_broker(self) -> None:
        """What reached the broker, for the checker: every key pushed, in order."""
        import redis

        assert self.broker is not None
        if self.broker.proc is None:
            self.broker.start()
        client = redis.Redis.from_url(
            self.broker.url, socket_timeout=CALL_TIMEOUT, socket_connect_timeout=CALL_TIMEOUT
        )
        try:
            keys = [k.decode() for k in client.lrange(DELIVERIES, 0, -1)]
        finally:
            client.close()
        (self.workdir / "broker.json").write_text(json.dumps(keys))

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _spawn(self, target: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                target()
            except Exception as exc:  # reported by the run, never swallowed
                self.errors.append(f"{target.__name__}: {type(exc).__name__}: {exc}")
                self.config.log(f"  harness thread failed: {self.errors[-1]}")

        thread = threading.Thread(target=guarded, daemon=True, name=target.__name__)
        thread.start()
        self._threads.append(thread)

    # -- schedules ------------------------------------------------------------------------------

    def _admin_schedule(self, name: str, rng: random.Random, description: str) -> Schedule:
        policy, grace, limit = rng.choice(_POLICIES)
        return Schedule(
            name=name,
            task="tests.chaos.app.noop",
            trigger=rng.choice(_TRIGGERS)(),
            args=(name,),
            misfire=policy,
            misfire_grace=timedelta(seconds=grace),
            catch_up_limit=limit,
            description=description,
            source=Source.ADMIN,
        )

    def _create_admin_schedules(self, store: PostgresStore) -> None:
        rng = random.Random(f"{self.config.seed}:schedules")
        for i in range(self.config.admin_schedules):
            name = f"admin-{i:03d}"
            stored = store.create(self._admin_schedule(name, rng, "created"))
            assert stored.updated_at is not None
            self.admin_names.append(name)
            self._append(
                "defs.jsonl",
                {
                    "name": name,
                    "start": stored.updated_at.isoformat(),
                    "definition": Definition.of(stored).to_json(),
                    "answered": time.time(),
                },
            )

    # -- processes ------------------------------------------------------------------------------

    def _start(
        self,
        node: _Node,
        *,
        crash_after: int | None = None,
        freeze_in_claim: int | None = None,
        fail_rate: float | None = None,
        extra: list[str] | None = None,
    ) -> None:
        cfg = self.config
        node.incarnation += 1
        node.sid = f"{node.name}.{node.incarnation}"
        node.skew = self.rng.choice(_SKEWS)
        node.stopped = False
        node.expected_exit = crash_after is not None
        node.freeze_armed = freeze_in_claim is not None
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "GB_CHAOS_DSN": self.dsn,
            "GB_CHAOS_REDIS": self.broker.url if self.broker is not None else "",
            "GB_CHAOS_DIR": str(self.workdir),
            "GB_CHAOS_SID": node.sid,
            OFFSET_ENV: str(node.skew),
            "GB_CHAOS_FAIL_RATE": str(cfg.fail_rate if fail_rate is None else fail_rate),
            "GB_CHAOS_SEED": str(cfg.seed),
        }
        env.pop("GOATBEAT_APP", None)
        env.pop("GOATBEAT_CRASH_AFTER_SUBMIT", None)
        env.pop(FREEZE_ENV, None)
        if crash_after is not None:
            env["GOATBEAT_CRASH_AFTER_SUBMIT"] = str(crash_after)
        if freeze_in_claim is not None:
            env[FREEZE_ENV] = str(freeze_in_claim)
        log = open(self.workdir / f"log-{node.sid}.jsonl", "ab")  # noqa: SIM115
        node.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "goatbeat",
                "--app",
                "tests.chaos.app:beat",
                "--log-format",
                "json",
                "scheduler",
                "--scheduler-id",
                node.sid,
                "--lease-ttl",
                f"{cfg.lease_ttl:g}s",
                "--lease-renew-interval",
                f"{cfg.lease_renew:g}s",
                "--max-sleep",
                "1s",
                "--max-submit-retries",
                str(MAX_SUBMIT_RETRIES),
                "--shards",
                str(cfg.shards),
                *(extra or ["--batch-size", "100"]),
            ],
            cwd=self.workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        self._append(
            "faults.jsonl",
            {
                "fault": "start",
                "t": time.time(),
                "sid": node.sid,
                "skew": node.skew,
                "crash_after": crash_after,
                "freeze_in_claim": freeze_in_claim,
            },
        )

    def _supervise(self) -> None:
        """Restart nodes that exited (crash hook, a failed start during an outage...)."""
        for node in self.nodes:
            proc = node.proc
            if proc is None or proc.poll() is None:
                continue
            rc = proc.returncode
            if not node.expected_exit:
                self.stats.unexpected_exits[str(rc)] += 1
                tail = (self.workdir / f"log-{node.sid}.jsonl").read_text(errors="replace")
                self.config.log(f"  {node.sid} exited {rc}: {tail[-400:]}")
            self._append(
                "faults.jsonl", {"fault": "exit", "t": time.time(), "died": node.sid, "rc": rc}
            )
            self.stats.restarts += 1
            self._start(node)

    def _leader(self) -> _Node | None:
        try:
            store = self._store("probe")
            try:
                leases = store.read_leases(self._lease_names())
            finally:
                store.close()
        except StoreError:
            return None
        holders = sorted({split_instance(row[0])[0] for row in leases.values() if not row[3]})
        if not holders:
            return None
        # With shards, "the leader" is the holder of a shard the seed picks.
        holder = self.rng.choice(holders)
        return next((n for n in self.nodes if n.sid == holder), None)

    def _claiming(self, since: float | None = None) -> bool:
        """Whether a scheduler claimed something in the last second (or since ``since``)."""
        import psycopg

        try:
            with self._sql() as conn:
                row = conn.execute(
                    "SELECT count(*) FROM goatbeat_execution WHERE claimed_at > "
                    "coalesce(to_timestamp(%s), now() - interval '1 second')",
                    (since,),
                ).fetchone()
        except psycopg.Error:
            return False
        return row is not None and row[0] > 0

    def _lease_names(self) -> list[str]:
        return [lease_name(i, self.config.shards) for i in range(self.config.shards)]

    # -- faults ---------------------------------------------------------------------------------

    def _inject(self, kind: str) -> None:
        cfg = self.config
        assert self.server is not None
        if kind in ("kill", "stop", "terminate"):
            leader = self._leader()
            waited = time.monotonic() + 2 * cfg.lease_ttl
            while leader is None and time.monotonic() < waited and not self._stop.is_set():
                self._sleep(0.1)  # mid-handover: the fault is meant for the next leader
                leader = self._leader()
            if leader is None or leader.proc is None or leader.proc.poll() is not None:
                return
            if kind == "kill":
                # A random extra delay so the kill lands anywhere in the iteration.
                time.sleep(self.rng.uniform(0, 0.3))
                self.fault("kill", sid=leader.sid)
                leader.expected_exit = True
                leader.proc.kill()
                leader.proc.wait()
                self._append(
                    "faults.jsonl",
                    {"fault": "exit", "t": time.time(), "died": leader.sid, "rc": -9},
                )
                self._sleep(self.rng.uniform(0.2, 2.0))
                self._start(leader)
            elif kind == "stop":
                pause = cfg.lease_ttl + self.rng.uniform(0.5, 3.0)
                self.fault("stop", sid=leader.sid, seconds=round(pause, 2))
                leader.stopped = True
                os.kill(leader.proc.pid, signal.SIGSTOP)
                self._sleep(pause)
                os.kill(leader.proc.pid, signal.SIGCONT)
                leader.stopped = False
            else:
                killed = self._terminate(APP_NAME_PREFIX + leader.sid)
                self.fault("terminate", sid=leader.sid, backends=killed)
        elif kind == "crash":
            # The crash hook needs a fresh process: replace a standby (or the leader).
            node = self.rng.choice(self.nodes)
            n = self.rng.randint(1, 120)
            self.fault("crash", sid=node.sid, crash_after=n)
            if node.proc is not None and node.proc.poll() is None:
                node.expected_exit = True
                node.proc.kill()
                node.proc.wait()
                self._append(
                    "faults.jsonl", {"fault": "exit", "t": time.time(), "died": node.sid, "rc": -9}
                )
            self._start(node, crash_after=n)
        elif kind == "freeze-claim":
            # A fresh process freezes itself inside its n-th claim; prefer the leader's slot,
            # so the frozen one leads (a standby's claims start only when it takes over).
            node = self._leader() or self.rng.choice(self.nodes)
            n = self.rng.randint(2, 6)
            self.fault("freeze-claim", sid=node.sid, freeze_in_claim=n)
            if node.proc is not None and node.proc.poll() is None:
                node.expected_exit = True
                node.proc.kill()
                node.proc.wait()
                self._append(
                    "faults.jsonl", {"fault": "exit", "t": time.time(), "died": node.sid, "rc": -9}
                )
            self._start(node, freeze_in_claim=n)
        elif kind == "broker-stop":
            assert self.broker is not None
            down = self.rng.uniform(1.0, 8.0)
            self.fault("broker-stop", seconds=round(down, 2))
            self.broker.stop()
            self._sleep(down)
            self.broker.start()
            self._append("faults.jsonl", {"fault": "broker-back", "t": time.time()})
        elif kind == "broker-freeze":
            assert self.broker is not None and self.broker.proc is not None
            frozen = self.rng.uniform(1.0, 6.0)
            self.fault("broker-freeze", seconds=round(frozen, 2))
            self._broker_frozen = True
            os.kill(self.broker.proc.pid, signal.SIGSTOP)
            self._sleep(frozen)
            os.kill(self.broker.proc.pid, signal.SIGCONT)
            self._broker_frozen = False
            self._append("faults.jsonl", {"fault": "broker-back", "t": time.time()})
        elif kind == "evil-row":
            name = self._write_evil_row()
            if name is not None:
                self.fault("evil-row", name=name)
        elif kind == "damage":
            name = self._damage_row()
            if name is not None:
                self.fault("damage", name=name)
        elif kind == "promote":
            if self.standby is not None:
                self._promote()
        elif kind == "restart":
            self.fault("restart")
            self.server.restart()
        elif kind == "outage":
            down = self.rng.uniform(0.5, 4.0)
            self.fault("outage", seconds=round(down, 2))
            self.server.crash(down_for=down)

    def _write_evil_row(self) -> str | None:
        """A schedule written with SQL behind goatbeat's back, naming a task nobody allowed."""
        import psycopg

        name = f"{EVIL_PREFIX}{self.stats.faults['evil-row']:03d}"
        try:
            with self._sql() as conn:
                conn.execute(
                    "INSERT INTO goatbeat_schedule (name, source, task, trigger, args, "
                    "next_run_at) VALUES (%s, 'admin', 'os.system', %s, %s, now())",
                    (name, json.dumps({"kind": "interval", "every": 1.0}),
                     json.dumps(["touch /tmp/goatbeat-chaos-pwned"])),
                )  # fmt: skip
        except psycopg.Error:
            return None
        return name

    def _damage_row(self) -> str | None:
        """Corrupt an admin schedule's trigger JSON with SQL (a zone that does not exist)."""
        import psycopg

        with self._lock:
            if len(self.admin_names) < 2:
                return None
            name = self.rng.choice(self.admin_names)
            self.admin_names.remove(name)  # the editor must not repair it
        spec = {"kind": "cron", "expression": "* * * * * *", "timezone": "Mars/Olympus"}
        try:
            with self._sql() as conn:
                conn.execute(
                    "UPDATE goatbeat_schedule SET trigger = %s WHERE name = %s",
                    (json.dumps(spec), name),
                )
        except psycopg.Error:
            return None
        return name

    def _promote(self) -> None:
        """The primary's host lost under load, the standby promoted (module docstring); the
        evidence in ``promotions.jsonl``. Every wait is bounded (the helpers' CALL_TIMEOUT,
        ``pg_ctl -t 60``)."""
        assert self.server is not None and self.standby is not None
        # Under load: a scheduler claiming right now (a slow machine may still be starting
        # them, or a leader be catching up after its start).
        waited = time.monotonic() + 30.0
        while not self._claiming() and time.monotonic() < waited and not self._stop.is_set():
            self._sleep(0.2)
        primary, standby = self.server, self.standby
        sync = standby.synchronous
        freeze = self.config.walsender_freeze
        if freeze is None:
            freeze = 0.0 if sync else 2.0
        record: dict[str, Any] = {"sync": sync, "walsender_freeze": freeze}
        paused = False
        if not sync and self._edits_on.is_set():
            # An edit the standby never gets would be in the definition log and not in the
            # database: pause them, and let the standby replay the last one.
            self._edits_on.clear()
            paused = True
            if self._editing.acquire(timeout=4 * CALL_TIMEOUT):
                self._editing.release()
            with self._sql() as conn:
                row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            if row is not None and not standby.wait_replayed(row[0]):
                self.errors.append("promote: the standby never replayed the last admin edit")
        if freeze > 0:
            walsender = standby.walsender_pid()
            if walsender is not None:
                os.kill(walsender, signal.SIGSTOP)  # the SIGKILL below ends it all the same
                record["frozen_at"] = time.time()
                time.sleep(freeze)
                # At least one claim committed and never shipped, however starved the
                # schedulers (two CPU burners once left 2 s without a single commit).
                waited = time.monotonic() + 10.0
                while not self._claiming(since=record["frozen_at"]):
                    if time.monotonic() > waited:
                        break
                    time.sleep(0.2)
        self.fault("promote", sync=sync, walsender_freeze=freeze, port=standby.port)
        record["n"] = self.stats.faults["promote"]
        record["crash_at"] = time.time()
        crash_host(primary)
        record["crashed_at"] = time.time()
        # What the promoted database starts from: all the WAL the standby received, replayed.
        record["replay_lsn"], record["replay_ts"] = standby.caught_up()
        starts_from = read_state(standby.dsn)
        # At least a second with no primary at all: a commit acknowledged by the old one and a
        # commit on the new one can then be told apart by the time alone (the checker's epochs).
        time.sleep(max(0.0, record["crashed_at"] + 1.0 - time.time()))
        record["promote_at"] = time.time()
        standby.promote()
        record["promoted_at"] = time.time()
        self.server = standby
        if paused:
            self._edits_on.set()
        try:
            had = read_crashed(primary)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            self.errors.append(f"promote {record['n']}: {exc}")  # the run is void
            had = {"executions": {}, "leases": {}, "wal_lsn": record["replay_lsn"]}
        primary.stop()  # its data directory goes; its port takes the next standby
        lost_claims, lost_updates, extra = _diff(had["executions"], starts_from["executions"])
        record.update(
            old_wal_end=had["wal_lsn"],
            wal_not_shipped_bytes=wal_bytes(
                self.dsn, had["wal_lsn"], record["replay_lsn"] or had["wal_lsn"]
            ),
            lost_claims=lost_claims,
            lost_updates=lost_updates,
            only_on_standby=extra,
            leases_old=had["leases"],
            leases_standby=starts_from["leases"],
        )
        self._append("promotions.jsonl", record)
        self.config.log(
            f"  promoted {standby.port}: {record['wal_not_shipped_bytes']} bytes of WAL not "
            f"shipped, {len(lost_claims)} claims and {len(lost_updates)} updates lost"
        )
        # A new standby of the promoted primary on the old one's port (the URL stays the same),
        # synchronous again if this one was.
        self.standby = StandbyPostgres(standby, synchronous=sync, port=primary.port).start()

    def _freeze_watcher(self) -> None:
        """Resume a node frozen inside its claim (GOATBEAT_FREEZE_IN_CLAIM) once its lease
        could have expired, and log the pause for the checker."""
        cfg = self.config
        while not self._stop.is_set():
            for node in list(self.nodes):
                proc = node.proc
                if not node.freeze_armed or proc is None or proc.poll() is not None:
                    continue
                if not _is_stopped(proc.pid):
                    continue
                stopped_at = time.time()
                node.freeze_armed = False
                node.stopped = True
                pause = cfg.lease_ttl + self.rng.uniform(0.5, 3.0)
                self._append(
                    "faults.jsonl",
                    {"fault": "frozen", "t": stopped_at, "sid": node.sid, "seconds": pause},
                )
                self._stop.wait(pause)
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGCONT)
                node.stopped = False
                self._append("faults.jsonl", {"fault": "thawed", "t": time.time(), "sid": node.sid})
            self._stop.wait(0.05)

    def _terminate(self, application_name: str) -> int:
        import psycopg

        try:
            with self._sql() as conn:
                conn.autocommit = True
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (application_name,),
                ).fetchall()
        except psycopg.Error:
            return 0
        return len(rows)

    # -- background threads ---------------------------------------------------------------------

    def _lease_poller(self) -> None:
        store = self._store("lease-poller")
        last: dict[str, tuple[str, int]] = {}
        names = self._lease_names()
        try:
            while not self._stop.is_set():
                try:
                    leases = store.read_leases(names)
                except StoreError:
                    self._stop.wait(0.2)
                    continue
                for name, lease in sorted(leases.items()):
                    if (lease[0], lease[1]) != last.get(name):
                        last[name] = (lease[0], lease[1])
                        self._append(
                            "lease.jsonl",
                            {
                                "t": time.time(),
                                "lease": name,
                                "holder": split_instance(lease[0])[0],
                                "token": lease[1],
                            },
                        )
                self._stop.wait(0.05)
        finally:
            store.close()

    def _editor(self) -> None:
        """Admin-style edits while claims run: change a schedule's trigger and misfire policy,
        and now and then ask for a manual run. Each landed edit is logged with the database
        time of its transaction (``updated_at``) for the checker."""
        rng = random.Random(f"{self.config.seed}:edits")
        store = self._store("editor")
        n = 0
        try:
            while not self._stop.is_set():
                if not self._edits_on.wait(0.2):
                    continue
                self._stop.wait(rng.uniform(0, 2 * self.config.edit_gap))
                with self._editing:
                    if not self._edits_on.is_set():
                        continue
                    name = rng.choice(self.admin_names)
                    if rng.random() < 0.1:
                        try:
                            store.request_run(name)
                            self.stats.manual_runs += 1
                        except (StoreError, ConflictError):
                            self.stats.edit_errors += 1
                        continue
                    n += 1
                    self._edit(store, name, self._admin_schedule(name, rng, f"edit-{n}"))
        finally:
            store.close()

    def _edit(self, store: PostgresStore, name: str, wanted: Schedule) -> None:
        for _attempt in range(5):
            try:
                stored = store.update(wanted)
            except ConflictError:
                self.stats.edit_conflicts += 1  # a claim advanced the row meanwhile: retry
                continue
            except StoreError:
                self.stats.edit_errors += 1
                stored = self._landed(store, wanted)  # committed or not? ask the row
                if stored is None:
                    return
            self._record_edit(stored)
            return

    def _landed(self, store: PostgresStore, wanted: Schedule) -> Schedule | None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                row = store.get(wanted.name)
            except StoreError:
                self._stop.wait(0.2)
                continue
            return row if row.description == wanted.description else None
        raise RuntimeError("the database never came back for the editor")

    def _record_edit(self, stored: Schedule) -> None:
        assert stored.updated_at is not None
        self.stats.edits += 1
        self._append(
            "defs.jsonl",
            {
                "name": stored.name,
                "start": stored.updated_at.isoformat(),
                "definition": Definition.of(stored).to_json(),
                "answered": time.time(),
            },
        )


def _diff(
    old: dict[int, list[Any]], new: dict[int, list[Any]]
) -> tuple[list[list[Any]], list[list[Any]], list[list[Any]]]:
    """What the old primary had committed and the standby did not: claims (rows absent, or
    under another key: the id was handed out again) as ``[id, key, token, status,
    scheduler_id]``, and updates of rows both have (``[id, key, old status, old attempts,
    standby status, standby attempts]``); third, rows only the standby has (none, ever)."""
    lost_claims: list[list[Any]] = []
    lost_updates: list[list[Any]] = []
    for i, (key, token, status, attempts, sid) in sorted(old.items()):
        there = new.get(i)
        if there is None or there[0] != key or there[1] != token:
            lost_claims.append([i, key, token, status, sid])
        elif there[2] != status or there[3] != attempts:
            lost_updates.append([i, key, status, attempts, there[2], there[3]])
    extra = [[i, *row] for i, row in sorted(new.items()) if old.get(i, [None])[0] != row[0]]
    return lost_claims, lost_updates, extra


def _is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` in /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "T"
