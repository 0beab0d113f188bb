"""The Django side of the suite: a real PostgreSQL, the test project, pytest-django.

pytest-django needs the database settings before Django sets up, and the throwaway server's
port is known only once it runs. So this conftest starts the server (unless
``GOATBEAT_TEST_PG_DSN`` names one), exports its DSN for the session fixture of
``tests/conftest.py`` to reuse, and configures Django with ``settings.configure()`` from the
test project's settings module. ``DJANGO_SETTINGS_MODULE`` stays unset, so the non-Django tests
in the same run (the CLI's "no app" cases, say) see no Django project.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from tests.services import PostgresServer, RedisServer

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_MODULE = "tests.django.project.settings"

_server: PostgresServer | None = None
_redis: RedisServer | None = None


def _configure_django() -> None:
    global _server, _redis
    import django
    from django.conf import settings

    if settings.configured:
        return
    if not os.environ.get("GOATBEAT_TEST_PG_DSN"):
        _server = PostgresServer().start()
        os.environ["GOATBEAT_TEST_PG_DSN"] = _server.dsn
    if django.VERSION < (6, 0) and not os.environ.get("GOATBEAT_TEST_REDIS_URL"):
        # Django 5.2 has no Django Tasks: the project's tasks go to RQ (settings.py).
        _redis = RedisServer().start()
        os.environ["GOATBEAT_TEST_REDIS_URL"] = _redis.url
    import importlib

    module = importlib.import_module(SETTINGS_MODULE)
    settings.configure(**{k: v for k, v in vars(module).items() if k.isupper()})
    django.setup()


_configure_django()


def pytest_configure(config: pytest.Config) -> None:
    # When this conftest loads late (a whole-suite run), pytest-django's own configure has
    # already run without Django; finish its setup (database access blocker) now.
    try:
        from pytest_django.plugin import blocking_manager_key
    except ImportError:  # pragma: no cover - other pytest-django versions
        return
    if blocking_manager_key in config.stash:
        config.stash[blocking_manager_key].block()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import django

    if django.VERSION >= (6, 0):
        return
    skip = pytest.mark.skip(
        reason=f"needs Django Tasks (Django 6.0+); Django {django.get_version()}"
    )
    for item in items:
        if "django_tasks" in item.keywords:
            item.add_marker(skip)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _server is not None:
        _server.stop()
    if _redis is not None:
        _redis.stop()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database, and before it drops it: this process's connections
    closed, and any other session on it ended (a thread's connection a test left open).
    Otherwise the DROP DATABASE fails ("being accessed by other users"), which was seen when
    the Django tests ran on a pytest-xdist worker that finished soon after them."""
    yield
    import psycopg
    from django.db import connections

    with django_db_blocker.unblock():
        name = connections["default"].settings_dict["NAME"]
        connections.close_all()
    with psycopg.connect(os.environ["GOATBEAT_TEST_PG_DSN"], autocommit=True) as conn:
        ended = conn.execute(
            "SELECT pid, application_name, state, left(query, 80) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
        for pid, *_ in ended:
            # Waits (up to 5 s) until the backend has gone, so the drop that follows can run.
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    if ended:
        print(f"\nended {len(ended)} session(s) left on {name}: {ended}")


@pytest.fixture
def store(transactional_db: None) -> Iterator[Any]:
    """The project's store (PostgresStore over Django's connection), on a clean database."""
    from django.db import connection

    from goatbeat.django.registry import get_store, reset_store

    # Django's flush empties the tables of its models; goatbeat_publication has none (the
    # order of publications, schema 8), and an earlier test's publications would make this
    # test's code look older.
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE goatbeat_publication")
    reset_store()
    yield get_store()
    reset_store()


@pytest.fixture
def registry() -> Any:
    from goatbeat.django.registry import get_registry

    return get_registry()


def manage(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the test project's manage.py against the current test database."""
    from django.db import connection

    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
        "GOATBEAT_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "tests/django/project/manage.py"), *args],
        env=full_env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# -- the admin in headless Chromium (test_admin_browser.py, test_admin_reads_well.py) ----------

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def page(live_server: Any, store: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; the test's own database calls
    # are synchronous all the same.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    call_command("goatbeat", "schedule", "list", stdout=StringIO(), stderr=StringIO())
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    session = client.cookies["sessionid"].value
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 900})
            context.add_cookies([{"name": "sessionid", "value": session, "url": live_server.url}])
            tab = context.new_page()
            tab.set_default_timeout(15_000)
            yield tab
        finally:
            browser.close()
            _close_playwright_context_connections()


def _close_playwright_context_connections() -> None:
    """Django keeps connections per context (asgiref Local), and code run while Playwright's
    sync API is active gets a context of its own: close what it opened, or the test database
    cannot be flushed and dropped."""
    from django.db import connections

    from goatbeat.django.registry import reset_store

    connections.close_all()
    reset_store()
