"""Notification payloads: the identifiers the wake-up channel carries (see
:data:`~goatbeat.core.store.NOTIFY_CHANNEL`)."""

from __future__ import annotations

import re

from goatbeat.core.errors import InvalidValue

_PAYLOAD = re.compile(r"\A(?:schedule:[0-9]{1,19}|run:[0-9]{1,19}|lease:[A-Za-z0-9_.:/-]{1,64})\Z")


def validate_payload(payload: object) -> bool:
    """Whether ``payload`` is one of the identifiers the channel carries (see NOTIFY_CHANNEL).
    Receivers treat anything else as a plain wake-up."""
    return isinstance(payload, str) and _PAYLOAD.match(payload) is not None


def check_payload(payload: object) -> str:
    """``payload`` if it is a valid identifier; InvalidValue naming ``payload`` otherwise (we
    never send user text over the channel)."""
    if not validate_payload(payload):
        raise InvalidValue(
            "payload", payload, f"{payload!r} is not schedule:<id>, run:<id> or lease:<name>"
        )
    assert isinstance(payload, str)
    return payload


def lease_payload(name: str) -> str | None:
    payload = f"lease:{name}"
    return payload if validate_payload(payload) else None
