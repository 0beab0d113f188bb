"""``--listen-database`` / ``--pooled`` (and their environment variables) on the goatbeat
command: validated, refused where they mean nothing, and honoured by the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from goatbeat.cli import cli
from goatbeat.cli.context import CliContext


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_a_listen_database_that_is_not_postgresql_is_refused_naming_it(tmp_path: Path) -> None:
    db = f"postgresql://postgres@127.0.0.1:1/{tmp_path.name}"
    done = run("--database", db, "--listen-database", "mysql://h/db", "schedule", "list")
    assert done.exit_code == 2
    assert "listen_database" in done.output and "'mysql://h/db'" in done.output


def test_listen_database_on_a_sqlite_database_is_refused(tmp_path: Path) -> None:
    done = run(
        "--database",
        f"sqlite:///{tmp_path / 'x.db'}",
        "schedule",
        "list",
        env={"GOATBEAT_LISTEN_DATABASE": "postgresql://h/db"},
    )
    assert done.exit_code != 0
    assert "listen_database" in done.output and "PostgreSQL" in done.output


@pytest.mark.parametrize(
    ("args", "env", "pooled", "listen"),
    [
        ([], {}, False, None),
        (["--pooled"], {}, True, None),
        ([], {"GOATBEAT_POOLED": "1"}, True, None),
        (["--listen-database", "postgresql://d/x"], {}, True, "postgresql://d/x"),
        ([], {"GOATBEAT_LISTEN_DATABASE": "postgresql://d/x"}, True, "postgresql://d/x"),
    ],
)
def test_the_options_reach_the_postgresql_store(
    args: list[str], env: dict[str, str], pooled: bool, listen: str | None, monkeypatch: Any
) -> None:
    from goatbeat.stores.postgres import PostgresStore

    for name in ("GOATBEAT_POOLED", "GOATBEAT_LISTEN_DATABASE", "GOATBEAT_APP"):
        monkeypatch.delenv(name, raising=False)
    seen: dict[str, Any] = {}

    @cli.command("probe-store")
    def probe() -> None:
        import click

        obj = click.get_current_context().find_object(CliContext)
        assert obj is not None
        store = obj.store()
        assert isinstance(store, PostgresStore)
        seen["pooled"] = store.pooled
        seen["listen"] = getattr(store.listen_provider, "dsn", None)
        store.close()

    try:
        done = run("--database", "postgresql://u@127.0.0.1:1/x", *args, "probe-store", env=env)
    finally:
        cli.commands.pop("probe-store", None)
    assert done.exit_code == 0, done.output
    assert seen == {"pooled": pooled, "listen": listen}


@pytest.mark.postgres
@pytest.mark.pgbouncer
@pytest.mark.slow
def test_the_goatbeat_command_works_through_pgbouncer(
    pg_dsn: str, pgbouncer_server: Any, tmp_path: Path
) -> None:
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    pooled = pgbouncer_server.pooled(pg_dsn)
    env = {**os.environ, "PYTHONPATH": str(root)}
    for name in ("GOATBEAT_APP", "GOATBEAT_LISTEN_DATABASE", "GOATBEAT_POOLED", "GB_RECORD_FILE"):
        env.pop(name, None)

    def goatbeat(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "goatbeat", "--app", "tests.integration.test_multi_scheduler:beat",
             "--database", pooled, "--pooled", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    goatbeat("migrate")
    goatbeat("publish")
    listed = json.loads(goatbeat("schedule", "list", "--json"))
    assert {row["name"] for row in listed} == {"tick-0", "tick-1", "tick-2"}
    goatbeat("schedule", "pause", "tick-1", "--note", "through PgBouncer")
    goatbeat("schedule", "run", "tick-0")
    once = json.loads(goatbeat("scheduler", "--once", "--no-publish").strip().splitlines()[-1])
    assert once["leader"] is True and once["submitted"] >= 1, once
    status = json.loads(goatbeat("status", "--json"))
    assert status, status
