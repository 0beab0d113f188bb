"""Dispatch to Celery over RabbitMQ: 10,000 due at once from a real ``goatbeat scheduler``
process, against a bare kombu ``Producer.publish`` loop sending the same messages.

Both contenders publish to the ``celery`` queue of one throwaway RabbitMQ node (Debian's
``rabbitmq-server``, tests/services.py), emptied before each; each is timed by the same
observer, which asks the broker for the queue's depth (a passive ``queue.declare``) every few
milliseconds, from the first message that lands to the 10,000th:

- ``kombu loop``: a child process builds the 10,000 messages first (Celery's own
  ``create_task_message``, ids and headers as goatbeat sends them, not timed) and then publishes
  them with one ``Producer.publish`` each on one producer and channel, declaring the queue once.
  The limit of publishing through kombu.
- ``goatbeat``: ``goatbeat --app bench.code_app:make_beat scheduler`` with 10,000 interval
  schedules due (as the Redis end-to-end run in bench_startup.py): lease, claims, messages
  built and published by the Celery submitter, outcomes recorded in PostgreSQL.

Each pair runs without and with publisher confirms (``confirm_publish``: every publish waits
for the broker's ack), alternating loop and scheduler, ``repeats`` times; the median ratio is
the figure.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench._common import (
    QUEUE,
    ROOT,
    TASK,
    Row,
    SchedulerProcess,
    Section,
    Servers,
    _load_services,
    child_env,
    child_main,
    fmt,
    migrate,
    run_child,
)

N = 10_000
POLL = 0.005
TARGET = 0.90


class _Observer:
    """One connection asking the queue's depth until ``n`` messages are there."""

    def __init__(self, url: str) -> None:
        import kombu

        self.conn = kombu.Connection(url)
        self.channel = self.conn.channel()

    def depth(self) -> int:
        try:
            _, count, _ = self.channel.queue_declare(QUEUE, passive=True)
        except self.conn.channel_errors:
            self.channel = self.conn.channel()
            return 0
        return int(count)

    def wait(self, n: int, alive: Any, timeout: float = 300) -> tuple[float, float]:
        first = last = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive():
            landed = self.depth()
            now = time.monotonic()
            if landed and first is None:
                first = now
            if landed >= n:
                last = now
                break
            time.sleep(POLL)
        self.conn.release()
        if first is None or last is None:
            raise RuntimeError(f"only {self.depth()} of {n:,} messages landed")
        return first, last


def _purge(url: str) -> None:
    import kombu

    with kombu.Connection(url) as conn:
        try:
            conn.default_channel.queue_purge(QUEUE)
        except conn.channel_errors:
            pass


def child_kombu_loop(args: dict[str, Any]) -> dict[str, Any]:
    from kombu import Queue

    from bench._common import celery_app

    app = celery_app(args["url"])
    if args["confirm"]:
        app.conf.broker_transport_options = {"confirm_publish": True}
    messages = []
    for i in range(args["n"]):
        key = f"code-{i}:2026-01-01T00:00:00Z"
        headers, properties, body, _ = app.amqp.create_task_message(
            key, TASK, [i], {}, reply_to=app.thread_oid
        )
        headers.update(
            celery_beat_task=True,
            goatbeat_idempotency_key=key,
            goatbeat_scheduled_at="2026-01-01T00:00:00Z",
        )
        messages.append((headers, properties, body))
    queue = Queue(QUEUE)
    with app.connection_for_write() as conn:
        producer = conn.Producer(serializer="json")
        producer.publish({}, routing_key="warmup", exchange="", declare=[Queue("warmup")])
        producer.maybe_declare(queue)
        began = time.monotonic()
        for headers, properties, body in messages:
            producer.publish(
                body, exchange="", routing_key=QUEUE, headers=headers, delivery_mode=2,
                **properties,
            )  # fmt: skip
        ended = time.monotonic()
    return {"publish_seconds": ended - began}


def _loop(url: str, confirm: bool) -> float:
    _purge(url)
    observer = _Observer(url)
    import threading

    result: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: result.update(
            run_child(
                "bench_rabbitmq",
                {"contender": "kombu_loop", "url": url, "n": N, "confirm": confirm},
                timeout=600,
            )
        )
    )
    thread.start()
    first, last = observer.wait(N, lambda: thread.is_alive() or bool(result))
    thread.join()
    return (N - 1) / (last - first)


def _goatbeat(servers: Servers, url: str, confirm: bool) -> float:
    import psycopg

    dsn = servers.new_database("rabbitmq")
    migrate(dsn)
    env = {"GOATBEAT_BENCH_SCHEDULES": str(N), "GOATBEAT_BENCH_DUE": str(N)}
    subprocess.run(
        [sys.executable, "-m", "goatbeat", "--app", "bench.code_app:make_beat", "publish"],
        cwd=ROOT, env=child_env(GOATBEAT_BENCH_DB=dsn, **env), check=True, capture_output=True,
    )  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE goatbeat_schedule SET next_run_at = date_trunc('minute', now())")
        conn.execute("VACUUM ANALYZE goatbeat_schedule")
    _purge(url)
    if confirm:
        env["GOATBEAT_BENCH_CONFIRM"] = "1"
    observer = _Observer(url)
    proc = SchedulerProcess(
        dsn, broker=url, app="bench.code_app:make_beat", scheduler_id="bench-amqp", env=env
    )
    try:
        first, last = observer.wait(N, lambda: proc.proc.poll() is None)
    finally:
        proc.stop()
        servers.drop_database(dsn)
    return (N - 1) / (last - first)


def run(servers: Servers, *, quick: bool) -> Section:
    # GOATBEAT_BENCH_RABBITMQ_PAIRS: more pairs for a figure that must hold on a noisy machine.
    repeats = int(os.environ.get("GOATBEAT_BENCH_RABBITMQ_PAIRS") or (1 if quick else 3))
    section = Section("Dispatch to Celery over RabbitMQ")
    rabbit = _load_services().RabbitMQServer().start()
    url = rabbit.url
    figures: dict[bool, dict[str, list[float]]] = {}
    try:
        for confirm in (False, True):
            runs: dict[str, list[float]] = {"loop": [], "goatbeat": []}
            for pair in range(repeats):
                # ABBA: a load that drifts during the run favours neither side.
                if pair % 2:
                    runs["goatbeat"].append(_goatbeat(servers, url, confirm))
                    runs["loop"].append(_loop(url, confirm))
                else:
                    runs["loop"].append(_loop(url, confirm))
                    runs["goatbeat"].append(_goatbeat(servers, url, confirm))
                print(
                    f"  rabbitmq confirm={confirm}: loop {runs['loop'][-1]:.0f}/s, "
                    f"goatbeat {runs['goatbeat'][-1]:.0f}/s",
                    file=sys.stderr,
                )
            figures[confirm] = runs
    finally:
        rabbit.stop()
    lines = [
        "| 10,000 due -> RabbitMQ | kombu Producer.publish loop | goatbeat scheduler process "
        "| goatbeat / loop |",
        "|---|---:|---:|---:|",
    ]
    for confirm, runs in figures.items():
        label = "with confirm_publish" if confirm else "no confirms"
        loop = statistics.median(runs["loop"])
        ours = statistics.median(runs["goatbeat"])
        ratios = [g / x for g, x in zip(runs["goatbeat"], runs["loop"], strict=True)]
        ratio = statistics.median(ratios)
        section.rows += [
            Row(section.name, f"kombu Producer.publish loop, {N:,} due, {label}", loop, "occ/s"),
            Row(section.name, f"goatbeat scheduler process, {N:,} due, {label}", ours, "occ/s",
                reference="kombu Producer.publish loop", ratio=ratio,
                target=f">= {TARGET:.0%} of the loop", met=ratio >= TARGET),
        ]  # fmt: skip
        lines.append(
            f"| {label} (occ/s) | {fmt(loop)} (runs: {', '.join(fmt(x) for x in runs['loop'])})"
            f" | {fmt(ours)} (runs: {', '.join(fmt(x) for x in runs['goatbeat'])}) | "
            f"{ratio:.0%} (pairs: {', '.join(f'{r:.0%}' for r in ratios)}) |"
        )
    section.details = "\n".join(lines) + "\n"
    return section


HANDLERS = {"kombu_loop": child_kombu_loop}

if __name__ == "__main__":
    if not child_main(HANDLERS):
        sys.exit("usage: python -m bench (this module runs as its child)")
