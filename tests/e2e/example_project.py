"""The example Django + Celery project (examples/celery_project) run for real: its commands,
celery beat (stock, django-celery-beat's, the drop-in), ``manage.py goatbeat scheduler``, a
Celery worker, and the runs its task records in Redis. Shared by the e2e tests that migrate it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "examples" / "celery_project"
DEADLINE = 60.0  # seconds any one wait may take before the test fails, naming what it awaited


class Project:
    def __init__(self, pg_dsn: str, redis_url: str, tmp: Path, **env: str) -> None:
        self.tmp = tmp
        self.dsn = pg_dsn
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(PROJECT), str(ROOT)]),
            "DJANGO_SETTINGS_MODULE": "proj.settings",
            "EXAMPLE_DATABASE_URL": pg_dsn,
            "EXAMPLE_REDIS_URL": redis_url,
            "EXAMPLE_LEASE_TTL": "4s",
            "EXAMPLE_LEASE_RENEW": "1s",
            "PYTHONWARNINGS": "ignore",
            "TZ": "UTC",
            **env,
        }
        self.env.pop("GOATBEAT_APP", None)
        self.env.pop("GOATBEAT_DATABASE", None)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.redis_url = redis_url

    def run(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, *args],
            cwd=PROJECT,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=PROJECT,
            env={**self.env, **env},
            stdout=log,
            stderr=log,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM, as an operator stops a service: beat syncs its last runs, goatbeat
        releases its lease."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def worker(self) -> subprocess.Popen[bytes]:
        return self.start(
            "worker", "-m", "celery", "-A", "proj", "worker", "-P", "solo", "--loglevel", "WARNING"
        )

    def beat(self, name: str, *extra: str, **env: str) -> subprocess.Popen[bytes]:
        return self.start(
            name,
            "-m",
            "celery",
            "-A",
            "proj",
            "beat",
            "--loglevel",
            "INFO",
            "--max-interval",
            "1",
            "-s",
            str(self.tmp / "celerybeat-schedule"),
            *extra,
            **env,
        )

    def runs(self) -> list[dict[str, Any]]:
        """Every run the worker recorded: ``{"label", "id", "at"}``, in order."""
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            raw = client.lrange("example:runs", 0, -1)
        finally:
            client.close()
        return [json.loads(item) for item in raw]

    def count(self, label: str, since: float = 0.0) -> int:
        return sum(1 for r in self.runs() if r["label"] == label and r["at"] >= since)

    def wait_for(self, what: str, done: Callable[[], bool], *watch: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not done():
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {name}\n{self.log(name)[-3000:]}" for name in watch)
                raise AssertionError(f"no {what} after {DEADLINE}s\n{logs}")
            time.sleep(0.2)

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def lease_holder_pid(self) -> int | None:
        """The pid in the lease holder's default id (``host:pid:random``), if held."""
        rows = self.sql("SELECT holder FROM goatbeat_lease WHERE expires_at > now()")
        if not rows:
            return None
        return int(str(rows[0][0]).split(":")[1])

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""
