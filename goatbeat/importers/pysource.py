"""Read back the ``beat_schedule`` source ``goatbeat export`` writes, without executing it.

The export checks each entry by reading its generated code back as celery would. Running that
code (``exec``) is what goatbeat never does (tests/unit/test_no_eval_pickle.py): instead the
source is parsed and only the few forms the export writes are evaluated: literals (numbers,
strings, ``True``/``False``/``None``, dicts, lists, tuples, a sign), and calls of celery's
``crontab``/``schedule``/``solar`` and of ``datetime``/``decimal``/``uuid`` constructors, by
their dotted names. Anything else is an error naming it: the export then refuses the entry.
"""

from __future__ import annotations

import ast
import datetime
import decimal
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["read_beat_schedule_source", "UnreadableSource"]


class UnreadableSource(ValueError):
    """The source holds something other than what the export writes."""


def _celery(name: str) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        from celery import schedules

        return getattr(schedules, name)(*args, **kwargs)

    return make


_CALLS: dict[str, Callable[..., Any]] = {
    "crontab": _celery("crontab"),
    "schedule": _celery("schedule"),
    "solar": _celery("solar"),
    "datetime.datetime.fromisoformat": datetime.datetime.fromisoformat,
    "datetime.date.fromisoformat": datetime.date.fromisoformat,
    "datetime.time.fromisoformat": datetime.time.fromisoformat,
    "datetime.timedelta": datetime.timedelta,
    "decimal.Decimal": decimal.Decimal,
    "uuid.UUID": uuid.UUID,
}
_IMPORTS = {"datetime", "decimal", "uuid"}
_CELERY_NAMES = {"crontab", "schedule", "solar"}


def read_beat_schedule_source(source: str) -> dict[str, Any]:
    """The ``beat_schedule`` dict of ``source`` (imports, then ``beat_schedule = {...}``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise UnreadableSource(f"not Python: {exc.msg} (line {exc.lineno})") from None
    found: Any = None
    for node in tree.body:
        if isinstance(node, ast.Import) and all(a.name in _IMPORTS for a in node.names):
            continue
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "celery.schedules"
            and all(a.name in _CELERY_NAMES for a in node.names)
        ):
            continue
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "beat_schedule"
        ):
            found = _value(node.value)
            continue
        raise UnreadableSource(f"unexpected statement at line {node.lineno}")
    if not isinstance(found, dict):
        raise UnreadableSource("no beat_schedule = {...}")
    return found


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise UnreadableSource(f"unexpected {type(node).__name__} in a call")


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise UnreadableSource("a ** in a dict")
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.List):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            raise UnreadableSource("a sign before something not a number")
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        call = _CALLS.get(name)
        if call is None:
            raise UnreadableSource(f"a call of {name}")
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            raise UnreadableSource(f"* or ** in a call of {name}")
        args = [_value(a) for a in node.args]
        kwargs = {str(k.arg): _value(k.value) for k in node.keywords}
        return call(*args, **kwargs)
    raise UnreadableSource(f"unexpected {type(node).__name__}")
