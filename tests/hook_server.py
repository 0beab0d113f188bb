"""A real HTTP server on loopback that records each POST it receives (path, Authorization
header, JSON body) and answers ``status``: the webhook end of the alert tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar


class Hook(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    status: ClassVar[int] = 204

    def do_POST(self) -> None:  # noqa: N802 - http.server's spelling
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            {"path": self.path, "authorization": self.headers["Authorization"], "body": body}
        )
        self.send_response(type(self).status)
        if 300 <= type(self).status < 400:
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextmanager
def serving() -> Iterator[int]:
    """Serve :class:`Hook` (its records cleared, status 204) on a free port, yielded."""
    Hook.requests = []
    Hook.status = 204
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
