"""Golden traces of the conformance suite: every public store call a test makes, and what it
returned or raised, per backend, recorded once and compared on every run.

A store's behaviour is what its callers see. While the store's insides move (one store over
several SQL dialects instead of three hand-written ones, issue #28) each conformance test's
trace must stay exactly what it was, so a difference the assertions happen not to look at still
fails the test. The traces were recorded on the code before the move (``golden/<backend>.json``).

What is recorded: the calls made from the test's own thread to a store method of the
``ScheduleStore`` contract (and the ``ShardedStore`` extras), outermost calls only (a store
calling its own public methods is its business), with the store's ordinal, the arguments and
the result, or the exception's type and message. Normalised so that a trace depends on the
store's behaviour only:

- the ids a database hands out are numbered by first appearance, one series for schedules and
  one for executions (what matters is which rows are the same row, not the sequence's value);
- an instant within two days of the wall clock (the store's now: created_at, claimed_at, a
  lease's expiry, a manual run's key) is ``<now>``; the suite's own instants (year 2031) stay;
- a duration the store measured (a runtime nobody reported) is ``<measured>``;
- temporary paths and server addresses go, and a long list is its length and a digest;
- a claim's quarantined rows are recorded by name (rows due at the same instant come in the
  database's order, which PostgreSQL does not keep from one run to the next).

Tests whose trace depends on thread or process timing are not compared (``UNTRACED``).

``GOATBEAT_GOLDEN=record`` writes the traces of the tests that ran instead of comparing them
(merged into the files, so one test or one backend can be recorded again); a test that has no
golden entry yet is not compared.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

GOLDEN_DIR = Path(os.environ.get("GOATBEAT_GOLDEN_DIR") or Path(__file__).parent / "golden")
MODE_ENV = "GOATBEAT_GOLDEN"

# The public calls of the contract (goatbeat.core.store.ScheduleStore and ShardedStore).
METHODS = (
    "migrate", "close", "now", "publish", "edited_since_publish", "prune", "create", "update",
    "set_enabled", "pause", "resume", "backfill", "delete", "get", "list_schedules",
    "acquire_lease", "release_lease", "read_lease", "next_due_at", "claim_due", "pending",
    "next_retry_at", "record_outcomes", "refuse", "claim_manual_runs", "record_started",
    "record_completion", "record_finished", "request_run", "executions", "heartbeat",
    "remove_scheduler", "record_misses", "status", "schedule_health", "notify", "wait", "info",
    "read_leases", "live_schedulers",
)  # fmt: skip

UNTRACED: dict[str, str] = {
    "test_store_claims.py::test_two_threads_racing_claim_each_occurrence_exactly_once": (
        "which thread claims which occurrence is a race"
    ),
    "test_store_claims.py::test_two_processes_racing_claim_each_occurrence_exactly_once": (
        "which process claims which occurrence is a race"
    ),
    "test_store_control.py::test_a_jittered_occurrence_comes_back_through_pending_at_its_instant": (
        "its instants are taken around the store's clock, and their jitter with them"
    ),
    "test_store_control.py::test_jittered_occurrences_wait_in_the_store_for_their_instant": (
        "its instants are taken around the store's clock, and their jitter with them"
    ),
    "test_store_control.py::test_pause_withdraws_an_occurrence_waiting_for_its_jittered_instant": (
        "the schedule's name is picked for its jitter around the store's clock"
    ),
}

_LONG = 40  # a list longer than this is recorded as its length and digest
_NEAR = timedelta(days=2)
_ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
_VOLATILE = (
    (re.compile(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^\s'\"]+"), "<tmp>"),
    (re.compile(r"gb_[a-z_]+_\d+"), "<db>"),
    (re.compile(r"\b(?:127\.0\.0\.1|localhost):\d+"), "<host>"),
    (re.compile(r" at 0x[0-9a-f]+"), ""),
)

# Fields that hold a database id, by the class that holds them (None: any class, or an argument).
_ID_FIELDS: dict[tuple[str | None, str], str] = {
    ("Schedule", "id"): "s",
    ("DamagedSchedule", "id"): "s",
    ("Execution", "id"): "e",
    (None, "schedule_id"): "s",
    (None, "execution_id"): "e",
    (None, "execution_ids"): "e",
    (None, "exclude"): "e",
}
_RESULT_IDS = {"claim_manual_runs": "e"}

# Lists whose order is the database's where rows tie (due at the same instant): recorded in an
# order of their own, before their ids are numbered.
_UNORDERED: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("ClaimResult", "quarantined"): lambda d: (d.name, d.column),
}

# Fields added after the traces were recorded (#31: ordered publications and renames): left
# out while they hold their default, so the traces of tests that never use them stay as they
# were. A publication's generation and release always go: every code publication has one, and
# tests/conformance/test_store_publication_order.py asserts them.
_LATER_FIELDS: dict[tuple[str, str], Any] = {
    ("PublishResult", "renamed"): {},
    ("PublishResult", "retired"): [],
    ("PublishResult", "superseded"): False,
    ("PublishResult", "kept"): [],
    ("PublishResult", "reason"): "",
    ("PublishResult", "refused"): {},  # #30: past one-offs refused at publication
    ("SubmitOutcome", "idempotency_key"): None,  # outcomes matched by id and key (promotions)
}
_UNRECORDED_FIELDS = {("PublishResult", "generation"), ("PublishResult", "release")}


class Trace:
    """One test's calls, normalised as they are made."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.calls: list[str] = []
        self._ids: dict[str, dict[int, int]] = {"s": {}, "e": {}}
        self._stores: dict[int, int] = {}
        self._keep: list[object] = []  # stores stay alive, so their ids are never reused
        self._depth = threading.local()
        self._wall = datetime.now(UTC)

    # -- recording ----------------------------------------------------------------------------

    def wrap(self, method: str, function: Callable[..., Any]) -> Callable[..., Any]:
        trace = self

        def traced(store: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(trace._depth, "n", 0) or getattr(_paused, "on", False)
            if depth or threading.current_thread() is not trace.thread:
                return function(store, *args, **kwargs)
            trace._depth.n = 1
            try:
                result = function(store, *args, **kwargs)
            except BaseException as exc:
                trace._record(store, method, args, kwargs, {"raised": trace._raised(exc)})
                raise
            finally:
                trace._depth.n = 0
            trace._record(store, method, args, kwargs, {"returned": trace._result(method, result)})
            return result

        traced.__name__ = method
        traced.__wrapped__ = function  # type: ignore[attr-defined]
        return traced

    def _record(
        self, store: Any, method: str, args: Any, kwargs: Mapping[str, Any], outcome: Any
    ) -> None:
        if id(store) not in self._stores:
            self._stores[id(store)] = len(self._stores) + 1
            self._keep.append(store)
        call = {
            "store": self._stores[id(store)],
            "call": method,
            "args": [self.norm(a) for a in args],
            "kwargs": {k: self.norm(v, field=k) for k, v in sorted(kwargs.items())},
            **outcome,
        }
        self.calls.append(json.dumps(call, sort_keys=True, ensure_ascii=False))

    def _raised(self, exc: BaseException) -> list[str]:
        return [type(exc).__name__, self._text(str(exc))]

    def _result(self, method: str, result: Any) -> Any:
        if method == "info" and isinstance(result, Mapping):
            # The database's address and path are the test's, not the store's behaviour.
            return self.norm({k: v for k, v in result.items() if k != "database"})
        kind = _RESULT_IDS.get(method)
        if kind is not None and isinstance(result, list):
            return [self._id(kind, v) for v in result]
        return self.norm(result)

    # -- normalising --------------------------------------------------------------------------

    def _id(self, kind: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            return self.norm(value)
        series = self._ids[kind]
        if value not in series:
            series[value] = len(series) + 1
        return f"{kind}{series[value]}"

    def _text(self, text: str) -> str:
        for pattern, replacement in _VOLATILE:
            text = pattern.sub(replacement, text)
        return _ISO.sub(self._iso, text)

    def _iso(self, match: re.Match[str]) -> str:
        try:
            value = datetime.fromisoformat(match.group(0).replace("Z", "+00:00"))
        except ValueError:
            return match.group(0)
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return "<now>" if abs(value - self._wall) < _NEAR else match.group(0)

    def norm(self, value: Any, *, owner: str | None = None, field: str | None = None) -> Any:
        if field is not None:
            kind = _ID_FIELDS.get((owner, field)) or _ID_FIELDS.get((None, field))
            if kind is not None:
                if isinstance(value, (list, tuple, set, frozenset)):
                    return [self._id(kind, v) for v in value]
                return self._id(kind, value)
            if field == "runtime" and isinstance(value, float) and round(value, 3) != value:
                return "<measured>"
        if value is None or isinstance(value, (bool, int)):
            return value
        if isinstance(value, enum.Enum):
            return self.norm(value.value)
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, datetime):
            if value.tzinfo is None:
                return "naive " + value.isoformat()
            if abs(value - self._wall) < _NEAR:
                return "<now>"
            return value.astimezone(UTC).isoformat()
        if isinstance(value, timedelta):
            return f"{value.total_seconds()!r}s"
        to_spec = getattr(value, "to_spec", None)
        if callable(to_spec):  # a trigger: its spec is what a store keeps
            try:
                return {"trigger": self.norm(to_spec())}
            except Exception as exc:  # a test's broken trigger
                return {"trigger": self._raised(exc)}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            cls = type(value).__name__
            out: dict[str, Any] = {"type": cls}
            for f in dataclasses.fields(value):
                item = getattr(value, f.name)
                if (cls, f.name) in _UNRECORDED_FIELDS:
                    continue
                if (cls, f.name) in _LATER_FIELDS and item == _LATER_FIELDS[cls, f.name]:
                    continue
                if (cls, f.name) in _UNORDERED:
                    item = sorted(item, key=_UNORDERED[cls, f.name])
                out[f.name] = self.norm(item, owner=cls, field=f.name)
            return out
        if isinstance(value, Mapping):
            return {
                str(self.norm(k)): self.norm(v, field=k if isinstance(k, str) else None)
                for k, v in value.items()
            }
        if isinstance(value, (set, frozenset)):
            return sorted((self.norm(v) for v in value), key=repr)
        if isinstance(value, (list, tuple)):
            items = [self.norm(v) for v in value]
            if len(items) > _LONG:
                text = json.dumps(items, sort_keys=True, ensure_ascii=False)
                return {"items": len(items), "sha256": hashlib.sha256(text.encode()).hexdigest()}
            return items
        if isinstance(value, BaseException):
            return self._raised(value)
        return self._text(repr(value))


_paused = threading.local()


@contextmanager
def untraced() -> Iterator[None]:
    """Store calls made in the block are not recorded: what the suite's fixtures do once for a
    whole session (migrating the shared PostgreSQL database) belongs to no test's trace."""
    before = getattr(_paused, "on", False)
    _paused.on = True
    try:
        yield
    finally:
        _paused.on = before


def _store_classes() -> list[type]:
    from goatbeat.stores import MemoryStore, SQLiteStore

    classes: list[type] = [MemoryStore, SQLiteStore]
    try:
        from goatbeat.stores.postgres import PostgresStore
    except ImportError:  # no psycopg: the PostgreSQL backends are not collected either
        return classes
    return [*classes, PostgresStore]


@contextmanager
def tracing() -> Iterator[Trace]:
    """Every store class's public methods recorded into one Trace while the block runs."""
    trace = Trace(threading.current_thread())
    patched: list[tuple[type, str, Any]] = []
    try:
        for cls in _store_classes():
            for method in METHODS:
                function = getattr(cls, method, None)
                if function is None:
                    continue
                patched.append((cls, method, cls.__dict__.get(method)))
                setattr(cls, method, trace.wrap(method, function))
        yield trace
    finally:
        for cls, method, original in reversed(patched):
            if original is None:
                delattr(cls, method)
            else:
                setattr(cls, method, original)


def test_key(nodeid: str) -> tuple[str, str]:
    """``(backend, test id without the backend)`` of a conformance test's node id."""
    name = nodeid.split("tests/conformance/", 1)[-1]
    match = re.search(r"\[([^\]]*)\]$", name)
    if match is None:
        return "none", name
    params = match.group(1).split("-")
    backends = [p for p in params if p in ("memory", "sqlite", "postgres", "pgbouncer")]
    if not backends:
        return "none", name
    backend = backends[0]
    rest = [p for p in params if p != backend]
    base = name[: match.start()] + (f"[{'-'.join(rest)}]" if rest else "")
    return backend, base


_golden: dict[str, dict[str, list[str]]] = {}
_recorded: dict[str, dict[str, list[str]]] = {}


def recording() -> bool:
    return os.environ.get(MODE_ENV, "") == "record"


def golden(backend: str) -> dict[str, list[str]]:
    if backend not in _golden:
        path = GOLDEN_DIR / f"{backend}.json"
        _golden[backend] = json.loads(path.read_text("utf-8")) if path.exists() else {}
    return _golden[backend]


def finish(nodeid: str, trace: Trace) -> str | None:
    """Record or compare one test's trace; the difference, if any, as a message."""
    backend, test = test_key(nodeid)
    if test in UNTRACED or test.startswith("test_golden_traces.py"):
        return None
    if recording():
        _recorded.setdefault(backend, {})[test] = trace.calls
        return None
    expected = golden(backend).get(test)
    if expected is None or expected == trace.calls:
        return None
    for i, (want, got) in enumerate(zip(expected, trace.calls, strict=False)):
        if want != got:
            return (
                f"golden trace of {test} [{backend}] differs at call {i + 1}:\n"
                f"  golden: {want}\n  now:    {got}"
            )
    return (
        f"golden trace of {test} [{backend}] has {len(expected)} calls, now {len(trace.calls)}:"
        f"\n  first extra: {(expected + trace.calls)[min(len(expected), len(trace.calls))]}"
    )


def write_recorded() -> None:
    """At the end of a recording session: merge what was recorded into the golden files."""
    if not recording():
        return
    GOLDEN_DIR.mkdir(exist_ok=True)
    for backend, tests in _recorded.items():
        path = GOLDEN_DIR / f"{backend}.json"
        merged = json.loads(path.read_text("utf-8")) if path.exists() else {}
        merged.update(tests)
        path.write_text(
            json.dumps(dict(sorted(merged.items())), indent=1, ensure_ascii=False) + "\n", "utf-8"
        )
