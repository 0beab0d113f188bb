"""The fast framer's bytes are py-amqp's (goatbeat/submitters/_amqp_wire.py), over varied
messages: headers of every type, unicode, priority, expiration, reply_to, large bodies, values
it leaves to py-amqp. No broker: each message is framed both ways and the bytes compared."""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from goatbeat.submitters._amqp_wire import MethodFrames, encode_properties, publish_frames

amqp = pytest.importorskip("amqp")
from amqp.exceptions import FrameSyntaxError  # noqa: E402
from amqp.method_framing import frame_writer  # noqa: E402
from amqp.serialization import dumps  # noqa: E402


class _Connection:
    def __init__(self, frame_max: int) -> None:
        self.frame_max = frame_max
        self.bytes_sent = 0


class _Collector:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: Any) -> None:
        self.parts.append(bytes(data))


def _py_amqp(message: Any, exchange: str, key: str, channel: int, frame_max: int) -> bytes:
    collector = _Collector()
    write = frame_writer(_Connection(frame_max), collector)
    args = dumps("Bssbb", (0, exchange, key, False, False))
    write(1, channel, (60, 40), args, message)
    return b"".join(collector.parts)


def _ours(message: Any, exchange: str, key: str, channel: int, frame_max: int) -> bytes:
    out: list[bytes] = []
    method = MethodFrames().get(channel, exchange, key, False, False)
    publish_frames(method, channel, frame_max, message, out)
    return b"".join(out)


def _celery_like(**extra: Any) -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    headers: dict[str, Any] = {
        "lang": "py",
        "task": "proj.tasks.report",
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": "2026-12-01T08:05:00+00:00",
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, 30.5],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": "[1, 'a']",
        "kwargsrepr": "{'tenant': 'acme'}",
        "origin": "gen123@host",
        "ignore_result": False,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
        "celery_beat_task": True,
        "goatbeat_idempotency_key": "nightly:2026-12-01T08:00:00Z",
        "goatbeat_scheduled_at": "2026-12-01T08:00:00+00:00",
    }
    headers.update(extra)
    return headers


HEADERS = {
    "celery": _celery_like(),
    "every type": _celery_like(
        s="text",
        b=b"\x00\xffraw",
        t=True,
        f=False,
        i=42,
        neg=-2147483647,
        edge=-2147483648,
        big=2**40,
        small=-(2**40),
        fl=1.5e-300,
        none=None,
        nested={"a": {"b": [1, "x", None, 2.0, True]}, "e": {}},
        lst=[],
        tup=(1, "two", (3,)),
    ),
    "unicode": _celery_like(argsrepr="['héllo', '日本語', '🎉']", **{"ключ": "значение"}),
    "surrogate": {"s": "\udc80lone"},
    "empty": {},
}

PROPERTIES = {
    "kombu defaults": {"content_type": "application/json", "content_encoding": "utf-8"},
    "priority": {"priority": 7, "delivery_mode": 2},
    "priority 0": {"priority": 0, "delivery_mode": 1},
    "expiration, reply_to": {
        "expiration": "300000",
        "reply_to": "b7c1f0e2-reply.celery.pidbox",
        "correlation_id": "5c5e…ünï",
    },
    "every property": {
        "content_type": "application/json",
        "content_encoding": "binary",
        "delivery_mode": 2,
        "priority": 255,
        "correlation_id": "c",
        "reply_to": "r",
        "expiration": "0",
        "message_id": "m",
        "timestamp": 1764576000,
        "type": "t",
        "user_id": "guest",
        "app_id": "goatbeat",
        "cluster_id": "x",
    },
    "empty strings": {"content_type": "", "reply_to": "", "correlation_id": b""},
}

BODIES = {
    "small": b'[[1, "a"], {"tenant": "acme"}, {"callbacks": null}]',
    "empty": b"",
    "unicode str": '[["日本語"], {}, {}]',
    "frame sized": b"x" * (4096 - 8 - 1),
    "at the limit": b"y" * (4096 - 8),
    "beyond": b"z" * (4096 - 8 + 1),
    "large": bytes(range(256)) * 1000,
}


@pytest.mark.parametrize("headers", list(HEADERS))
@pytest.mark.parametrize("properties", list(PROPERTIES))
def test_the_property_list_is_py_amqps(headers: str, properties: str) -> None:
    message = amqp.Message(b"{}", application_headers=HEADERS[headers], **PROPERTIES[properties])
    assert encode_properties(message) == message._serialize_properties()


@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("frame_max", [4096, 131072])
@pytest.mark.parametrize("properties", ["kombu defaults", "priority", "expiration, reply_to"])
def test_the_frames_are_py_amqps(body: str, frame_max: int, properties: str) -> None:
    for exchange, key, channel in (("", "celery", 1), ("tasks", "rk.é", 7)):

        def message() -> Any:
            return amqp.Message(
                BODIES[body], application_headers=_celery_like(), **PROPERTIES[properties]
            )

        first, second = message(), message()
        second.properties["application_headers"] = first.properties["application_headers"]
        assert _ours(first, exchange, key, channel, frame_max) == _py_amqp(
            second, exchange, key, channel, frame_max
        )
        assert first.properties == second.properties  # a str body's encoding set alike


def test_a_large_header_table_splits_the_body_as_py_amqp() -> None:
    headers = _celery_like(argsrepr="a" * 5000)
    first = amqp.Message(b"b" * 300, application_headers=headers)
    second = amqp.Message(b"b" * 300, application_headers=headers)
    assert _ours(first, "", "q", 1, 4096) == _py_amqp(second, "", "q", 1, 4096)


@pytest.mark.parametrize(
    "value",
    [
        Decimal("12.345"),
        datetime(2026, 12, 1, 8, tzinfo=UTC),
        type("Text", (str,), {})("a str subclass"),
        bytearray(b"ba"),
    ],
    ids=["decimal", "datetime", "str subclass", "bytearray"],
)
def test_values_left_to_py_amqp_give_its_bytes_or_its_error(value: Any) -> None:
    message = amqp.Message(b"{}", application_headers=_celery_like(odd=value, deep=[{"v": value}]))
    try:
        expected: bytes | type[Exception] = message._serialize_properties()
    except Exception as exc:  # noqa: BLE001 - what py-amqp raises, compared below
        expected = type(exc)
    if isinstance(expected, bytes):
        assert encode_properties(message) == expected
    else:
        with pytest.raises(expected):
            encode_properties(message)


@pytest.mark.parametrize(
    "headers, error",
    [
        ({"k" * 256: 1}, struct.error),
        ({"i": 2**64}, struct.error),
        ({"o": object()}, FrameSyntaxError),
    ],
    ids=["long key", "int beyond 64 bits", "object"],
)
def test_what_py_amqp_refuses_is_refused_alike(headers: dict[str, Any], error: type) -> None:
    message = amqp.Message(b"{}", application_headers=headers)
    with pytest.raises(error):
        message._serialize_properties()
    with pytest.raises(error):
        encode_properties(message)


def test_a_long_short_string_property_is_refused_alike() -> None:
    message = amqp.Message(b"{}", reply_to="r" * 256)
    with pytest.raises(struct.error):
        message._serialize_properties()
    with pytest.raises(struct.error):
        encode_properties(message)
