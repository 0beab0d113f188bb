"""Which tasks a schedule stored outside code may name: the allow-list.

A schedule declared in code (``schedules.py``, ``Beat.schedule``) is trusted: the code already
imports its task. A schedule created in the admin, through the API, by an importer, or written
into the table by anybody with SQL access may name only a *known* task:

1. a task of a schedule declared in code, in this process;
2. a task the backends registered (:meth:`TaskAllowList.registered`, from the submitter's
   ``known_tasks()``: Celery's ``app.tasks``, the Dramatiq broker's actors, Django ``Task``
   objects of the installed apps), found without importing anything the name points at;
3. a name matching one of the ``allowed_tasks`` glob patterns (``"reports.tasks.*"``,
   ``fnmatch`` syntax, case-sensitive) that is also *where its callable is defined*, when the
   backend finds a task by importing its dotted path (below).

A pattern matches a string, while a backend that imports a dotted path (the inline submitter,
RQ's worker, Django Tasks) walks attributes through whatever the module imported: with
``"reports.*"`` and ``import os`` in ``reports``, ``reports.os.system`` is ``os.system``. So for
those backends (their submitter's ``task_definition``, :func:`~goatbeat.core.submit.task_definition`)
a name a pattern matches is resolved, and allowed only when the callable it resolves to is
defined there: its own ``__module__`` and ``__qualname__`` (:func:`defined_at`) spell the name
(``"reports.daily"`` or ``"reports:daily"``). A pattern therefore allows the functions, classes
and their static and class methods *defined* in the modules it matches, named where they are
defined, and never what those modules import (``os.system``, ``subprocess.run``, ``eval``), a
re-export (named by its own module instead), a ``functools.partial``, an object with
``__call__``, a method bound to an instance, or a builtin with no ``__module__``. Only names
that match a pattern are imported to decide. A backend that finds a task by its *registered*
name (Celery's ``app.tasks``, Dramatiq's actors) has nothing to walk: its worker runs only a
task registered under exactly that name, so the name is what is checked.

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
import inspect
import re
import sys
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any

from goatbeat.core.errors import InvalidValue, TaskNotAllowed, short_repr

__all__ = ["TaskAllowList", "defined_at", "parse_patterns", "MAX_PATTERNS"]

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


_MISSING = object()


def defined_at(obj: object) -> str:
    """Where ``obj`` is defined, as a dotted name (``"reports.tasks.daily"``,
    ``"reports.tasks.Report.build"``): its own ``__module__`` and ``__qualname__``, once they
    are checked to lead back to ``obj`` in the loaded module (so a copied ``__qualname__`` or
    a stale ``__module__`` cannot name a definition that is something else). Raises
    ``LookupError`` saying why ``obj`` has no such name: an object without them (an instance
    with ``__call__``, a ``functools.partial``), a builtin with no ``__module__``, a function
    defined inside another, a method bound to an instance. Imports nothing."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    what = type(obj).__name__
    if not isinstance(qualname, str) or not qualname:
        raise LookupError(f"a {what} object has no __qualname__ saying where it is defined")
    if not isinstance(module, str) or not module:
        raise LookupError(f"{what} {qualname!r} has no __module__ saying where it is defined")
    if "<" in qualname:  # "<lambda>", "outer.<locals>.inner": nothing can be named there
        raise LookupError(f"{module}.{qualname} is defined where no dotted path can name it")
    found: Any = sys.modules.get(module, _MISSING)
    for attr in qualname.split("."):
        if found is _MISSING:
            break
        found = getattr(found, attr, _MISSING)
    # A bound method is made anew at each attribute access: equal, never identical. Only a
    # class method compares equal (bound to its class); an instance's is found unbound.
    same = found is obj or (inspect.ismethod(obj) and inspect.ismethod(found) and found == obj)
    if not same:
        if inspect.ismethod(obj):
            raise LookupError(
                f"it is a method bound to an object, not the function {module}.{qualname}"
            )
        raise LookupError(f"{module}.{qualname}, where it says it is defined, holds another object")
    return f"{module}.{qualname}"


def _spells(task: str, definition: str) -> bool:
    """Whether ``task`` is ``definition`` ("pkg.mod.func"), or it with the module separated by
    a colon ("pkg.mod:func", the inline and Django submitters' other form)."""
    return task == definition or (task.count(":") == 1 and task.replace(":", ".") == definition)


class TaskAllowList:
    """The known tasks of one app: ``declared`` (names of code schedules, read at each call),
    ``patterns`` (the ``allowed_tasks`` setting), ``registered`` (a callable answering the
    names the backends know, None when they keep no registry; called lazily, again when a
    name is not found, since registries grow as modules are imported) and ``definition`` (for
    a backend that imports dotted paths: where the callable a name resolves to is defined, or
    ``LookupError``; see the module's docstring). Thread-safe."""

    def __init__(
        self,
        *,
        patterns: Iterable[str] = (),
        declared: Callable[[], Collection[str]] = frozenset,
        registered: Callable[[], Collection[str] | None] | None = None,
        definition: Callable[[str], str] | None = None,
    ) -> None:
        self.patterns = tuple(patterns)
        self._declared = declared
        self._registered = registered
        self._definition = definition
        self._known: frozenset[str] | None = None
        self._allowed: set[str] = set()  # positive answers only: an allowed name stays allowed
        self._lock = threading.Lock()

    def allows(self, task: str) -> bool:
        """Whether a stored schedule may name ``task``."""
        if task in self._allowed:
            return True
        found = task in self._declared() or self._pattern_refusal(task) is None
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

    def _pattern_refusal(self, task: str) -> str | None:
        """None when a pattern allows ``task``; else why not ("" when none matches it)."""
        if not any(fnmatch.fnmatchcase(task, p) for p in self.patterns):
            return ""
        if self._definition is None:
            return None
        try:
            definition = self._definition(task)
        except LookupError as exc:
            problem = str(exc)
        except Exception as exc:  # an import that fails: refused, and the loop goes on
            problem = f"importing it to see what it names failed: {type(exc).__name__}: {exc}"
        else:
            if _spells(task, definition):
                return None
            problem = f"it resolves to {definition}, defined elsewhere"
        return (
            f"{short_repr(task)} matches allowed_tasks, but {problem}; a pattern allows only "
            "the functions and classes defined in the modules it matches, named where they "
            "are defined, never what those modules import"
        )

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
        walked = self._pattern_refusal(task)
        if walked:
            return walked
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
