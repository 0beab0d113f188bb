"""Which tasks a schedule stored outside code may name: the allow-list.

A schedule declared in code (``schedules.py``, ``Beat.schedule``) is trusted: the code already
imports its task. A schedule created in the admin, through the API, by an importer, or written
into the table by anybody with SQL access may name only a *known* task:

1. a task of a schedule declared in code, in this process;
2. a task the backends registered (:meth:`TaskAllowList.registered`, from the submitter's
   ``known_tasks()``: Celery's ``app.tasks``, the Dramatiq broker's actors, Django ``Task``
   objects of the installed apps), found without importing anything the name points at;
3. a name matching one of the ``allowed_tasks`` glob patterns (``"reports.tasks.*"``,
   ``fnmatch`` syntax, case-sensitive).

Everything else is refused: validation (admin forms, the API, importers) raises
:class:`~goatbeat.core.errors.TaskNotAllowed` naming the field ``task`` and the name, and the
scheduler takes a stored schedule naming such a task out of scheduling before anything is
submitted (``last_status='refused'``, logged ``schedule.refused``). With a backend that keeps no
registry (RQ, the inline submitter), admin and imported schedules need ``allowed_tasks``.

:func:`parse_patterns` validates the setting; :class:`TaskAllowList` answers the question, and
its :meth:`~TaskAllowList.check` is the one function every entry point calls.
"""

from __future__ import annotations

import fnmatch
import re
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any

from goatbeat.core.errors import InvalidValue, TaskNotAllowed, short_repr

__all__ = ["TaskAllowList", "parse_patterns", "MAX_PATTERNS"]

MAX_PATTERNS = 1000
_PATTERN = re.compile(r"[A-Za-z0-9_.:*?\[\]!-]{1,255}")


def parse_patterns(key: str, value: Any) -> tuple[str, ...]:
    """``value`` (a list or tuple of glob patterns) as a tuple; InvalidValue naming ``key``.

    A pattern is what a task name may contain (letters, digits, ``_ . : -``) plus the glob
    characters ``* ? [ ] !``; a bare string is refused (it would be read letter by letter)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InvalidValue(key, value, f"{short_repr(value)} must be a list of task-name patterns")
    if len(value) > MAX_PATTERNS:
        raise InvalidValue(key, value, f"more than {MAX_PATTERNS} patterns")
    for pattern in value:
        if not isinstance(pattern, str) or not _PATTERN.fullmatch(pattern):
            raise InvalidValue(
                key,
                value,
                f"{short_repr(pattern)} is not a task-name pattern such as 'reports.tasks.*'",
            )
    return tuple(value)


class TaskAllowList:
    """The known tasks of one app: ``declared`` (names of code schedules, read at each call),
    ``patterns`` (the ``allowed_tasks`` setting) and ``registered`` (a callable answering the
    names the backends know, None when they keep no registry; called lazily, again when a
    name is not found, since registries grow as modules are imported). Thread-safe."""

    def __init__(
        self,
        *,
        patterns: Iterable[str] = (),
        declared: Callable[[], Collection[str]] = frozenset,
        registered: Callable[[], Collection[str] | None] | None = None,
    ) -> None:
        self.patterns = tuple(patterns)
        self._declared = declared
        self._registered = registered
        self._known: frozenset[str] | None = None
        self._allowed: set[str] = set()  # positive answers only: an allowed name stays allowed
        self._lock = threading.Lock()

    def allows(self, task: str) -> bool:
        """Whether a stored schedule may name ``task``."""
        if task in self._allowed:
            return True
        found = task in self._declared() or any(fnmatch.fnmatchcase(task, p) for p in self.patterns)
        if not found:
            with self._lock:
                loaded = self._known is not None
            found = task in self.registered()
            if not found and loaded:
                # Read long ago: the backend may have registered it since.
                found = task in self.registered(refresh=True)
        if found:
            with self._lock:
                self._allowed.add(task)
        return found

    def registered(self, *, refresh: bool = False) -> frozenset[str]:
        """The task names the backends registered (read once, or again with ``refresh``)."""
        with self._lock:
            known = self._known
        if known is not None and not refresh:
            return known
        names = self._registered() if self._registered is not None else None
        known = frozenset(names or ())
        with self._lock:
            self._known = known
        return known

    def check(self, task: str, *, field: str = "task") -> None:
        """Raise :class:`TaskNotAllowed` naming ``field`` unless ``task`` is allowed."""
        if not self.allows(task):
            raise TaskNotAllowed(field, task, self.reason(task))

    def reason(self, task: str) -> str:
        """Why ``task`` is refused, for messages and logs."""
        where = "declared in code or registered with the task backend"
        if self._registered is not None and not self.registered():
            where = "declared in code (the task backend reports no registered tasks)"
        allowed = (
            f"nor matches allowed_tasks ({', '.join(map(repr, self.patterns))})"
            if self.patterns
            else "and no allowed_tasks pattern is set"
        )
        return (
            f"{short_repr(task)} is not a known task: it is not {where}, {allowed}; add it "
            "(or a pattern such as 'package.tasks.*') to the allowed_tasks setting"
        )
