"""goatbeat.core.bounded: the bound of calls to outside servers, and its two mechanisms."""

from __future__ import annotations

import logging
import socket
import threading
from datetime import timedelta

import pytest

from goatbeat.core.bounded import (
    BoundedCall,
    CallBusy,
    CallTimedOut,
    Watchdog,
    io_timeout,
    shutdown_socket,
)


def test_the_bound_is_half_the_lease_validity_and_never_more_than_ten_seconds() -> None:
    assert io_timeout(timedelta(seconds=20)) == 10.0  # the default lease: 30 s, renewed every 10
    assert io_timeout(timedelta(seconds=2)) == 1.0  # 3 s renewed every second
    assert io_timeout(timedelta(minutes=5)) == 10.0
    assert io_timeout(timedelta(milliseconds=100)) == 0.2


def test_a_call_that_hangs_gives_up_logs_and_is_not_started_again_while_it_hangs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    started: list[int] = []

    def hangs() -> str:
        started.append(1)
        release.wait(10)
        return "late"

    late: list[object] = []
    call = BoundedCall("broker publish", on_late=late.append, submitter="test")
    with caplog.at_level(logging.ERROR, logger="goatbeat"), pytest.raises(CallTimedOut):
        call.call(hangs, 0.05, first_key="k")
    record = next(r for r in caplog.records if r.getMessage() == "io.timeout")
    assert record.goatbeat == {  # type: ignore[attr-defined]
        "what": "broker publish", "timeout": 0.05, "submitter": "test", "first_key": "k"
    }  # fmt: skip
    with pytest.raises(CallBusy):
        call.call(hangs, 0.05)
    assert len(started) == 1
    release.set()
    for _ in range(200):
        if late:
            break
        threading.Event().wait(0.01)
    assert late == ["late"]  # its result went to on_late, never to a later caller
    assert call.call(lambda: "next", 1.0) == "next"


def test_a_connection_that_arrives_late_is_kept_for_the_next_call() -> None:
    release = threading.Event()
    attempts: list[int] = []

    def connect() -> str:
        attempts.append(1)
        release.wait(10)
        return "conn"

    call = BoundedCall("postgres connect", keep_late=True)
    with pytest.raises(CallTimedOut):
        call.call(connect, 0.05)
    with pytest.raises(CallTimedOut):
        call.call(connect, 0.05)  # waits for the same attempt
    release.set()
    assert call.call(connect, 1.0) == "conn"
    assert attempts == [1]


def test_a_callers_own_exception_is_raised_as_it_is() -> None:
    def fails() -> None:
        raise ConnectionRefusedError("refused")

    with pytest.raises(ConnectionRefusedError):
        BoundedCall("x").call(fails, 1.0)


def test_the_watchdog_shuts_a_silent_socket_down_and_a_blocked_read_returns() -> None:
    server, client = socket.socketpair()
    try:
        dog = Watchdog("test")
        dog.arm(0.05, lambda: shutdown_socket(client.fileno()))
        assert client.recv(1) == b""  # EOF: the read that would have blocked forever returns
        assert dog.disarm() is True
        # Disarmed in time, it does nothing.
        dog.arm(0.05, lambda: pytest.fail("fired after disarm"))
        assert dog.disarm() is False
        threading.Event().wait(0.1)
    finally:
        server.close()
        client.close()


def test_the_watchdog_survives_calls_disarmed_while_it_waits() -> None:
    # A disarm between its wake-up and its look at the deadline once killed its thread.
    dog = Watchdog("race")
    pause = threading.Event().wait
    dog.arm(1.0, lambda: None)
    pause(0.02)  # the thread is waiting for that deadline
    dog.arm(0.05, lambda: None)
    pause(0.01)  # now for this one
    dog.disarm()
    pause(0.15)  # it wakes at the old deadline and finds none
    assert dog._thread is not None and dog._thread.is_alive()
