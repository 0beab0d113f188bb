"""Arguments of store calls checked before anything is read or written, and the named query
an executions listing runs."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from goatbeat.core.errors import InvalidValue
from goatbeat.core.model import ExecutionStatus


def executions_query(
    name: str | None, status: ExecutionStatus | None, limit: int
) -> tuple[str, dict[str, Any]]:
    """The named query (``executions[_by_name][_status]``) and parameters the SQL stores run
    for :meth:`ScheduleStore.executions`."""
    check_positive("limit", limit)
    params: dict[str, Any] = {"limit": limit}
    query = "executions"
    if name is not None:
        params["name"] = name
        query = "executions_by_name"
    if status is not None:
        params["status"] = ExecutionStatus(status).value
        query = "executions_by_name_status" if name is not None else "executions_by_status"
    return query, params


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
