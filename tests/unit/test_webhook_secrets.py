"""#32 item 3: the ``alert_webhook`` URL is a secret (a Slack webhook's token is its path),
and ``user:password@`` in it is HTTP basic authentication.

Before: the whole URL was logged on every ``alert.sent`` and ``alert.failed`` (the handler's
name), and a URL with ``user:pw@`` passed validation, never delivered (urllib took the
credentials for the host) and logged its password at ERROR. Now the logs, the errors and the
settings' messages show scheme, host and port only, and the credentials are sent as an
``Authorization: Basic`` header to a real HTTP server on loopback. The tests read the log
output itself: the goatbeat logger through the CLI's text formatter and the JSON formatter.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from goatbeat.beat import alerter_for
from goatbeat.cli.logs import TextFormatter
from goatbeat.core.alerts import Alert, redact_webhook, webhook_target
from goatbeat.core.config import Settings, parse_settings
from goatbeat.core.errors import ConfigError
from goatbeat.core.model import Miss
from goatbeat.core.observability import JsonFormatter
from tests.hook_server import Hook, serving

TOKEN = "T0SECRET/B0SECRET/xoxb-s3cr3t-t0ken"
PASSWORD = "pw-s3cr3t"


@pytest.fixture
def port() -> Iterator[int]:
    with serving() as port:
        yield port


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """What the goatbeat logger writes, as the CLI's text and as JSON, one stream."""
    out = io.StringIO()
    handlers = [logging.StreamHandler(out), logging.StreamHandler(out)]
    handlers[0].setFormatter(TextFormatter())
    handlers[1].setFormatter(JsonFormatter())
    log = logging.getLogger("goatbeat")
    level = log.level
    log.setLevel(logging.DEBUG)
    for handler in handlers:
        log.addHandler(handler)
    try:
        yield out
    finally:
        for handler in handlers:
            log.removeHandler(handler)
        log.setLevel(level)


def _alert() -> Alert:
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    return Alert.missed(
        Miss(schedule_id=1, schedule_name="nightly", count=2), at=at, scheduler_id="s1"
    )


def _deliver(url: str) -> None:
    alerter = alerter_for(parse_settings({"alert_webhook": url}))
    assert alerter is not None
    alerter.emit(_alert())
    alerter.close()


def _no_secret_in(text: str) -> None:
    for secret in ("T0SECRET", "B0SECRET", "xoxb", PASSWORD, "/services"):
        assert secret not in text, text


def test_a_delivered_alert_logs_no_part_of_the_secret_path(port: int, logs: io.StringIO) -> None:
    url = f"http://127.0.0.1:{port}/services/{TOKEN}"
    _deliver(url)
    assert [r["path"] for r in Hook.requests] == [f"/services/{TOKEN}"]
    assert Hook.requests[0]["authorization"] is None
    output = logs.getvalue()
    assert output.count("alert.sent") == 2  # one text line, one JSON line
    assert f"webhook('http://127.0.0.1:{port}/***')" in output
    _no_secret_in(output)


def test_credentials_in_the_url_are_sent_as_basic_auth_and_never_logged(
    port: int, logs: io.StringIO
) -> None:
    url = f"http://alerts:{PASSWORD}@127.0.0.1:{port}/services/{TOKEN}"
    _deliver(url)
    (request,) = Hook.requests
    assert request["path"] == f"/services/{TOKEN}" and request["body"]["schedule"] == "nightly"
    expected = base64.b64encode(f"alerts:{PASSWORD}".encode()).decode()
    assert request["authorization"] == f"Basic {expected}"
    output = logs.getvalue()
    assert "alert.sent" in output and "alert.failed" not in output
    assert f"webhook('http://***@127.0.0.1:{port}/***')" in output
    _no_secret_in(output)


def test_percent_encoded_credentials_are_decoded_for_basic_auth(port: int) -> None:
    _deliver(f"http://me%40corp:p%3Ass%2Fword@127.0.0.1:{port}/hook")
    (request,) = Hook.requests
    assert request["authorization"] == "Basic " + base64.b64encode(b"me@corp:p:ss/word").decode()


@pytest.mark.parametrize("status", [401, 500, 302])
def test_a_failed_delivery_logs_the_status_and_no_secret(
    port: int, logs: io.StringIO, status: int
) -> None:
    Hook.status = status
    _deliver(f"http://alerts:{PASSWORD}@127.0.0.1:{port}/services/{TOKEN}")
    assert len(Hook.requests) == 1  # a redirect is not followed (nor the credentials)
    output = logs.getvalue()
    assert output.count("alert.failed") == 2 and "alert.sent" not in output
    assert f"http://***@127.0.0.1:{port}/*** answered {status}" in output
    assert ("a redirect: set alert_webhook to its target" in output) == (status == 302)
    _no_secret_in(output)
    (failed,) = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert (failed["event"], failed["level"]) == ("alert.failed", "ERROR")


def test_an_unreachable_webhook_logs_the_error_and_no_secret(logs: io.StringIO) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    _deliver(f"http://alerts:{PASSWORD}@127.0.0.1:{closed}/services/{TOKEN}?token=xoxb-q")
    output = logs.getvalue()
    assert output.count("alert.failed") == 2
    assert "Connection refused" in output or "URLError" in output, output
    _no_secret_in(output)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/XXXX", "https://hooks.slack.com/***"),
        ("https://u:pw@example.com:8443/x?token=t", "https://***@example.com:8443/***"),
        ("https://example.com", "https://example.com"),
        ("https://example.com/", "https://example.com/"),
        ("https://example.com/?k=v", "https://example.com/***"),
        ("http://[::1]:9000/hook", "http://[::1]:9000/***"),
        ("http://example.com:99999/x", "<an unreadable URL>"),
    ],
)
def test_redact_webhook_keeps_scheme_host_and_port_only(url: str, shown: str) -> None:
    assert redact_webhook(url) == shown


def test_webhook_target_moves_the_credentials_to_a_header() -> None:
    assert webhook_target("https://example.com/x") == ("https://example.com/x", None)
    target, header = webhook_target("https://u:pw@example.com:8443/x?y=1")
    assert target == "https://example.com:8443/x?y=1"
    assert header == "Basic " + base64.b64encode(b"u:pw").decode()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (f"ftp://alerts:{PASSWORD}@example.com/services/{TOKEN}", "not an http:// or https://"),
        (f"https://a%3Ab:{PASSWORD}@example.com/services/{TOKEN}", "user name holds a ':'"),
        (f"https://alerts:{PASSWORD}@example.com:99999/services/{TOKEN}", "cannot be used"),
        (f"https://alerts:{PASSWORD}@/services/{TOKEN}", "names no host"),
        (f"https://example.com/services/{TOKEN} x", "is not a URL"),
    ],
)
def test_a_webhook_url_that_cannot_be_used_is_refused_at_start_naming_the_key_not_the_secret(
    value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings({"alert_webhook": value})
    [line] = info.value.problems
    assert line.startswith("alert_webhook: ") and problem in line, line
    _no_secret_in(str(info.value))


def test_the_settings_repr_leaves_the_webhook_out() -> None:
    settings = parse_settings({"alert_webhook": f"https://hooks.slack.com/services/{TOKEN}"})
    assert settings.alert_webhook == f"https://hooks.slack.com/services/{TOKEN}"
    _no_secret_in(repr(settings))
    assert "alert_webhook" not in repr(Settings())
