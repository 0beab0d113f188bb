"""The golden traces (tests/conformance/golden.py): each conformance test's store calls and
results are compared with the ones recorded before the stores were rebuilt (issue #28)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from goatbeat.core.model import Execution, ExecutionKind, ExecutionStatus
from tests.conformance import golden
from tests.conformance.helpers import T0


class _Store:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def executions(self, *, limit: int = 50) -> Any:
        return self.answer

    def get(self, name: str) -> Any:
        return self.executions(limit=1)  # an inner call: the store's business


def _execution(id: int, *, at: datetime = T0, status: str = "claimed") -> Execution:
    return Execution(
        id=id,
        schedule_id=id * 10,
        schedule_name="a",
        scheduled_at=at,
        idempotency_key="a:2031-03-01T12:00:00Z",
        kind=ExecutionKind.SCHEDULED,
        status=ExecutionStatus(status),
        fencing_token=1,
        scheduler_id="s1",
        claimed_at=datetime.now(UTC),
        submitted_at=None,
        finished_at=None,
        attempts=0,
        backend_task_id=None,
        error=None,
    )


def _trace(answer: Any, *calls: str) -> golden.Trace:
    import threading

    trace = golden.Trace(threading.current_thread())
    store = _Store(answer)
    for name in ("executions", "get"):
        setattr(store, name, trace.wrap(name, getattr(_Store, name)).__get__(store))
    for call in calls:
        getattr(store, call)(**({"limit": 5} if call == "executions" else {"name": "a"}))
    return trace


def test_ids_are_numbered_by_first_appearance_and_the_store_clock_is_now() -> None:
    trace = _trace([_execution(7), _execution(3)], "executions")
    (call,) = [json.loads(c) for c in trace.calls]
    first, second = call["returned"]
    assert (first["id"], first["schedule_id"], second["id"]) == ("e1", "s1", "e2")
    assert first["claimed_at"] == "<now>" and first["scheduled_at"] == T0.isoformat()


def test_only_the_outermost_call_is_recorded() -> None:
    trace = _trace([], "get")
    assert [json.loads(c)["call"] for c in trace.calls] == ["get"]


def test_a_trace_that_differs_from_its_golden_entry_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodeid = "tests/conformance/test_x.py::test_y[sqlite]"
    before = _trace([_execution(1)], "executions").calls
    monkeypatch.setitem(golden._golden, "sqlite", {"test_x.py::test_y": before})
    monkeypatch.delenv(golden.MODE_ENV, raising=False)
    assert golden.finish(nodeid, _trace([_execution(5)], "executions")) is None  # ids renumbered
    changed = golden.finish(nodeid, _trace([_execution(1, status="submitted")], "executions"))
    assert changed is not None and "differs at call 1" in changed and "submitted" in changed
    later = T0 + timedelta(hours=1)
    assert golden.finish(nodeid, _trace([_execution(1, at=later)], "executions")) is not None
    assert "has 1 calls, now 2" in str(
        golden.finish(nodeid, _trace([_execution(1)], "executions", "executions"))
    )


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres", "pgbouncer"])
def test_every_backend_has_its_golden_traces(backend: str) -> None:
    traces = json.loads((golden.GOLDEN_DIR / f"{backend}.json").read_text("utf-8"))
    assert len(traces) > 150
    assert not set(traces) & set(golden.UNTRACED)
