"""kombu's JSON dialect, read and written without kombu.

Celery (with the default ``json`` serializer) and django-celery-beat's ``args`` / ``kwargs`` /
``headers`` columns use kombu's JSON: plain JSON plus *type markers*, objects of exactly two keys
``{"__type__": T, "__value__": V}`` for values JSON lacks:

=========== ====================================== ==============================
``T``       ``V``                                  Python value
=========== ====================================== ==============================
datetime    ``datetime.isoformat()``               ``datetime.fromisoformat(V)``
date        ``date.isoformat()``                   ``datetime.fromisoformat(V).date()``
time        ``time.isoformat()``                   ``time.fromisoformat(V)``
decimal     ``str(Decimal)``                       ``Decimal(V)``
uuid        ``{"hex": uuid.hex}``                  ``UUID(**V)``
bytes       the bytes decoded as UTF-8             ``V.encode()``
base64      base64 of non-UTF-8 bytes              ``b64decode(V)``
=========== ====================================== ==============================

goatbeat stores arguments as JSON, so it keeps the markers (:func:`encode`): a Celery worker
decodes them back into the same Python values, exactly as if celery beat had sent them.
:func:`loads` / :func:`decode` turn markers into Python values (to validate them, and to
compare arguments in ``goatbeat diff``).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Mapping
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any

from goatbeat.core.errors import InvalidSchedule

__all__ = ["KombuJSONError", "decode", "encode", "loads"]


class KombuJSONError(InvalidSchedule):
    """Text that is not valid kombu JSON, or a value kombu's JSON cannot carry."""


def _marker(kind: str, value: Any) -> dict[str, Any]:
    return {"__type__": kind, "__value__": value}


def _decode_marker(kind: object, value: Any) -> Any:
    if kind == "datetime":
        return datetime.fromisoformat(value)
    if kind == "date":
        return datetime.fromisoformat(value).date()
    if kind == "time":
        return time.fromisoformat(value)
    if kind == "decimal":
        return Decimal(value)
    if kind == "uuid":
        if not isinstance(value, Mapping):
            raise TypeError(f"uuid value {value!r} is not an object")
        return uuid.UUID(**value)
    if kind == "bytes":
        return value.encode("utf-8")
    if kind == "base64":
        return base64.b64decode(value.encode("utf-8"), validate=True)
    raise ValueError(f"unknown kombu type marker {kind!r}")


def _hook(field: str) -> Any:
    def hook(obj: dict[str, Any]) -> Any:
        if obj.keys() == {"__type__", "__value__"}:
            try:
                return _decode_marker(obj["__type__"], obj["__value__"])
            except (ValueError, TypeError, AttributeError, InvalidOperation, binascii.Error) as exc:
                raise KombuJSONError(field, obj, f"bad kombu value {obj!r}: {exc}") from None
        return obj

    return hook


def loads(text: str | bytes | None, *, field: str, default: Any = None) -> Any:
    """Parse kombu JSON text into Python values (markers decoded).

    Empty or ``None`` text gives ``default``. Raises :class:`KombuJSONError` naming ``field``."""
    if text is None or (isinstance(text, (str, bytes)) and not text.strip()):
        return default
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        return json.loads(text, object_hook=_hook(field))
    except KombuJSONError:
        raise
    except (ValueError, RecursionError) as exc:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise KombuJSONError(field, text, f"{shown!r} is not valid JSON: {exc}") from None


def decode(value: Any, *, field: str = "value") -> Any:
    """Decode markers inside an already-parsed JSON value (what goatbeat stores)."""
    if isinstance(value, list):
        return [decode(v, field=field) for v in value]
    if isinstance(value, dict):
        decoded = {k: decode(v, field=field) for k, v in value.items()}
        return _hook(field)(decoded)
    return value


def encode(value: Any, *, field: str = "value") -> Any:
    """A JSON-able form of ``value`` with kombu markers for the types kombu knows.

    Tuples become lists (as they would on the wire). Anything else kombu's JSON cannot carry
    raises :class:`KombuJSONError`: celery could not have sent it with the json serializer."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise KombuJSONError(field, value, f"{value!r} is not representable in JSON")
        return value
    if isinstance(value, (list, tuple)):
        return [encode(v, field=field) for v in value]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise KombuJSONError(field, value, f"key {k!r} is not a string")
            out[k] = encode(v, field=field)
        return out
    # datetime before date: a datetime is a date too.
    if isinstance(value, datetime):
        return _marker("datetime", value.isoformat())
    if isinstance(value, date):
        return _marker("date", value.isoformat())
    if isinstance(value, time):
        return _marker("time", value.isoformat())
    if isinstance(value, Decimal):
        return _marker("decimal", str(value))
    if isinstance(value, uuid.UUID):
        return _marker("uuid", {"hex": value.hex})
    if isinstance(value, (bytes, bytearray)):
        try:
            return _marker("bytes", bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            return _marker("base64", base64.b64encode(bytes(value)).decode("utf-8"))
    reducer = getattr(value, "__json__", None)
    if callable(reducer):
        return encode(reducer(), field=field)
    raise KombuJSONError(
        field,
        value,
        f"{type(value).__name__} {value!r} cannot be sent with celery's json serializer",
    )
