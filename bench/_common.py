"""What every benchmark shares: servers, child processes, bulk schedule rows, result rows.

Each benchmark runs its contenders in fresh child processes (``python -m bench.<module>
--child '<json>'``), one at a time, against the same PostgreSQL and Redis servers, so no
contender inherits another's caches, connections or Django configuration. A child prints one
JSON object as its last line of output.

The servers are the test suite's throwaway ones (``tests/services.py``) unless
``GOATBEAT_BENCH_PG_DSN`` / ``GOATBEAT_BENCH_REDIS_URL`` name servers you already run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
TASK = "bench.noop"
"""The task name every contender sends. No worker runs: messages stay in Redis to be counted."""
QUEUE = "celery"
"""Celery's default queue: on Redis, a list of that name holds the messages."""


# -- result rows ---------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the summary table."""

    section: str
    subject: str
    value: float | None
    unit: str
    reference: str = ""  # what the value is compared with, e.g. "bare send_task"
    ratio: float | None = None  # value / reference value
    target: str = ""
    met: bool | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Section:
    """What one benchmark module returns: summary rows, details (Markdown) and chart data."""

    name: str
    rows: list[Row] = field(default_factory=list)
    details: str = ""
    chart: dict[str, Any] = field(default_factory=dict)


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


# -- servers --------------------------------------------------------------------------------


def _load_services() -> ModuleType:
    # tests/ is not a package users install; load the one module by path.
    path = ROOT / "tests" / "services.py"
    spec = importlib.util.spec_from_file_location("goatbeat_test_services", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Servers:
    """One PostgreSQL and one Redis for the whole run."""

    def __init__(self) -> None:
        self._pg: Any = None
        self._redis: Any = None
        self.pg_dsn = os.environ.get("GOATBEAT_BENCH_PG_DSN", "")
        self.redis_url = os.environ.get("GOATBEAT_BENCH_REDIS_URL", "")
        self._counter = 0

    def start(self) -> Servers:
        services = _load_services()
        if not self.pg_dsn:
            # Production durability: fsync, full_page_writes and synchronous_commit on, as
            # every production database runs (the test suite turns them off for speed).
            self._pg = services.PostgresServer(durable=True).start()
            self.pg_dsn = self._pg.dsn
        if not self.redis_url:
            self._redis = services.RedisServer().start()
            self.redis_url = self._redis.url
        return self

    def stop(self) -> None:
        if self._redis is not None:
            self._redis.stop()
        if self._pg is not None:
            self._pg.stop()

    def new_database(self, label: str) -> str:
        """A fresh empty database; returns its DSN."""
        import psycopg

        self._counter += 1
        name = f"bench_{label}_{os.getpid()}_{self._counter}"
        with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        base, _, _ = self.pg_dsn.rpartition("/")
        return f"{base}/{name}"

    def drop_database(self, dsn: str) -> None:
        import psycopg

        name = dsn.rsplit("/", 1)[1]
        with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- peers ----------------------------------------------------------------------------------

# django-celery-beat pins Django<6.1, so it (and what it needs) goes in without dependency
# resolution, beside the Django 6.1 already installed; its models and scheduler work on 6.1.
_NO_DEPS = {
    "django_celery_beat": "django-celery-beat",
    "timezone_field": "django-timezone-field",
    "crontab": "python-crontab",
    "cron_descriptor": "cron-descriptor",
}
_WITH_DEPS = {"matplotlib": "matplotlib"}


def ensure_peers(install: bool = True) -> list[str]:
    """Install into this interpreter's environment the packages compared against; returns
    the ones still missing (the benchmarks that need them are then skipped)."""

    def missing(names: Mapping[str, str]) -> list[str]:
        return [pkg for mod, pkg in names.items() if importlib.util.find_spec(mod) is None]

    for names, extra in ((_NO_DEPS, ["--no-deps"]), (_WITH_DEPS, [])):
        wanted = missing(names)
        if wanted and install:
            print(f"bench: installing {' '.join(wanted)}", file=sys.stderr)
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", *extra, *wanted], check=False
            )
            importlib.invalidate_caches()
    return missing(_NO_DEPS) + missing(_WITH_DEPS)


# -- child processes ------------------------------------------------------------------------


def compile_bytecode() -> None:
    """Compile goatbeat's (and the bench's) modules to bytecode, as ``pip install`` does for
    an installed package. A checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (this machine's
    environment sets it) would otherwise compile every goatbeat module from source at each
    start of every child, ~60 ms of a scheduler's start that no installed copy pays, while
    celery, kombu and psycopg come from site-packages already compiled."""
    import compileall

    for package in ("goatbeat", "bench"):
        compileall.compile_dir(str(ROOT / package), quiet=1)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def run_child(module: str, args: Mapping[str, Any], *, timeout: float) -> dict[str, Any]:
    """Run ``python -m bench.<module> --child <json>`` and return the JSON it printed last."""
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--child", json.dumps(dict(args))],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-3000:]
        raise RuntimeError(f"bench.{module} {dict(args).get('contender', '')} failed:\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def child_main(handlers: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]]) -> bool:
    """Dispatch ``--child <json>`` to ``handlers[args["contender"]]``; False if not a child."""
    if len(sys.argv) != 3 or sys.argv[1] != "--child":
        return False
    args = json.loads(sys.argv[2])
    result = handlers[args["contender"]](args)
    print(json.dumps(result, default=str), flush=True)
    return True


# -- PostgreSQL helpers ---------------------------------------------------------------------


def migrate(dsn: str) -> None:
    from goatbeat.stores.postgres import PostgresStore

    store = PostgresStore(dsn)
    try:
        store.migrate()
    finally:
        store.close()


HOURLY = {"kind": "interval", "every": 3600.0, "anchor": None}
"""An hourly interval trigger: each schedule due once in a bench's run."""


@contextmanager
def due_database(servers: Servers, label: str, n: int) -> Iterator[str]:
    """A fresh migrated database holding ``n`` hourly schedules (``bench-0`` ...) all due a
    second ago; its DSN, the database dropped afterwards."""
    dsn = servers.new_database(label)
    try:
        migrate(dsn)
        due = datetime.now(UTC) - timedelta(seconds=1)
        insert_schedules(dsn, [f"bench-{i}" for i in range(n)], [HOURLY] * n, [due] * n)
        yield dsn
    finally:
        servers.drop_database(dsn)


def insert_schedules(
    dsn: str,
    names: Sequence[str],
    specs: Sequence[Mapping[str, Any]],
    next_run_at: Sequence[datetime | None],
    *,
    misfire_grace: float = 3600.0,
    enabled: bool = True,
) -> None:
    """Insert schedule rows directly (``source='admin'``, so no code publish disables them):
    100,000 rows through the store's Python API would measure the set-up, not the loop."""
    import psycopg

    assert len(names) == len(specs) == len(next_run_at)
    sql = """
        INSERT INTO goatbeat_schedule (name, source, task, trigger, timezone, args, kwargs,
                                       misfire_grace, enabled, next_run_at)
        SELECT v.name, 'admin', %(task)s, v.trigger::jsonb, coalesce(v.trigger::jsonb ->> 'timezone', 'UTC'),
               jsonb_build_array(v.ord), '{}'::jsonb, %(grace)s, %(enabled)s, v.next_run_at
        FROM unnest(%(names)s::text[], %(triggers)s::text[], %(next)s::timestamptz[])
             WITH ORDINALITY AS v(name, trigger, next_run_at, ord)
    """
    texts = [json.dumps(dict(s)) for s in specs]
    with psycopg.connect(dsn, autocommit=True) as conn:
        step = 20_000
        for i in range(0, len(names), step):
            conn.execute(
                sql,
                {
                    "task": TASK,
                    "grace": misfire_grace,
                    "enabled": enabled,
                    "names": list(names[i : i + step]),
                    "triggers": texts[i : i + step],
                    "next": list(next_run_at[i : i + step]),
                },
            )
        conn.execute("VACUUM ANALYZE goatbeat_schedule")


def db_xacts(admin_dsn: str, dsn: str) -> int:
    """Committed plus rolled-back transactions of ``dsn``'s database so far (pg_stat_database).
    Read from another database so the reading does not count itself."""
    import psycopg

    name = dsn.rsplit("/", 1)[1]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
    return int(row[0]) if row else 0


# -- Redis helpers --------------------------------------------------------------------------


def redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def reset_queue(url: str) -> None:
    redis_client(url).flushdb()


def queue_length(url: str, queue: str = QUEUE) -> int:
    return int(redis_client(url).llen(queue))


def celery_app(broker_url: str) -> Any:
    from celery import Celery

    app = Celery("bench", broker=broker_url, set_as_current=False)
    app.conf.task_serializer = "json"
    app.conf.result_expires = None  # no celery.backend_cleanup entry in beat's schedule
    app.conf.broker_connection_retry_on_startup = True
    return app


def warm_up(app: Any) -> None:
    """Load kombu's transport and open a connection before the clock starts, for everybody."""
    with app.producer_or_acquire() as producer:
        app.send_task("bench.warmup", producer=producer, queue="warmup")
    steady()


def steady() -> None:
    """What a long-running process has done by the time a burst comes, for every contender:
    its start-up objects frozen out of the collector's full passes (``gc.freeze``), as
    ``goatbeat scheduler`` freezes them after its first iteration."""
    import gc

    gc.collect()
    gc.freeze()


# -- processes ------------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def timed(fn: Callable[[], Any]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


# -- goatbeat pieces ------------------------------------------------------------------------


class NoopSubmitter:
    """Accepts every occurrence instantly: what is left is goatbeat's own cost."""

    name: ClassVar[str] = "noop"
    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = True
    supports_exchange: ClassVar[bool] = True
    supports_expires: ClassVar[bool] = True
    supports_headers: ClassVar[bool] = True

    def __init__(self) -> None:
        self.count = 0

    def validate(self, schedule: Any) -> None:
        return None

    def submit(self, occurrence: Any) -> str | None:
        self.count += 1
        return str(occurrence.idempotency_key)

    def close(self) -> None:
        return None


def make_beat() -> Any:
    """The app of the CLI runs (``goatbeat --app bench._common:make_beat``), configured by the
    environment: ``GOATBEAT_BENCH_DB`` and ``GOATBEAT_BENCH_BROKER`` (Celery) or no broker (no-op)."""
    from goatbeat.beat import Beat

    broker = os.environ.get("GOATBEAT_BENCH_BROKER")
    # The benchmarks store their schedules directly (source admin): the allow-list must let
    # their task through, as an operator's ``allowed_tasks`` would.
    settings = {"allowed_tasks": ["bench.*"]}
    if broker:
        return Beat(
            os.environ["GOATBEAT_BENCH_DB"],
            submitter="celery",
            submitter_options={"app": broker},
            settings=settings,
        )
    return Beat(os.environ["GOATBEAT_BENCH_DB"], submitter=NoopSubmitter(), settings=settings)


# -- the machine ----------------------------------------------------------------------------


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def machine(servers: Servers) -> dict[str, str]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kb = int(meminfo.read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    pg_version = redis_version = "unknown"
    durability = "durability unknown"
    try:
        import psycopg

        with psycopg.connect(servers.pg_dsn, autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            pg_version = str(row[0]) if row else "unknown"
            shown = [
                f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
                for name in ("fsync", "synchronous_commit", "full_page_writes")
            ]
            durability = ", ".join(shown)
        redis_version = str(redis_client(servers.redis_url).info("server")["redis_version"])
    except Exception as exc:  # noqa: BLE001 - a description must not stop the run
        pg_version = f"unknown ({exc})"
    return {
        "CPU": f"{cpu}, {os.cpu_count()} logical cores",
        "Memory": mem,
        "OS": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_version()} (goatbeat's modules compiled to bytecode first, "
        "as an installed package has them)",
        "PostgreSQL": f"{pg_version} ({durability}, local TCP)",
        "Redis": f"{redis_version} (no persistence, local TCP)",
        "celery": _version("celery"),
        "kombu": _version("kombu"),
        "django-celery-beat": _version("django-celery-beat"),
        "Django": _version("Django"),
        "psycopg": _version("psycopg"),
    }


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# -- a scheduler process, as operators run it -------------------------------------------------


class SchedulerProcess:
    """``goatbeat --app bench._common:make_beat --log-format json scheduler ...`` in a child
    process; its JSON log lines are read as they come and stamped with our monotonic clock."""

    def __init__(
        self,
        dsn: str,
        *,
        broker: str | None = None,
        scheduler_id: str = "bench",
        options: Sequence[str] = (),
        log_level: str = "INFO",
        app: str = "bench._common:make_beat",
        env: Mapping[str, str] | None = None,
    ) -> None:
        import threading

        extra = dict(env or {})
        env = child_env(GOATBEAT_BENCH_DB=dsn)
        env.pop("GOATBEAT_BENCH_BROKER", None)
        if broker:
            env["GOATBEAT_BENCH_BROKER"] = broker
        env.update(extra)
        self.scheduler_id = scheduler_id
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "goatbeat", "--app", app,
                "--log-format", "json", "--log-level", log_level, "scheduler",
                "--scheduler-id", scheduler_id, *options,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            now = time.monotonic()
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "stderr", "text": line.rstrip()}
            if not isinstance(event, dict):
                continue
            with self._cond:
                self.events.append((now, event))
                self._cond.notify_all()

    def wait_for(
        self, name: str, timeout: float, *, after: float = 0.0, **fields: Any
    ) -> tuple[float, dict[str, Any]]:
        """The first event ``name`` (with ``fields``) seen at or after monotonic ``after``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for stamp, event in self.events:
                    if (
                        stamp >= after
                        and event.get("event") == name
                        and all(event.get(k) == v for k, v in fields.items())
                    ):
                        return stamp, event
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    tail = [e for _, e in self.events[-10:]]
                    raise RuntimeError(f"{self.scheduler_id}: no {name!r} event; last: {tail}")
                self._cond.wait(min(remaining, 0.5))

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def stop(self, timeout: float = 15.0) -> None:
        import signal as _signal

        if self.proc.poll() is None:
            self.proc.send_signal(_signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
