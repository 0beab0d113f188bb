"""The per-replica probes' rules (:class:`goatbeat.metrics.health.LoopHealth`), on a fake clock,
and the HTTP server that answers them (real sockets, on loopback)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.scheduler import IterationResult
from goatbeat.metrics.health import LoopHealth
from goatbeat.metrics.server import serve


def test_liveness_follows_the_loop_and_fails_past_the_timeout() -> None:
    clock = FakeClock()
    health = LoopHealth(timeout=10, clock=clock)
    assert health.liveness().ok and health.liveness().reason.startswith("starting: ")
    assert not health.readiness().ok  # no iteration yet

    clock.advance(4)
    health.iteration(IterationResult(leader=False), 0.01)
    assert health.liveness().reason == "alive: iteration 1 ended 0.0s ago, standby (limit 10s)"
    assert health.readiness().line == "ok: ready: standby"

    clock.advance(10)
    assert health.liveness().ok  # exactly at the limit
    clock.advance(0.5)
    verdict = health.liveness()
    assert not verdict.ok
    assert verdict.line == (
        "unhealthy: stalled: the scheduler loop's last iteration ended 10.5s ago (limit 10s)"
    )
    assert health.readiness() == verdict

    health.iteration(IterationResult(leader=True, fencing_token=7), 0.01)
    assert health.readiness().line == "ok: ready: leader (fencing token 7)"


def test_a_loop_that_never_iterates_is_stalled_after_the_timeout() -> None:
    clock = FakeClock()
    health = LoopHealth(timeout=5, clock=clock)
    clock.advance(6)
    assert health.liveness().line == (
        "unhealthy: stalled: no scheduler iteration in the 6.0s since the process started "
        "(limit 5s)"
    )


def test_waiting_out_an_outage_before_the_loop_starts_is_alive_not_ready() -> None:
    clock = FakeClock()
    health = LoopHealth(timeout=5, clock=clock)
    for _ in range(4):
        clock.advance(4)
        health.waiting("the database")
    assert health.liveness().ok
    assert health.readiness().line == "unhealthy: starting: waiting for the database"


def test_an_iteration_that_could_not_reach_the_database_is_live_but_not_ready() -> None:
    clock = FakeClock()
    health = LoopHealth(timeout=5, clock=clock)
    health.iteration(IterationResult(leader=False, error="postgres: connection refused"), 0.1)
    assert health.liveness().ok
    assert health.readiness().line == (
        "unhealthy: the last iteration could not reach the database: postgres: connection refused"
    )


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        LoopHealth(timeout=0)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def test_the_server_answers_each_probe_with_its_status_and_one_line() -> None:
    clock = FakeClock()
    health = LoopHealth(timeout=5, clock=clock)
    server = serve(0, health=health, metrics=lambda accept: (b"up 1\n", "text/plain"))
    try:
        assert _get(server.port, "/readyz")[0] == 503
        health.iteration(IterationResult(leader=False), 0.1)
        assert _get(server.port, "/healthz") == (
            200,
            "ok: alive: iteration 1 ended 0.0s ago, standby (limit 5s)\n",
        )
        assert _get(server.port, "/readyz") == (200, "ok: ready: standby\n")
        assert _get(server.port, "/metrics") == (200, "up 1\n")
        clock.advance(6)
        status, body = _get(server.port, "/healthz")
        assert status == 503 and body.startswith("unhealthy: stalled: ")
        assert _get(server.port, "/other")[0] == 404
    finally:
        server.close()


def test_the_probes_alone_serve_no_metrics_and_bind_loopback() -> None:
    server = serve(0, health=LoopHealth(timeout=5))
    try:
        assert server._server.server_address[0] == "127.0.0.1"
        status, body = _get(server.port, "/metrics")
        assert status == 404 and "/healthz, /readyz" in body
    finally:
        server.close()
