"""What a JSON value a schedule holds may be (its args, kwargs and routing headers): the
rule, checked quickly for the plain values declarations give and thoroughly for the rest, and
the deep copy in JSON form a schedule keeps. Standard library only."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from goatbeat.core.errors import InvalidSchedule, short_repr

__all__ = [
    "MAX_JSON_DEPTH",
    "NOT_PLAIN",
    "check_json",
    "json_form",
    "json_problem",
    "plain_copy",
    "plain_json",
]

MAX_JSON_DEPTH = 100


def check_json(field_name: str, value: Any) -> None:
    """``value`` must survive a JSON round trip unchanged, since that is how it is stored and
    sent: finite numbers, strings, lists, and objects with string keys, nested at most
    MAX_JSON_DEPTH deep (tuples become lists, which backends already do)."""
    if plain_json(value, 0):
        return
    problem = json_problem(value)
    if problem is None:
        try:
            json.dumps(value, allow_nan=False, sort_keys=True)
        except (TypeError, ValueError, RecursionError) as exc:
            problem = str(exc)
    if problem is not None:
        raise InvalidSchedule(
            field_name, value, f"{short_repr(value)} is not JSON-serialisable: {problem}"
        )


def plain_json(value: Any, depth: int) -> bool:
    """The common case, checked quickly: only lists, dicts with string keys, strings, finite
    floats, ints of a sane size, booleans and None, of exactly those types (anything else
    goes through :func:`json_problem` and :func:`json.dumps`)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(value.bit_length() <= 10_000)
    if kind is float:
        return math.isfinite(value)
    if depth >= MAX_JSON_DEPTH:
        return False
    # Loops rather than all(...): this runs for every argument of every declaration.
    if kind is list:
        for item in value:
            if type(item) is str or (type(item) is int and item.bit_length() <= 10_000):
                continue
            if not plain_json(item, depth + 1):
                return False
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) is str or (type(item) is int and item.bit_length() <= 10_000):
                continue
            if not plain_json(item, depth + 1):
                return False
        return True
    return False


NOT_PLAIN: Any = object()
"""What :func:`plain_copy` returns for data that is not plain JSON."""


def plain_copy(value: Any, depth: int) -> Any:
    """:func:`json_form` of ``value`` when :func:`plain_json` accepts it (the same rule, in
    one walk: this runs for the arguments of every declaration), else :data:`NOT_PLAIN`."""
    kind = type(value)
    if kind is list:
        if depth >= MAX_JSON_DEPTH:
            return NOT_PLAIN
        out = []
        for item in value:
            if type(item) is str or (type(item) is int and item.bit_length() <= 10_000):
                out.append(item)
                continue
            item = plain_copy(item, depth + 1)
            if item is NOT_PLAIN:
                return NOT_PLAIN
            out.append(item)
        return out
    if kind is dict:
        if depth >= MAX_JSON_DEPTH:
            return NOT_PLAIN
        copy = {}
        for key, item in value.items():
            if type(key) is not str:
                return NOT_PLAIN
            if type(item) is str or (type(item) is int and item.bit_length() <= 10_000):
                copy[key] = item
                continue
            item = plain_copy(item, depth + 1)
            if item is NOT_PLAIN:
                return NOT_PLAIN
            copy[key] = item
        return copy
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if value.bit_length() <= 10_000 else NOT_PLAIN
    if kind is float:
        return value if math.isfinite(value) else NOT_PLAIN
    return NOT_PLAIN


def json_form(value: Any) -> Any:
    """A deep copy of checked JSON data with tuples as lists and mappings as dicts."""
    if isinstance(value, (list, tuple)):
        return [json_form(v) for v in value]
    if isinstance(value, Mapping):
        return {k: json_form(v) for k, v in value.items()}
    return value


def json_problem(value: Any) -> str | None:
    # Iterative, so a hostile nesting depth cannot exhaust the interpreter's stack.
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"nested deeper than {MAX_JSON_DEPTH} levels"
        if item is None or isinstance(item, (bool, str)):
            continue
        if isinstance(item, int):
            if item.bit_length() > 10_000:
                return f"an integer of {item.bit_length()} bits is too large"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{item!r} is not a finite number"
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, Mapping):
            for key, v in item.items():
                if not isinstance(key, str):
                    # JSON would silently turn 1 into "1": the task would get other kwargs.
                    return f"key {short_repr(key)} is not a string"
                stack.append((v, depth + 1))
        else:
            return f"{type(item).__name__} is not a JSON type"
    return None
