"""The allow-list (#13 item 4): which tasks a schedule stored outside code may name, and the
scheduler's refusal of a stored schedule naming any other (MemoryStore, FakeClock)."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from goatbeat.beat import Beat
from goatbeat.core.allowlist import TaskAllowList, parse_patterns
from goatbeat.core.clock import FakeClock
from goatbeat.core.config import parse_settings
from goatbeat.core.errors import ConfigError, InvalidValue, TaskNotAllowed
from goatbeat.core.model import ExecutionStatus, Occurrence, Schedule, Source
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Registry(AcceptingSubmitter):
    """A backend that registered some tasks, and counts the submissions it gets."""

    name: ClassVar[str] = "registry"

    def __init__(self, known: set[str] | None) -> None:
        self.known = known
        self.sent: list[str] = []
        self.asked = 0

    def known_tasks(self) -> set[str] | None:
        self.asked += 1
        return None if self.known is None else set(self.known)

    def submit(self, occurrence: Occurrence) -> str | None:
        self.sent.append(occurrence.task)
        return "id"


# -- the list itself ------------------------------------------------------------------------


def test_declared_registered_and_pattern_tasks_are_allowed_and_nothing_else() -> None:
    backend = Registry({"celery.registered"})
    allow = TaskAllowList(
        patterns=("reports.tasks.*", "mail.send_?"),
        declared=lambda: {"code.task"},
        registered=backend.known_tasks,
    )
    for task in ("code.task", "celery.registered", "reports.tasks.daily", "mail.send_1"):
        assert allow.allows(task), task
    for task in ("os.system", "shutil.rmtree", "reports.other", "mail.send_12", "REPORTS.tasks.x"):
        assert not allow.allows(task), task
    with pytest.raises(TaskNotAllowed) as caught:
        allow.check("os.system")
    assert caught.value.field == "task" and caught.value.value == "os.system"
    assert "'os.system' is not a known task" in str(caught.value)
    assert "allowed_tasks" in str(caught.value)


def test_a_task_registered_later_is_found_and_answers_are_cached() -> None:
    backend = Registry({"a"})
    allow = TaskAllowList(registered=backend.known_tasks)
    assert allow.allows("a") and not allow.allows("b")
    backend.known.add("b")  # type: ignore[union-attr]  # a module imported since
    assert allow.allows("b")
    asked = backend.asked
    assert allow.allows("a") and allow.allows("b")
    assert backend.asked == asked  # positive answers are kept


def test_an_empty_registry_says_so_in_the_refusal() -> None:
    allow = TaskAllowList(registered=Registry(None).known_tasks)
    with pytest.raises(TaskNotAllowed, match="reports no registered tasks"):
        allow.check("reports.daily")


@pytest.mark.parametrize(
    "value",
    ["reports.*", ["ok", ""], ["has space"], [1], ("x;y",), {"a": 1}],
)
def test_allowed_tasks_must_be_a_list_of_task_name_patterns(value: Any) -> None:
    with pytest.raises(InvalidValue) as caught:
        parse_patterns("allowed_tasks", value)
    assert caught.value.field == "allowed_tasks"
    with pytest.raises(ConfigError, match="allowed_tasks"):
        parse_settings({"allowed_tasks": value})


def test_allowed_tasks_is_a_setting() -> None:
    assert parse_settings({"allowed_tasks": ["reports.*", "a.b"]}).allowed_tasks == (
        "reports.*",
        "a.b",
    )
    assert parse_settings({}).allowed_tasks == ()


# -- Beat: the check entry points call -------------------------------------------------------


def tick() -> None:
    return None


def test_beat_allows_its_code_tasks_the_backends_and_the_setting() -> None:
    beat = Beat(
        "memory://",
        submitter=Registry({"registered.one"}),
        settings={"allowed_tasks": ["reports.*"]},
    )
    beat.schedule(name="code", task=tick, every="1h")
    beat.check_task(f"{__name__}.tick")
    beat.check_task("registered.one")
    beat.check_task("reports.weekly")
    with pytest.raises(TaskNotAllowed):
        beat.check_task("os.system")
    beat.configure(allowed_tasks=["os.*"])
    beat.check_task("os.system")  # the setting is read again after a change


# -- the scheduler refuses ---------------------------------------------------------------------


def hourly(name: str, task: str, **kw: Any) -> Schedule:
    return Schedule(name=name, task=task, trigger=IntervalTrigger("1h"), source=Source.ADMIN, **kw)


def test_the_scheduler_refuses_a_stored_schedule_outside_the_allow_list(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="goatbeat")
    clock = FakeClock(START)
    backend = Registry({"registered.task"})
    beat = Beat("memory://", submitter=backend, settings={"scheduler_id": "s1"}, clock=clock)
    store = beat.store
    store.create(hourly("evil", "os.system", args=["touch /tmp/pwned"]))
    store.create(hourly("fine", "registered.task"))
    scheduler = beat.scheduler()
    scheduler.run_once()
    clock.advance(timedelta(hours=1))
    store.request_run("evil")  # a manual run of it is refused too

    result = scheduler.run_once()
    again = [scheduler.run_once() for _ in range(3)]

    assert backend.sent == ["registered.task"]  # nothing of "evil" reached the backend
    assert result.refused_schedules == 1 and all(r.refused_schedules == 0 for r in again)
    evil = store.get("evil")
    assert (evil.last_status, evil.next_run_at, evil.enabled) == ("refused", None, True)
    rows = store.executions(name="evil")
    assert rows and all(e.status is ExecutionStatus.SUBMIT_FAILED for e in rows)
    assert all(e.error is not None and e.error.startswith("refused: ") for e in rows)
    logged = [r for r in caplog.records if r.getMessage() == "schedule.refused"]
    assert len(logged) == 1 and logged[0].levelno == logging.ERROR
    assert logged[0].goatbeat["schedule"] == "evil"  # type: ignore[attr-defined]

    # Allowed afterwards (the setting), then disabled and enabled: it runs again.
    beat.configure(allowed_tasks=["os.system"])
    scheduler = beat.scheduler()
    store.set_enabled("evil", False)
    store.set_enabled("evil", True)
    clock.advance(timedelta(hours=1))
    scheduler.run_once()
    assert "os.system" in backend.sent


def test_an_edit_that_fixes_the_task_wins_over_the_refusal() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock=clock)
    store.create(hourly("a", "os.system"))
    sid = store.get("a").id
    assert sid is not None
    store.update(hourly("a", "registered.task"))
    assert not store.refuse(sid, "os.system", reason="refused: x")
    assert store.get("a").last_status != "refused"


def test_an_older_replica_refuses_a_new_code_schedule_without_unscheduling_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A rolling upgrade: the new code declares "report" (a new task); an older replica, which
    # does not know it, leads for a while, then a new one.
    caplog.set_level(logging.INFO, logger="goatbeat")
    clock = FakeClock(START)
    new_backend, old_backend = Registry(None), Registry(None)
    new = Beat("memory://", submitter=new_backend, settings={"scheduler_id": "new"}, clock=clock)
    new.schedule(name="report", task="reports.new_task", every="1h")
    new.publish()
    old = Beat("memory://", submitter=old_backend, settings={"scheduler_id": "old"}, clock=clock)
    old._store = new.store  # noqa: SLF001 - one database, two processes
    old_loop = old.scheduler(lease_ttl="5s", lease_renew_interval="1s")
    for _ in range(3):
        clock.advance(timedelta(hours=1))
        old_loop.run_once()
    assert old_backend.sent == []
    row = new.store.get("report")
    assert row.last_status == "refused" and row.next_run_at is not None
    assert [r.getMessage() for r in caplog.records].count("schedule.refused") == 1
    old_loop.release()
    clock.advance(timedelta(hours=1))
    new.scheduler().run_once()
    assert new_backend.sent == ["reports.new_task"]


# -- #32: a pattern allows what a module defines, never what it imports ----------------------

WALK = "tests.bartasks"  # its __init__ does `import os`, `from subprocess import run`, ...

REFUSED = {
    "os.system": "resolves to posix.system",  # an imported module's function
    "system": "resolves to posix.system",  # from os import system
    "run": "resolves to subprocess.run",  # from subprocess import run
    "subprocess.run": "resolves to subprocess.run",
    "os.path.join": "resolves to posixpath.join",  # nested attributes
    "jobs.shutil.rmtree": "resolves to shutil.rmtree",  # through a submodule's import
    "Report.shell": "resolves to posix.system",  # a class attribute set to an import
    "evaluate": "resolves to builtins.eval",  # eval under a name of the module
    "popen": "resolves to subprocess.Popen",  # an imported class
    "subprocess.Popen": "resolves to subprocess.Popen",
    "send_report": "resolves to tests.bartasks.jobs.send_report",  # a re-export
    "partial_touch": "a partial object has no __qualname__",
    "partial_shell": "a partial object has no __qualname__",
    "caller": "a Caller object has no __qualname__",  # an object with __call__
    "caller.__call__": "a method bound to an object",
    "report.build": "a method bound to an object",
    "append": "builtin_function_or_method 'list.append' has no __module__",
    "shell_lambda": "is defined where no dotted path can name it",
    "__builtins__": "a dict object has no __qualname__|is not callable",  # RQ | inline
    "nope": "module 'tests.bartasks' has no attribute 'nope'",
    "broken.anything": "importing it to see what it names failed: RuntimeError",
}
ALLOWED = [
    "touch",  # a function defined there
    "Report",  # a class defined there
    "Report.static",
    "Report.make",  # a class method: bound to its class, found at its name
    "Report.Inner.deep",
    "jobs.send_report",  # the re-exported function, named where it is defined
]


def _path_beat(submitter: object) -> Beat:
    return Beat("memory://", submitter=submitter, settings={"allowed_tasks": [f"{WALK}.*"]})


def _path_submitters() -> list[object]:
    from goatbeat.submitters.inline import InlineSubmitter
    from goatbeat.submitters.rq import RQSubmitter

    # RQ connects on the first enqueue only: no Redis is needed to check names.
    return [InlineSubmitter(), RQSubmitter("redis://127.0.0.1:1/0")]


@pytest.mark.parametrize("submitter", _path_submitters(), ids=lambda s: s.name)  # type: ignore[attr-defined]
@pytest.mark.parametrize("attr", sorted(REFUSED))
def test_a_pattern_cannot_be_walked_past_to_what_the_module_imported(
    submitter: object, attr: str
) -> None:
    beat = _path_beat(submitter)
    task = f"{WALK}.{attr}"
    with pytest.raises(TaskNotAllowed) as caught:
        beat.check_task(task)
    assert caught.value.field == "task" and caught.value.value == task
    message = str(caught.value)
    assert f"{task!r} matches allowed_tasks, but " in message
    assert re.search(REFUSED[attr], message), message
    assert "named where they are defined" in message
    assert not beat.task_allow_list().allows(task)


@pytest.mark.parametrize("submitter", _path_submitters(), ids=lambda s: s.name)  # type: ignore[attr-defined]
@pytest.mark.parametrize("attr", ALLOWED)
def test_a_pattern_allows_what_the_module_defines(submitter: object, attr: str) -> None:
    beat = _path_beat(submitter)
    beat.check_task(f"{WALK}.{attr}")


def test_the_colon_form_of_a_definition_is_allowed_and_a_walk_in_it_is_not() -> None:
    from goatbeat.submitters.inline import InlineSubmitter

    beat = Beat("memory://", submitter=InlineSubmitter(), settings={"allowed_tasks": [f"{WALK}:*"]})
    beat.check_task(f"{WALK}:touch")
    beat.check_task(f"{WALK}:Report.static")
    with pytest.raises(TaskNotAllowed, match="resolves to posix.system"):
        beat.check_task(f"{WALK}:os.system")


def test_a_plain_name_in_allowed_tasks_is_checked_on_what_it_resolves_to() -> None:
    from goatbeat.submitters.inline import InlineSubmitter

    beat = Beat(
        "memory://",
        submitter=InlineSubmitter(),
        settings={"allowed_tasks": [f"{WALK}.run", f"{WALK}.touch"]},
    )
    beat.check_task(f"{WALK}.touch")
    with pytest.raises(TaskNotAllowed, match="resolves to subprocess.run"):
        beat.check_task(f"{WALK}.run")


def test_names_outside_every_pattern_are_never_imported() -> None:
    import sys

    from goatbeat.submitters.inline import InlineSubmitter

    sys.modules.pop("tests.bartasks_unimported", None)
    beat = _path_beat(InlineSubmitter())
    with pytest.raises(TaskNotAllowed, match="is not a known task"):
        beat.check_task("tests.bartasks_unimported.anything")
    assert "tests.bartasks_unimported" not in sys.modules


def test_a_backend_that_finds_tasks_by_registered_name_checks_the_name_and_imports_nothing() -> (
    None
):
    # Celery's and Dramatiq's workers run only a task registered under exactly that name: a
    # name matching a pattern is sent as it is, and nothing is imported to decide.
    import sys

    sys.modules.pop("tests.never_imported", None)
    backend = Registry(None)
    beat = Beat("memory://", submitter=backend, settings={"allowed_tasks": ["tests.never_*"]})
    beat.check_task("tests.never_imported.os.system")
    assert "tests.never_imported" not in sys.modules


def test_the_scheduler_refuses_a_walked_row_and_never_runs_it(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The #32 report: with "tests.bartasks.*" allowed, a row naming tests.bartasks.os.system
    # (written by the admin, an API client, a restore or SQL) ran os.system inline.
    from goatbeat.submitters.inline import InlineSubmitter

    caplog.set_level(logging.INFO, logger="goatbeat")
    clock = FakeClock(START)
    beat = Beat(
        "memory://",
        submitter=InlineSubmitter(),
        settings={"allowed_tasks": [f"{WALK}.*"], "scheduler_id": "s1"},
        clock=clock,
    )
    pwned, fine = tmp_path / "pwned", tmp_path / "fine"
    store = beat.store
    store.create(hourly("evil", f"{WALK}.os.system", args=[f"touch {pwned}"]))
    store.create(hourly("evil-class", f"{WALK}.popen", args=[["touch", str(pwned)]]))
    store.create(hourly("evil-partial", f"{WALK}.partial_shell", args=[f"touch {pwned}"]))
    store.create(hourly("fine", f"{WALK}.touch", args=[str(fine)]))
    scheduler = beat.scheduler()
    clock.advance(timedelta(hours=1))
    result = scheduler.run_once()
    beat.close()

    assert fine.exists() and not pwned.exists()
    assert result.refused_schedules == 3
    for name in ("evil", "evil-class", "evil-partial"):
        row = store.get(name)
        assert (row.last_status, row.next_run_at) == ("refused", None), name
        (run,) = store.executions(name=name)
        assert run.status is ExecutionStatus.SUBMIT_FAILED and run.error is not None
        assert "matches allowed_tasks, but" in run.error, run.error
    refused = {
        r.goatbeat["schedule"]: r.goatbeat["error"]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "schedule.refused"
    }
    assert set(refused) == {"evil", "evil-class", "evil-partial"}
    assert "resolves to posix.system" in refused["evil"]
