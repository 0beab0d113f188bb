"""A tasks module as the allow-list meets it (#32): the tasks it defines, and the attributes
it has because of what it imports, which an ``allowed_tasks = ["tests.bartasks.*"]`` pattern
must never let a stored schedule reach (``tests.bartasks.os.system``).

Every task defined here touches the file its first argument names, so a test can tell what
ran from outside the process that ran it (an RQ worker's)."""

from __future__ import annotations

import functools
import os
import subprocess
from os import system  # noqa: F401 - an imported C builtin, reachable as tests.bartasks.system
from pathlib import Path
from subprocess import run  # noqa: F401 - an imported function

from tests.bartasks.jobs import send_report  # noqa: F401 - a re-export of the package's own


def touch(path: str) -> None:
    """A task defined here: the one a pattern allows."""
    Path(path).touch()


class Report:
    """A class defined here, with methods of every kind and an attribute set to an import."""

    shell = os.system  # tests.bartasks.Report.shell is os.system

    def __init__(self, path: str = "") -> None:
        if path:
            touch(path)

    def build(self, path: str) -> None:
        touch(path)

    @staticmethod
    def static(path: str) -> None:
        touch(path)

    @classmethod
    def make(cls, path: str) -> None:
        touch(path)

    class Inner:
        @staticmethod
        def deep(path: str) -> None:
            touch(path)


class Caller:
    def __call__(self, path: str) -> None:
        touch(path)


caller = Caller()  # an object with __call__
report = Report()  # tests.bartasks.report.build is a method bound to it
partial_touch = functools.partial(touch)  # a partial of a task defined here
partial_shell = functools.partial(os.system)  # a partial of an import
appender: list[str] = []
append = appender.append  # a builtin method: its __module__ is None
evaluate = eval  # builtins.eval under a name of this module
shell_lambda = lambda command: os.system(command)  # noqa: E731 - a lambda
popen = subprocess.Popen  # an imported class
