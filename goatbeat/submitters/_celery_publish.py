"""Publishing a scheduled occurrence to Celery at a scheduler's rate.

``app.send_task`` does, for every message, work whose result is the same for every occurrence
of a schedule: it looks the task up in the app's registry and merges its execution options,
asks the router where the task goes, reads half a dozen settings, and then builds an
``AsyncResult`` and registers interest in its result, which a scheduler never reads. At tens of
thousands of messages in a burst that is about a fifth of the interpreter's time, shared with
claiming the next batch.

:class:`Publisher` does that per-schedule part once, for each (task, routing options), and per
message only what changes: it builds the message with the app's own
``amqp.create_task_message`` and publishes it with ``amqp.send_task_message`` (which sends
``before_task_publish``/``after_task_publish`` and the ``task-sent`` event as ``send_task``
does). The messages are those ``send_task`` sends (tests/unit/test_celery_publish.py compares
them field by field with a real Redis): task routes, ``task_queues``, a registered task's
options (queue, priority, expires, time limits, ``ignore_result``...), ``expires``, headers.

It steps aside, and ``send_task`` is used, where its shortcut would not be exact: a router that
is not a plain ``task_routes`` mapping (a function may route by argument, so nothing can be
kept), task protocol 1, or a publisher running inside a Celery task (whose id would become the
message's parent).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

__all__ = ["Publisher", "beat_options"]

_logger = logging.getLogger("goatbeat.submitters.celery")

_CACHE_LIMIT = 4096
"""Distinct (task, routing options) kept; a scheduler has that many distinct routes rarely."""


class Publisher:
    """Send task messages by name as ``app.send_task`` does (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._prepared: dict[tuple[Any, ...], tuple[dict[str, Any], Mapping[str, Any]]] = {}
        self._origin_pid = 0
        self._origin_text = ""

    def usable(self) -> bool:
        """Whether the shortcut gives exactly ``send_task``'s message here and now."""
        app = self.app
        try:
            if int(app.conf.task_protocol) != 2:
                return False
            from celery.app.routes import MapRoute

            routes = app.amqp.router.routes
            if not all(isinstance(route, MapRoute) for route in routes):
                return False
            return not app.current_worker_task
        except Exception:  # an app unlike Celery's own: the long way is always right
            return False

    def publish(
        self,
        producer: Any,
        name: str,
        *,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        task_id: str,
        headers: Mapping[str, Any],
        options: Mapping[str, Any],
        expires: float | datetime | None,
        retry_policy: Mapping[str, Any],
        timeouts: Mapping[str, float] | None = None,
    ) -> str:
        """Publish one message through ``producer``; returns the task id. ``options`` are the
        schedule's routing (queue, exchange, routing_key, priority), ``expires`` seconds from
        now or an absolute instant (None: the task's own, if any)."""
        routed, fixed = self._prepare(name, options)
        sending = dict(routed)
        if expires is None:
            expires = fixed["expires"]
        if expires is not None:
            if isinstance(expires, datetime):
                seconds = (expires - self.app.now()).total_seconds()
            else:
                seconds = expires
            # As send_task: an instant already past expires the message on arrival.
            sending["expiration"] = max(0, seconds)
        amqp = self.app.amqp
        arguments, keywords = list(args), dict(kwargs)
        message = amqp.create_task_message(
            task_id,
            name,
            arguments,
            keywords,
            # Celery's saferepr of plain values is their repr, built in C (saferepr walks
            # them in Python: a tenth of a message's cost); anything else is left to Celery.
            # An empty one's is the same for every message: Celery's own, computed once.
            argsrepr=_plain_repr(arguments, getattr(amqp, "argsrepr_maxsize", None))
            if arguments
            else fixed["empty_argsrepr"],
            kwargsrepr=_plain_repr(keywords, getattr(amqp, "kwargsrepr_maxsize", None))
            if keywords
            else fixed["empty_kwargsrepr"],
            expires=expires,
            reply_to=self.app.thread_oid,
            origin=self._origin(),
            time_limit=fixed["time_limit"],
            soft_time_limit=fixed["soft_time_limit"],
            create_sent_event=fixed["sent_event"],
            ignore_result=fixed["ignore_result"],
            replaced_task_nesting=0,
            **sending,
        )
        if not fixed["ignore_result"] and fixed["reply_queue"]:
            # As send_task: the rpc:// backend's reply queue exists before the task runs, or
            # its result would go nowhere.
            self.app.backend.on_task_call(producer, task_id)
        for stamp in sending.pop("stamped_headers", ()):
            sending.pop(stamp, None)
        if "declare" not in sending and _declared(producer, sending.get("queue")):
            # kombu would bind a copy of the queue to the channel, for every message, only to
            # find it in its record of what this connection declared: publish straight away.
            sending["declare"] = []
        if not sending.get("declare", True) and _buffers(producer):
            # Nothing to declare and a batch collecting the frames: kombu's publish would
            # only wrap a buffer append in its connection-retry loop (_Buffered).
            producer = _Buffered(producer)
        with producer.connection._reraise_as_library_errors():
            amqp.send_task_message(
                producer,
                name,
                message,
                headers=headers,  # read, never kept: kombu copies it into the message
                retry=True,
                retry_policy=retry_policy,
                **(timeouts or {}),
                **sending,
            )
        return task_id

    def _origin(self) -> str:
        """The ``origin`` header Celery writes (its ``anon_nodename()``: ``gen<pid>@<host>``),
        made once per process instead of once per message."""
        pid = os.getpid()
        if self._origin_pid != pid:
            from celery.utils.nodenames import anon_nodename

            self._origin_text, self._origin_pid = anon_nodename(), pid
        return self._origin_text

    def exchanges(self, name: str, options: Mapping[str, Any]) -> set[str]:
        """The exchange names a message for task ``name`` with routing ``options`` may be
        published to, as its route says (an exchange, a queue's exchange); empty when the
        route is unknown (never prepared, or an app unlike Celery's)."""
        found = self._prepared.get((name, *options.items()))
        if found is None:
            return set()
        routed = found[0]
        names = set()
        for exchange in (routed.get("exchange"), getattr(routed.get("queue"), "exchange", None)):
            exchange_name = (
                exchange if isinstance(exchange, str) else getattr(exchange, "name", None)
            )
            if isinstance(exchange_name, str):
                names.add(exchange_name)
        return names

    def _prepare(
        self, name: str, options: Mapping[str, Any]
    ) -> tuple[dict[str, Any], Mapping[str, Any]]:
        key = (name, *options.items())  # the submitter builds options in one fixed order
        found = self._prepared.get(key)
        if found is not None:
            return found
        app = self.app
        task_type = app._tasks.get(name)
        merged = beat_options(app, name, options)
        fixed = {
            "time_limit": merged.pop("time_limit", None),
            "soft_time_limit": merged.pop("soft_time_limit", None),
            "expires": merged.pop("expires", None),
            "ignore_result": merged.pop("ignore_result", None),
            "sent_event": app.conf.task_send_sent_event,
            "reply_queue": _declares_reply_queue(app),
            "empty_argsrepr": _empty_repr(app, (), "argsrepr_maxsize"),
            "empty_kwargsrepr": _empty_repr(app, {}, "kwargsrepr_maxsize"),
        }
        # Only MapRoute routers (usable() checked): the route depends on the name alone.
        routed = app.amqp.router.route(merged, name, None, None, task_type)
        if len(self._prepared) >= _CACHE_LIMIT:
            self._prepared.clear()
        self._prepared[key] = (routed, fixed)
        return routed, fixed


def beat_options(app: Any, name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options celery beat hands ``send_task`` for a schedule's ``options``: for a task
    registered in the app, beat calls ``Task.apply_async``, which lays the schedule's options
    over the task's own, unset (None) ones included (so an unset priority stays unset instead
    of becoming kombu's default 0), and sends the task's ``ignore_result``. For a task the app
    does not know, the options as they are."""
    merged = dict(options)
    task_type = app._tasks.get(name)
    if task_type is not None and hasattr(task_type, "_get_exec_options"):
        merged = {**(task_type._get_exec_options() or {}), **merged}
        merged.setdefault("ignore_result", task_type.ignore_result)
    return merged


def _declares_reply_queue(app: Any) -> bool:
    """Whether the app's result backend wants its reply queue declared before each send, as
    the ``rpc://`` backend does (``on_task_call``). Other backends' ``on_task_call`` subscribe
    to the result, which a scheduler never reads: left out."""
    try:
        from celery.backends.rpc import RPCBackend

        return isinstance(app.backend, RPCBackend)
    except Exception:  # no backend can be built: send_task would fail on it too, later
        return False


def _empty_repr(app: Any, empty: tuple[()] | dict[str, Any], maxsize: str) -> str | None:
    """The ``argsrepr`` (or ``kwargsrepr``) Celery computes for empty arguments (which it
    makes ``()``) or keywords (``{}``), with its own ``saferepr`` and settings; None (Celery
    computes it per message) if that fails."""
    try:
        from celery.utils.saferepr import saferepr

        amqp = app.amqp
        text = saferepr(empty, getattr(amqp, maxsize), maxlevels=app.conf.task_repr_maxlevels)
    except Exception:  # an app unlike Celery's own: it computes the header itself
        return None
    return text if isinstance(text, str) else None


_SCALARS = (int, float, bool, type(None))


def _plain(value: Any) -> bool:
    """A value whose ``repr`` is exactly what Celery's ``saferepr`` writes for it: a number,
    a boolean, None, or a printable string without quotes or backslashes (saferepr quotes
    and escapes strings its own way)."""
    if type(value) in _SCALARS:
        return True
    return (
        type(value) is str
        and value.isprintable()
        and "'" not in value
        and '"' not in value
        and "\\" not in value
    )


def _plain_repr(value: list[Any] | dict[str, Any], maxsize: Any) -> str | None:
    """``repr(value)`` for a list of plain values or a dict of plain string keys to plain
    values, no longer than ``maxsize`` (saferepr would shorten it): the ``argsrepr`` or
    ``kwargsrepr`` header ``send_task`` would compute. None otherwise (and for an empty one,
    which Celery writes as a tuple): Celery computes it."""
    if not value:
        return None
    if isinstance(value, dict):
        if not all(type(k) is str and _plain(k) and _plain(v) for k, v in value.items()):
            return None
    elif not all(_plain(v) for v in value):
        return None
    text = repr(value)
    if not isinstance(maxsize, int) or len(text) > maxsize:
        return None
    return text


def _declared(producer: Any, queue: Any) -> bool:
    """Whether kombu already declared ``queue`` on ``producer``'s connection (its own record,
    which it clears when the connection is replaced, so a new connection declares again)."""
    if queue is None or isinstance(queue, str):
        return False
    try:
        return bool(queue.can_cache_declaration) and hash(queue) in (
            producer.connection.declared_entities
        )
    except AttributeError:
        return False


def _buffers(producer: Any) -> bool:
    """Whether a publish through ``producer`` now only appends frames to a buffer, with no I/O:
    it publishes into a kombu batch (goatbeat's framed chunk) and its own exchange has no name
    (kombu would declare a named one with every message)."""
    local = getattr(producer, "_batch_local", None)
    if getattr(local, "current", None) is None:
        return False
    return not (producer.auto_declare and producer.exchange.name)


class _Buffered:
    """``producer`` for one message published into a batch with nothing to declare. Its
    :meth:`publish` is kombu's ``Producer.publish`` without the connection-retry wrapper
    (``retry=True`` wraps the publish in ``Connection.ensure``), which has nothing to retry
    when the publish is a buffer append and costs a tenth of the message: the same argument
    handling, the same serialization (``Producer._prepare``), the same ``Producer._publish``.
    Everything else is the producer's. Used only when nothing is to be declared (a declaration
    talks to the broker, which is what the retry wrapper is for: :func:`_buffers` and the
    ``declare=[]`` the publisher passes)."""

    __slots__ = ("_producer",)

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def publish(
        self,
        body: Any,
        routing_key: str | None = None,
        delivery_mode: Any = None,
        mandatory: bool = False,
        immediate: bool = False,
        priority: int = 0,
        content_type: str | None = None,
        content_encoding: str | None = None,
        serializer: str | None = None,
        headers: dict[str, Any] | None = None,
        compression: str | None = None,
        exchange: Any = None,
        retry: bool = False,
        retry_policy: Mapping[str, Any] | None = None,
        declare: list[Any] | None = None,
        expiration: float | None = None,
        timeout: float | None = None,
        confirm_timeout: float | None = None,
        **properties: Any,
    ) -> Any:
        if declare:  # never: the publisher wraps only publishes with declare=[]
            raise RuntimeError(f"a buffered publish cannot declare {declare!r}")
        producer = self._producer
        headers = {} if headers is None else headers
        policy = {} if retry_policy is None else retry_policy
        name, properties["delivery_mode"] = producer._delivery_details(
            exchange or producer.exchange, delivery_mode
        )
        if expiration is not None:
            properties["expiration"] = str(int(expiration * 1000))
        body, content_type, content_encoding = producer._prepare(
            body,
            serializer,
            content_type,
            content_encoding,
            producer.compression if compression is None else compression,
            headers,
        )
        if retry:
            # As kombu does before it wraps the publish: the policy becomes the transport's.
            producer.connection.transport_options.update(policy)
        return producer._publish(
            body,
            priority,
            content_type,
            content_encoding,
            headers,
            properties,
            producer.routing_key if routing_key is None else routing_key,
            mandatory,
            immediate,
            name,
            [],
            timeout,
            confirm_timeout,
            retry,
            policy,
        )
