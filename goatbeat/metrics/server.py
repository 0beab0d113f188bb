"""The scheduler process's HTTP server: ``/healthz``, ``/readyz`` and ``/metrics``.

``goatbeat scheduler --metrics-port`` serves all three, ``--health-port`` the probes alone (no
optional package needed). One small server from the standard library, on a daemon thread of
its own, so a scrape or a probe never waits for the scheduler loop: it reads what the loop
last reported (:class:`~goatbeat.metrics.health.LoopHealth`) and what the metrics observer last
read. Each probe answers one line of text, ``200`` when ok and ``503`` when not;
``/metrics`` is Prometheus's text format (or OpenMetrics, as the scraper's ``Accept`` asks),
rendered by a callable the Prometheus adapter provides.

It binds ``127.0.0.1`` unless given another address: metrics and probes are nobody's business
outside the host until the operator says so (in Kubernetes the kubelet probes the pod's own
address: pass ``--metrics-address 0.0.0.0`` there).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from goatbeat.core.observability import log_event
from goatbeat.metrics.health import LoopHealth, Probe

__all__ = ["DEFAULT_ADDRESS", "HttpServer", "MetricsRenderer", "serve"]

DEFAULT_ADDRESS = "127.0.0.1"

MetricsRenderer = Callable[[str], tuple[bytes, str]]
"""``render(accept_header) -> (body, content type)``."""


class HttpServer:
    """A running server (:func:`serve`); :meth:`close` stops it."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A replica restarted at once must be able to bind its port again.
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        health: LoopHealth | None,
        metrics: MetricsRenderer | None,
    ) -> None:
        self.health = health
        self.metrics = metrics
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        health, metrics = self.server.health, self.server.metrics
        if path in ("/healthz", "/readyz") and health is not None:
            probe: Probe = health.liveness() if path == "/healthz" else health.readiness()
            self._send(200 if probe.ok else 503, (probe.line + "\n").encode(), body=body)
        elif path == "/metrics" and metrics is not None:
            content, content_type = metrics(self.headers.get("Accept", ""))
            self._send(200, content, content_type=content_type, body=body)
        else:
            served = [p for p, on in (("/healthz", health), ("/readyz", health),
                                      ("/metrics", metrics)) if on is not None]  # fmt: skip
            self._send(404, f"not found; this server serves {', '.join(served)}\n".encode(),
                       body=body)  # fmt: skip

    def _send(
        self,
        status: int,
        content: bytes,
        *,
        content_type: str = "text/plain; charset=utf-8",
        body: bool,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(content)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(content)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a probe every few seconds is not worth a line on stderr


def serve(
    port: int,
    address: str = DEFAULT_ADDRESS,
    *,
    health: LoopHealth | None = None,
    metrics: MetricsRenderer | None = None,
) -> HttpServer:
    """Serve ``health``'s probes and/or ``metrics`` on ``address:port`` (port ``0``: a free
    one) from a daemon thread, and log ``metrics.serving`` with the port and the paths.
    Raises ``OSError`` when the address cannot be bound."""
    server = _Server((address, port), health=health, metrics=metrics)
    thread = threading.Thread(
        target=server.serve_forever, name="goatbeat-http", kwargs={"poll_interval": 0.5}
    )
    thread.daemon = True
    thread.start()
    running = HttpServer(server, thread)
    paths = [p for p, on in (("/healthz", health), ("/readyz", health), ("/metrics", metrics))
             if on is not None]  # fmt: skip
    log_event(
        "metrics.serving",
        address=address,
        port=running.port,
        path="/metrics" if metrics is not None else paths[0] if paths else "",
        paths=paths,
    )
    return running
