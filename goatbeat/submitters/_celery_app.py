"""The Celery app a :class:`~goatbeat.submitters.celery.CelerySubmitter` publishes through:
loading it (an app, a module path or a broker URL), the error classes of its transports, and
the socket bound its Redis connections get."""

from __future__ import annotations

import importlib
from typing import Any

from goatbeat.core.errors import InvalidValue

__all__ = ["load_app", "error_classes", "bound_redis_sockets"]


def load_app(app: Any) -> tuple[Any, bool]:
    """The Celery app and whether this submitter created it (and so must close it)."""
    if app is None:
        from celery import current_app

        # The project's app once its module is imported, as for ``@shared_task``.
        return current_app._get_current_object(), False
    if not isinstance(app, str):
        return app, False
    if "://" in app:
        from celery import Celery

        created = Celery("goatbeat", broker=app, set_as_current=False)
        created.conf.task_serializer = "json"
        return created, True
    module_name, _, attr = app.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidValue("celery_app", app, f"cannot import {module_name!r}: {exc}") from None
    candidates = [attr] if attr else ["app", "celery"]
    for candidate in candidates:
        found = getattr(module, candidate, None)
        if found is not None:
            return found, False
    raise InvalidValue(
        "celery_app", app, f"{module_name!r} has no attribute {' or '.join(candidates)}"
    )


def error_classes() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(retryable, permanent) exception classes of the installed kombu / redis."""
    from kombu import exceptions as kombu_exc

    retryable: list[type[BaseException]] = [
        kombu_exc.OperationalError,
        kombu_exc.ChannelError,
        kombu_exc.ConnectionError,
        ConnectionError,
        TimeoutError,
        OSError,
    ]
    try:
        from redis import exceptions as redis_exc
    except ImportError:  # an AMQP-only project: kombu wraps its errors already
        pass
    else:
        retryable.append(redis_exc.RedisError)
    permanent: list[type[BaseException]] = [
        kombu_exc.EncodeError,
        kombu_exc.ContentDisallowed,
        TypeError,
        ValueError,
    ]
    return tuple(retryable), tuple(permanent)


def bound_redis_sockets(app: Any, seconds: float) -> None:
    """On Redis, kombu takes no per-publish timeout: a frozen server (SIGSTOP, a stalled
    host) holds the publish for as long as it lasts. Give this process's Redis connections a
    socket timeout instead, unless the app sets one (``broker_transport_options``); the
    scheduler never blocks on a Redis read for longer (it consumes nothing)."""
    try:
        url = str(app.conf.broker_url or "")
        if not url.startswith(("redis://", "rediss://", "redis+socket://")):
            return
        options = dict(app.conf.broker_transport_options or {})
        if "socket_timeout" in options:
            return
        options["socket_timeout"] = seconds
        app.conf.broker_transport_options = options
    except Exception:  # an app unlike Celery's: left as it is
        return
