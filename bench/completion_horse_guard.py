"""A guarded RQ work horse's own cost (#30 item 6): the wall and CPU time of one guarded no-op
in a forked child, its key taken on a new connection of its own (``direct``: what every RQ
work horse did before) or through the worker's reporter process (``relay``).

    python -m bench.completion_horse_guard [--forks 200] [--runs 2]

One parent process, as RQ's worker: both reporter processes started (``begins=False`` and
``begins=True``), the ledger's modules and statements loaded, the heap frozen; then children
forked one after the other in ABBA order (direct, relay, relay, direct, ...), each running
``Guard(PostgresLedger(url)).run(key, no-op)`` with a new key and exiting with ``os._exit``
as a work horse does. "wall" is ``Guard.run`` timed inside the child (taking the key, the
body, handing the success); "CPU" is the child's whole CPU time (``RUSAGE_CHILDREN``: the
fork and exit included, PostgreSQL's and the reporter's not). PostgreSQL is durable (fsync
and synchronous commit on). Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import time

from bench._common import Servers
from goatbeat.completion.relay import RelayedReporter
from goatbeat.core import handoff
from goatbeat.core.model import Schedule
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.idempotency import Guard
from goatbeat.idempotency.postgres import PostgresLedger
from goatbeat.stores import open_store, schema

MODES = ("direct", "relay")


def _child(url: str, key: str, reporters: dict[str, RelayedReporter], mode: str, out: int) -> None:
    direct, relayed = reporters["direct"].relay, reporters["relay"].relay
    assert direct is not None and relayed is not None
    if mode == "relay":
        handoff.offer(url, relayed.send)
    else:  # the key on this child's own connection; the success to its own reporter
        handoff.withdraw_begin(url, relayed.begin)
        handoff.offer(url, direct.send)
    guard = Guard(PostgresLedger(url))
    began = time.perf_counter()
    guard.run(key, lambda: None)
    os.write(out, repr(time.perf_counter() - began).encode())
    os._exit(0)


def measure(url: str, forks: int) -> dict[str, list[tuple[float, float]]]:
    store = open_store(url)
    try:
        store.migrate()
        store.publish([Schedule(name="job", task="t.job", trigger=IntervalTrigger("1h"))])
        keys = [store.request_run("job").idempotency_key for _ in range(forks)]
    finally:
        store.close()
    schema.queries("postgres")
    reporters = {"direct": RelayedReporter(url), "relay": RelayedReporter(url)}
    reporters["direct"].start_relay(begins=False)
    reporters["relay"].start_relay(begins=True)
    gc.collect()
    gc.freeze()
    found: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    try:
        for i, key in enumerate(keys):
            mode = ("direct", "relay", "relay", "direct")[i % 4]
            read, write = os.pipe()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _child(url, key, reporters, mode, write)
            os.close(write)
            os.waitpid(pid, 0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall = float(os.read(read, 100))
            os.close(read)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            found[mode].append((wall * 1000, cpu * 1000))
    finally:
        for reporter in reporters.values():
            if reporter.relay is not None:
                reporter.relay.close()
                reporter.relay.process.wait(30)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--forks", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    servers = Servers().start()
    try:
        for run in range(args.runs):
            url = servers.new_database("horse_guard")
            found = measure(url, args.forks)
            servers.drop_database(url)
            for mode in MODES:
                walls = sorted(wall for wall, _ in found[mode])
                cpus = [cpu for _, cpu in found[mode]]
                print(
                    f"run {run + 1} {mode}: Guard.run wall median {statistics.median(walls):.2f}"
                    f" ms (p90 {walls[int(len(walls) * 0.9)]:.2f}), child CPU median "
                    f"{statistics.median(cpus):.2f} ms, mean {statistics.mean(cpus):.2f} ms",
                    flush=True,
                )
            print(f"load average: {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
