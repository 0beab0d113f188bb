"""Socket timeouts on a redis-py client, from the scheduler's bound of outside calls.

redis-py waits forever by default: a frozen Redis (a SIGSTOP, a partition) keeps an ``LPUSH``
blocked in ``recv`` until it wakes. :func:`bound_redis_client` gives the client's connections a
socket timeout and a connect timeout no longer than the scheduler's
:func:`~goatbeat.core.bounded.io_timeout` (a shorter one of the user's own is kept) and drops
the connections already open, so the next command reconnects with them. A command that times
out raises redis' ``TimeoutError``, a retryable submit failure whose outcome is unknown
(README, guarantee case 4).
"""

from __future__ import annotations

from typing import Any

__all__ = ["bound_redis_client"]


def bound_redis_client(client: Any, seconds: float) -> bool:
    """Bound ``client``'s socket waits at ``seconds``; False when it is not a redis-py client
    (nothing is changed)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return False
    for key in ("socket_timeout", "socket_connect_timeout"):
        current = kwargs.get(key)
        if current is None or current > seconds:
            kwargs[key] = seconds
    disconnect = getattr(pool, "disconnect", None)
    if callable(disconnect):
        disconnect()
    return True
