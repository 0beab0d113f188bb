"""Who a scheduler process is: its scheduler id (a name several processes may share) plus
an identity of its own start, which holds the lease, its fencing token and the heartbeat row."""

from __future__ import annotations

import secrets

__all__ = ["INSTANCE_SUFFIX", "new_instance", "split_instance"]

INSTANCE_SEPARATOR = "#"
INSTANCE_SUFFIX = 9  # "#" and 8 hex digits
"""What :func:`new_instance` adds to a scheduler id: ids are at most 255 - this long."""


def new_instance(scheduler_id: str) -> str:
    """This start's identity: ``scheduler_id`` plus a random suffix (``web-1#3f9a0c1e``).

    The lease, its fencing token and the heartbeat row are held by the *process*, never by
    the id alone: every replica of a Django project reads the same ``GOATBEAT
    ["scheduler_id"]``, and a restart under a fixed id is a new process. With the id alone as
    the holder, two processes sharing it both took the lease (the store's "ours already") and
    both claimed under one token, and a frozen leader woke up to find its restarted twin's
    token equal to its own. With one identity per start, the store sees a new holder, so it
    grants the lease only once the old one expired and the token grows (the fencing rule)."""
    return f"{scheduler_id}{INSTANCE_SEPARATOR}{secrets.token_hex(4)}"


def split_instance(holder: str) -> tuple[str, str | None]:
    """``(scheduler id, instance suffix)`` of a lease holder or heartbeat row; a holder
    written before identities had suffixes (or by a test) is its own id, suffix None."""
    name, sep, suffix = holder.rpartition(INSTANCE_SEPARATOR)
    if not sep or len(suffix) != INSTANCE_SUFFIX - 1 or not _is_hex(suffix):
        return holder, None
    return name, suffix


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)
