"""How the idempotency key travels to the task backends.

Shared by the Celery, Dramatiq and RQ submitters so a task can find the key under the same names
whatever backend ran it, and so backend ids derived from a key are stable across processes and
releases (a resubmission after a crash must produce the same id).
"""

from __future__ import annotations

import uuid

from goatbeat.core.model import Occurrence
from goatbeat.core.timeutil import iso_z

__all__ = ["KEY_HEADER", "SCHEDULED_AT_HEADER", "RESERVED_HEADERS", "derived_uuid", "key_headers"]

KEY_HEADER = "goatbeat_idempotency_key"
SCHEDULED_AT_HEADER = "goatbeat_scheduled_at"
RESERVED_HEADERS = frozenset({KEY_HEADER, SCHEDULED_AT_HEADER})

# Fixed forever: changing it would give already-submitted occurrences new ids, so a resubmission
# after an upgrade would no longer be recognised as one.
_NAMESPACE = uuid.UUID("6f0c5a4e-2d7b-5c1e-9a83-3b5f1e0d9c42")


def derived_uuid(key: str) -> str:
    """A UUID (version 5) that depends only on ``key``: the same occurrence, the same id."""
    return str(uuid.uuid5(_NAMESPACE, key))


def key_headers(occurrence: Occurrence) -> dict[str, str]:
    return {
        KEY_HEADER: occurrence.idempotency_key,
        SCHEDULED_AT_HEADER: iso_z(occurrence.scheduled_at),
    }
