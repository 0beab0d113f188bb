"""The reporter process that writes a forking worker's completion reports
(goatbeat.completion.relay): reports written in the order sent, a sender whose reporter is
gone writes directly, and the reporter exits after writing what it holds once its parent dies.
A real reporter process on a SQLite file (the RQ worker around it:
tests/e2e/test_reporter_process.py)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goatbeat.completion.relay import Relay, RelayedReporter
from goatbeat.core.health import Outcome
from goatbeat.core.model import ExecutionStatus, Schedule
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores import open_store

pytestmark = pytest.mark.timeout(60)

GUARD = 30.0  # seconds: against a hang, not an expectation


def _database(path: Path, runs: int) -> tuple[str, list[str]]:
    url = f"sqlite:///{path}"
    store = open_store(url)
    try:
        store.migrate()
        store.publish([Schedule(name="job", task="tasks.job", trigger=IntervalTrigger("1h"))])
        keys = [store.request_run("job").idempotency_key for _ in range(runs)]
    finally:
        store.close()
    return url, keys


def _statuses(url: str) -> dict[str, ExecutionStatus]:
    store = open_store(url)
    try:
        return {e.idempotency_key: e.status for e in store.executions(name="job", limit=1000)}
    finally:
        store.close()


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_reporter_whose_parent_was_killed_writes_every_report_sent_in_order_then_exits(
    tmp_path: Path,
) -> None:
    """A parent sends started then succeeded for 40 runs, and SIGKILLs itself at once: the
    reporter writes all 80 reports in order (a started written after its run's success would
    leave it running) and exits."""
    url, keys = _database(tmp_path / "goatbeat.db", 40)
    parent = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, sys\n"
            "from goatbeat.completion.relay import Relay, RelayedReporter\n"
            "from goatbeat.core.health import Outcome\n"
            "reporter = RelayedReporter(sys.argv[1])\n"
            "reporter.relay = relay = Relay(sys.argv[1])\n"
            "print(relay.pid, flush=True)\n"
            "for key in sys.argv[2:]:\n"
            "    assert reporter.started(key)\n"
            "    assert reporter.finished(key, Outcome.SUCCEEDED, runtime=0.01)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n",
            url,
            *keys,
        ],
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    reporter_pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + GUARD
    while not _gone(reporter_pid):
        assert time.monotonic() < deadline, "the reporter outlived its parent"
        time.sleep(0.05)
    assert _statuses(url) == dict.fromkeys(keys, ExecutionStatus.SUCCEEDED)


def test_with_its_reporter_gone_a_sender_writes_directly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, [sent, direct] = _database(tmp_path / "goatbeat.db", 2)
    reporter = RelayedReporter(url)
    reporter.relay = relay = Relay(url)
    try:
        assert reporter.started(sent)  # through the reporter process
        deadline = time.monotonic() + GUARD
        while _statuses(url)[sent] is not ExecutionStatus.RUNNING:
            assert time.monotonic() < deadline, "the reporter wrote nothing"
            time.sleep(0.05)
        os.kill(relay.pid, signal.SIGKILL)
        relay.process.wait(GUARD)
        with caplog.at_level(logging.DEBUG, logger="goatbeat"):
            assert reporter.started(direct)
            assert reporter.finished(sent, Outcome.FAILED, error="ValueError: bad")
        # Written here, at once: nothing else is left to write them.
        assert _statuses(url) == {sent: ExecutionStatus.FAILED, direct: ExecutionStatus.RUNNING}
        events = [r.getMessage() for r in caplog.records]
        assert events == ["occurrence.relay_gone", "occurrence.started", "occurrence.finished"]
        assert relay.gone
    finally:
        reporter.close()
        relay.close()


def test_a_long_error_is_cut_to_one_atomic_write_keeping_its_start() -> None:
    """A report longer than PIPE_BUF could interleave with another process's: the error is
    cut (with a mark) so each report is one whole write."""
    from goatbeat.completion.relay import MAX_REPORT, _encode

    for error in ("RuntimeError: " + "x" * 100_000, "ValueError: " + "é\x01" * 20_000):
        data = _encode({"event": "finished", "key": "job:2026-03-01T12:00:00Z", "error": error})
        assert len(data) <= MAX_REPORT and data.endswith(b"\n")
        report = json.loads(data)
        assert report["error"].startswith(error[:200]) and report["error"].endswith(" …(cut)")
    short = {"event": "started", "key": "job:2026-03-01T12:00:00Z", "worker": "h:1"}
    assert json.loads(_encode(short)) == short


def test_an_rq_worker_parent_preloads_the_guard_and_its_statements_not_the_store_and_freezes(
    tmp_path: Path,
) -> None:
    # In a fresh interpreter (this one has imported everything): the worker's main process,
    # just before RQ forks its first work horse, starts the reporter. It imports the guard's
    # ledger (a guarded horse needs it) but not the store (a horse with a reporter never opens
    # it, and a bigger parent costs every fork), and freezes what it holds.
    url, _ = _database(tmp_path / "goatbeat.sqlite", runs=0)
    code = f"""
import gc, json, sys
import goatbeat.completion.rq as rq_completion
from goatbeat.stores.schema import queries as schema_queries
assert gc.get_freeze_count() == 0
rq_completion._start_relay({url!r})
frozen = gc.get_freeze_count()
print(json.dumps({{
    "guard": "goatbeat.idempotency.postgres" in sys.modules,
    "adapter": "goatbeat.idempotency.rq" in sys.modules,
    "statements": schema_queries.cache_info().currsize,
    "store": "goatbeat.stores.postgres" in sys.modules or "goatbeat.stores.store" in sys.modules,
    "frozen": frozen,
}}))
rq_completion._reporter({url!r}).relay.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=GUARD, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["guard"] is True
    # What a guarded horse would load or parse for each job: the RQ adapter its job module
    # imports, the ledger's statements (a cache each horse would fill again).
    assert seen["adapter"] is True
    assert seen["statements"] == 1
    assert seen["store"] is False
    assert seen["frozen"] > 0
