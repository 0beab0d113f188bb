"""Arguments of store calls, checked before anything is read or written."""

from __future__ import annotations

from collections.abc import Collection

from goatbeat.core.errors import InvalidValue


def check_positive(field_name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidValue(field_name, value, f"{value!r} must be a positive integer")
    return value


def check_execution_ids(field_name: str, values: Collection[int]) -> list[int]:
    """``values`` as a list of execution ids; InvalidValue naming the first that is not one."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Collection):
        raise InvalidValue(field_name, values, f"{values!r} is not a collection of ids")
    ids = list(values)
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidValue(field_name, value, f"{value!r} is not an execution id")
    return ids
