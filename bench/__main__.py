"""``python -m bench``: run every benchmark, print a Markdown table, write the docs page.

    python -m bench                 # full run (under 30 min); writes docs/benchmarks.md + .png
    python -m bench --quick         # a reduced run in a few minutes; prints only
    python -m bench --only dispatch --only claim
    python -m bench --profile       # add pyinstrument profiles of goatbeat's hot paths

The peers compared against (django-celery-beat and the packages it needs, matplotlib for the
chart) are installed into this interpreter's environment when missing (``--no-install`` to
skip). PostgreSQL and Redis are started on free loopback ports and stopped at the end
(``GOATBEAT_BENCH_PG_DSN`` / ``GOATBEAT_BENCH_REDIS_URL`` reuse running servers).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    bench_claim,
    bench_dispatch,
    bench_failover,
    bench_lateness,
    bench_rabbitmq,
    bench_scale,
    bench_shards,
    bench_startup,
)
from bench._common import (
    ROOT,
    Row,
    Section,
    Servers,
    compile_bytecode,
    ensure_peers,
    fmt,
    machine,
)

NAMES = (
    "dispatch",
    "startup",
    "claim",
    "scale",
    "lateness",
    "failover",
    "cron",
    "shards",
    "rabbitmq",
)
DOCS = ROOT / "docs"


# -- cron: the other helper's script, called as a program ----------------------------------


def run_cron(quick: bool) -> Section:
    script = ROOT / "bench" / "bench_cron.py"
    section = Section("Cron next-occurrence vs croniter and cronsim")
    if not script.exists():
        section.details = "bench/bench_cron.py is missing: not measured.\n"
        return section
    calls, repeat = ("500", "1") if quick else ("3000", "3")
    proc = subprocess.run(
        [sys.executable, str(script), "--calls", calls, "--repeat", repeat],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        section.details = f"bench_cron.py failed:\n\n```\n{proc.stderr[-2000:]}\n```\n"
        return section
    section.details = proc.stdout.strip() + "\n"
    for name, value in re.findall(r"speedup vs (\w+): ([\d.]+)x", proc.stdout):
        speedup = float(value)
        section.rows.append(
            Row(
                section.name,
                f"goatbeat vs {name} (geometric mean)",
                speedup,
                "x faster",
                target=">= 3x",
                met=speedup >= 3.0,
            )
        )
        section.chart[name] = speedup
    return section


# -- output ---------------------------------------------------------------------------------

# Issue #18's table: each goal, the summary row that measures it (section key, subject prefix),
# and whether the ratio or the value is the figure.
GOALS: list[tuple[str, str, str, str, str]] = [
    ("10,000 due at once -> Redis, from a real `goatbeat scheduler` process",
     "startup", "goatbeat scheduler process, 10,000 due", "ratio", ">= 90 % of the batched loop"),
    ("10,000 due at once -> Redis, in the harness (`Scheduler.run_once()`)",
     "dispatch", "goatbeat, 10,000 due, vs the batched loop", "ratio",
     ">= 90 % of the batched loop"),
    ("first message after exec, 10,000 code schedules",
     "startup", "exec -> first message", "value", "< 0.5 s"),
    ("100,000 code schedules: ready (restart, nothing changed)",
     "startup", "restart, nothing changed", "value", "< 2 s"),
    ("same, first start (publishes all)", "startup", "first start", "value", "< 5 s"),
    ("same, RSS", "startup", "resident memory after start", "value", "< 120 MiB"),
    ("claim+record, no-op submitter, vs bare SQL loop",
     "claim", "goatbeat Scheduler", "ratio", ">= 85 %"),
    ("lateness p99, 10,000 cron spread over the minute",
     "lateness", "lateness p99", "value", "< 50 ms"),
]  # fmt: skip

NOTES = """\
- PostgreSQL runs with production durability for every figure on this page (fsync,
  full_page_writes and synchronous_commit on; the machine table shows the server's own
  settings). Pages generated before issue #18 ran it with fsync and synchronous_commit off.
- Publication. PostgreSQL now confirms unchanged declarations in the database: one statement
  per 10,000 declarations carries them as JSON and returns only the names stored exactly so
  (each looked up by the unique index); only the others are read in full and compared field by
  field in Python. New rows go in with one COPY. Tried first: the comparison as a join on
  `unnest()` of text arrays, which psycopg escapes element by element (1 s of the restart at
  100k) and which the planner turned into a hash of the whole table per statement when the
  statistics were stale after the bulk insert (5 s); a `jsonb_build_object` of each stored row
  compared with the declaration, twice the server time of comparing column by column.
- Declarations. Beat builds one trigger per distinct cron or interval (a cron parsed once),
  parses the repeated duration texts once, and skips the JSON dump/load round trip for values
  made only of plain JSON types; the store re-checks a trigger's spec once per trigger object.
  Each declaration is a `Schedule` built by a fast constructor (`Schedule._declared`) and
  validated once by the store, with the checks schedules share made once per combination.
  The in-database comparison (about 0.6 s of server time at 100,000) is pipelined: the
  database compares one chunk while the next is validated. Before the fast constructor and
  the lazy CLI imports, three full runs measured the restart at 3.7-4.5 s (16.4 s in the
  issue; celery beat 9.1-9.6 s), the first start 4.9-5.6 s and the first message after exec
  0.94-1.43 s; the tables above have this run's figures.
- Memory. The long-running `goatbeat scheduler` lets go of its declarations after publishing
  them (`Beat.release_declarations`), keeping their names and tasks.
- Claim. The claim checks the definition columns schedules share (trigger, task, routing,
  policies) once per distinct combination when it decodes rows it has not seen, records an
  all-success batch with a leaner statement and sends arrays of usual values empty. Then
  (this session): (1) a claim that follows a full batch writes that batch's outcomes in its
  own transaction (`claim_due(record=...)`), sent in psycopg pipeline mode right behind the
  due read, so the server writes them while the client decodes and plans the rows (a
  prototype on 10,000 due: 11,000 -> 14,600 claims/s); (2) schema 7 gives goatbeat_schedule
  `fillfactor = 50`, so the bookkeeping's second write of each row (last_status) is a HOT
  update instead of four index insertions (the record statement 12.5 -> 9.9 ms a batch of
  500; store loop 12,600 -> 14,000 claims/s, bare loop unchanged at ~19,000, 3 paired runs
  each); (3) `Schedule._trusted` sets slots through their own setters (2.7 -> 1.8 us).
  `--only claim` before the full run: 93 % of the bare loop (14,514 vs 15,643). Left: the
  client's Python per row (~8 us decoding, ~3 us planning) is now longer than the overlapped
  write; the select returns 44 columns where the bare loop reads 4.
- Dispatch. A batch's outcomes are recorded while the next batch is sent, not before. The
  Celery submitter now publishes through a direct publisher: the app's own
  `amqp.create_task_message` and `amqp.send_task_message` (signals, `task-sent` events and
  all), with what `send_task` redoes for every message done once per schedule's routing (the
  registered task's options, the route) and what a scheduler never reads left out (an
  `AsyncResult` and the result backend's subscription per message); a queue kombu already
  declared on the connection is not bound again per message. The messages are `send_task`'s,
  field by field (tests/unit/test_celery_publish.py, read back from Redis); a router function,
  task protocol 1 or a call inside a Celery task use `send_task` itself. CPU per message:
  117 us -> 68 us (bare `send_task` in a batch: 113 us). The end-to-end run polls Redis every
  2 ms instead of 0.2 ms: the poller took most of a core from the process it measured.
  Tried: a 1 ms and a 0.2 ms interpreter switch interval (`sys.setswitchinterval`) in the
  scheduler process, so database answers wait less for the interpreter lock while the
  submission thread sends: slower (7,600 -> 6,100-7,200 occ/s); not kept.
  With one submission thread (the default), the loop now hands it two batches before taking
  the oldest back, so the thread goes straight from one batch to the next while the loop
  claims a third (in-process, 10,000 due: 7,200-7,500 -> 7,400-7,700 occ/s). The harness
  stays CPU-bound under one interpreter lock: the same run ranges 6,600-7,700 occ/s from one
  try to the next (process CPU 1.18-1.39 s) while the batched loop holds 8,300-8,500.
  The direct publisher now writes the `argsrepr`/`kwargsrepr` headers itself for plain
  arguments (numbers, booleans, None, strings without quotes or backslashes; `repr`, built
  in C, is exactly what Celery's `saferepr` writes for them, tested against `send_task`'s
  messages), where `saferepr` walked them in Python: 73 -> 65 us a message; the harness then
  measured 7,484-8,342 occ/s against the batched loop's 7,835-7,940 in three paired runs.
  Tried without effect: a first claim of 50 instead of 500 (so sending starts sooner; medians
  6,941 vs 6,951 occ/s), the collector off during the burst.
- First message after exec (10,000 code schedules, restart): traced in the process,
  interpreter and CLI import ~0.15 s, loading the app ~0.18 s (Celery, kombu and redis
  imports ~0.1-0.14 s, the declarations), building the loop ~0.06 s (psycopg's import alone
  is ~0.1 s standalone), publication ~0.085 s, lease + first claim + first message ~0.07 s.
  Two changes: (1) this machine's environment sets PYTHONDONTWRITEBYTECODE=1, so every child
  compiled goatbeat's modules from source at each start (~60 ms) while celery, kombu and
  psycopg came compiled from site-packages; the bench now compiles goatbeat's bytecode first,
  as `pip install` does for an installed package (traced: 0.54-0.57 -> 0.49-0.50 s). (2)
  `goatbeat scheduler` lets the submitter open its broker connection (`prepare()`: kombu's
  transport import, a producer and its connection, ~20-30 ms for Celery over Redis) from a
  thread while it publishes (then 0.43-0.50 s). Tried without effect: a first claim of 50.
"""


def summary_table(sections: list[Section]) -> str:
    lines = [
        "| benchmark | subject | result | compared with | ratio | target | met |",
        "|---|---|---:|---|---:|---|:---:|",
    ]
    for section in sections:
        for row in section.rows:
            digits = 0 if row.value is not None and abs(row.value) >= 100 else 2
            value = f"{fmt(row.value, digits)} {row.unit}"
            ratio = "" if row.ratio is None else f"{row.ratio:.0%}" if row.unit != "x" else ""
            if row.unit == "MB" and row.ratio is not None:
                ratio = f"{row.ratio:.2f}x"
            met = {True: "yes", False: "**no**", None: ""}[row.met]
            subject = row.subject + (f" ({row.note})" if row.note else "")
            lines.append(
                f"| {section.name} | {subject} | {value} | {row.reference} | {ratio} | "
                f"{row.target} | {met} |"
            )
    return "\n".join(lines)


def goals_table(sections: dict[str, Section]) -> str:
    """Issue #18's goals, each with the figure of this run and whether it is met."""
    lines = [
        "| goal (issue #18) | target | this run | met |",
        "|---|---|---:|:---:|",
    ]
    for goal, key, prefix, kind, target in GOALS:
        section = sections.get(key)
        row = next(
            (r for r in (section.rows if section else []) if r.subject.startswith(prefix)), None
        )
        if row is None or row.value is None:
            lines.append(f"| {goal} | {target} | not measured | |")
            continue
        digits = 0 if abs(row.value) >= 100 else 2
        figure = f"{fmt(row.value, digits)} {row.unit}"
        if kind == "ratio" and row.ratio is not None:
            figure = f"{row.ratio:.0%} ({figure})"
        met = {True: "yes", False: "**no**", None: ""}[row.met]
        lines.append(f"| {goal} | {target} | {figure} | {met} |")
    return "\n".join(lines)


def draw_chart(sections: dict[str, Section], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: matplotlib is missing, no chart", file=sys.stderr)
        return False
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    fig.suptitle("goatbeat benchmarks (higher is better unless noted)", fontsize=13)

    ax = axes[0][0]
    dispatch = sections.get("dispatch")
    if dispatch and dispatch.chart.get("series"):
        sizes = dispatch.chart["sizes"]
        series = dispatch.chart["series"]
        width = 0.8 / max(1, len(series))
        for i, (label, values) in enumerate(series.items()):
            xs = [j + i * width for j in range(len(values))]
            bars = ax.bar(xs, [v or 0 for v in values], width, label=label)
            ax.bar_label(bars, labels=[fmt(v) for v in values], fontsize=7, rotation=90)
        ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(sizes))])
        ax.set_xticklabels([f"{n:,} due at once" for n in sizes])
        ax.set_yscale("log")
        ax.set_ylabel("occurrences / s (log)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    ax.set_title("Dispatch to Celery over Redis")

    ax = axes[0][1]
    claim = sections.get("claim")
    if claim and claim.chart:
        labels = list(claim.chart)
        values = [claim.chart[k] or 0 for k in labels]
        bars = ax.barh([label.replace(" (", "\n(") for label in labels], values, color="#4c72b0")
        ax.bar_label(bars, labels=[fmt(v) for v in values], fontsize=8)
        ax.set_xlabel("claims / s")
        ax.invert_yaxis()
    ax.set_title("Claim throughput, PostgreSQL, no-op submitter")

    ax = axes[1][0]
    scale = sections.get("scale")
    if scale and scale.chart.get("due"):
        ax.plot(scale.chart["due"], scale.chart["ms"], marker="o")
        for x, y in zip(scale.chart["due"], scale.chart["ms"], strict=False):
            ax.annotate(f"{y:.0f} ms", (x, y), textcoords="offset points", xytext=(4, -10))
        ax.set_xlabel("occurrences due in the iteration (100,000 schedules)")
        ax.set_ylabel("ms per iteration (lower is better)")
        rss = scale.chart.get("rss", {})
        if rss:
            text = "idle RSS: " + ", ".join(f"{k}: {v:.0f} MB" for k, v in rss.items())
            ax.text(0.02, 0.95, text, transform=ax.transAxes, va="top", fontsize=8)
    ax.set_title("Iteration cost tracks what is due")

    ax = axes[1][1]
    labels, values = [], []
    late = sections.get("lateness")
    if late and late.chart:
        for key in ("p50", "p99"):
            labels.append(f"lateness {key}")
            values.append(late.chart[key])
    fail = sections.get("failover")
    if fail and fail.chart:
        labels += ["failover SIGTERM", "failover SIGKILL"]
        values += [fail.chart["SIGTERM"] * 1000, fail.chart["SIGKILL"] * 1000]
    if labels:
        bars = ax.bar(labels, values, color=["#55a868"] * 2 + ["#c44e52"] * (len(labels) - 2))
        ax.bar_label(bars, labels=[f"{v:,.0f} ms" for v in values], fontsize=8)
        ax.set_yscale("log")
        ax.axhline(100, color="#55a868", linestyle="--", linewidth=1)
        ax.axhline(1000, color="#c44e52", linestyle="--", linewidth=1)
        ax.set_ylabel("milliseconds (log, lower is better)")
        ax.tick_params(axis="x", labelsize=8)
    ax.set_title("Lateness at the broker (10k cron) and failover; dashed: targets")

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


METHODS: dict[str, Any] = {
    "dispatch": bench_dispatch,
    "claim": bench_claim,
    "scale": bench_scale,
    "startup": bench_startup,
    "lateness": bench_lateness,
    "failover": bench_failover,
    "shards": bench_shards,
}


def write_docs(
    sections: dict[str, Section],
    table: str,
    host: dict[str, str],
    *,
    quick: bool,
    chart: bool,
    elapsed: float,
) -> Path:
    out = DOCS / "benchmarks.md"
    parts = [
        "# Benchmarks",
        "",
        "goatbeat measured side by side with stock celery beat (`PersistentScheduler`) and "
        "django-celery-beat (`DatabaseScheduler`), in one run, on one machine, against the same "
        "PostgreSQL and Redis servers. Reproduce from a fresh clone with one command:",
        "",
        "```sh",
        "./dev bench            # python -m bench: full run, rewrites this page and the chart",
        "./dev bench --quick    # a reduced run in a few minutes, prints the table only",
        "```",
        "",
        f"This page was generated by `python -m bench{' --quick' if quick else ''}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC in {elapsed / 60:.0f} min. Nothing here is "
        "asserted by the test suite; speed is measured, not tested.",
        "",
        "## Summary",
        "",
        table,
        "",
    ]
    parts += ["## Issue #18: speed and scale at the limit", "", goals_table(sections), ""]
    parts += ["What was changed, and what was tried and did not move a figure:", "", NOTES]
    missed = [
        f"{row.subject} ({fmt(row.value, 0 if abs(row.value or 0) >= 100 else 2)} {row.unit}, "
        f"target {row.target})"
        for section in sections.values()
        for row in section.rows
        if row.met is False
    ]
    if missed:
        parts += ["Targets missed in this run: " + "; ".join(missed) + ".", ""]
    if chart:
        parts += ["![goatbeat benchmarks](benchmarks.png)", ""]
    parts += ["## Machine", "", "| | |", "|---|---|"]
    parts += [f"| {k} | {v} |" for k, v in host.items()]
    parts += [
        "",
        "Absolute figures depend on the machine and on what else runs on it; the ratios are "
        "measured in the same run, contender after contender, and are the figures to compare.",
        "",
        "## How each number was obtained",
        "",
    ]
    for name in NAMES:
        section = sections.get(name)
        if section is None:
            continue
        parts += [f"### {section.name}", ""]
        module = METHODS.get(name)
        if module is not None and module.__doc__:
            parts += [module.__doc__.strip().split("\n", 1)[1].strip(), ""]
        elif name == "cron":
            parts += [
                "`bench/bench_cron.py` (run as a program by `python -m bench`): sequential "
                "next occurrences of the same expressions with each engine, best of several "
                "runs.",
                "",
            ]
        parts += ["Results:", "", section.details.strip(), ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts))
    return out


# -- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a reduced run in a few minutes")
    parser.add_argument("--only", action="append", choices=NAMES, help="run only these")
    parser.add_argument("--profile", action="store_true", help="add pyinstrument profiles")
    parser.add_argument("--no-install", action="store_true", help="do not pip install peers")
    docs = parser.add_mutually_exclusive_group()
    docs.add_argument("--write-docs", action="store_true", help="write docs even when partial")
    docs.add_argument("--no-docs", action="store_true", help="never write docs/")
    args = parser.parse_args(argv)

    began = time.monotonic()
    missing = ensure_peers(install=not args.no_install)
    if missing:
        print(
            f"bench: missing {', '.join(missing)}; those comparisons are skipped", file=sys.stderr
        )
    peers = "django-celery-beat" not in missing
    compile_bytecode()
    wanted = args.only or list(NAMES)
    load_before = os.getloadavg()
    servers = Servers().start()
    sections: dict[str, Section] = {}
    try:
        host = machine(servers)
        runners: dict[str, Callable[[], Section]] = {
            "dispatch": lambda: bench_dispatch.run(
                servers, quick=args.quick, peers=peers, profile=args.profile
            ),
            "claim": lambda: bench_claim.run(servers, quick=args.quick, profile=args.profile),
            "scale": lambda: bench_scale.run(servers, quick=args.quick),
            "startup": lambda: bench_startup.run(servers, quick=args.quick),
            "rabbitmq": lambda: bench_rabbitmq.run(servers, quick=args.quick),
            "lateness": lambda: bench_lateness.run(servers, quick=args.quick),
            "failover": lambda: bench_failover.run(servers, quick=args.quick),
            "cron": lambda: run_cron(args.quick),
            "shards": lambda: bench_shards.run(servers, quick=args.quick),
        }
        for name in NAMES:
            if name not in wanted:
                continue
            print(f"bench: {name}", file=sys.stderr)
            started = time.monotonic()
            try:
                sections[name] = runners[name]()
            except Exception as exc:  # one broken benchmark must not hide the others
                print(f"bench: {name} failed: {exc}", file=sys.stderr)
                sections[name] = Section(name, details=f"Failed: `{exc}`\n")
            print(f"bench: {name} took {time.monotonic() - started:.0f} s", file=sys.stderr)
    finally:
        servers.stop()
    load_after = os.getloadavg()
    host["Load average (1 min) before / after"] = f"{load_before[0]:.2f} / {load_after[0]:.2f}"

    table = summary_table([sections[n] for n in NAMES if n in sections])
    print(table)
    complete = set(wanted) == set(NAMES)
    if args.write_docs or (complete and not args.quick and not args.no_docs):
        chart = draw_chart(sections, DOCS / "benchmarks.png")
        page = write_docs(
            sections,
            table,
            host,
            quick=args.quick,
            chart=chart,
            elapsed=time.monotonic() - began,
        )
        print(f"\nbench: wrote {page.relative_to(ROOT)}", file=sys.stderr)
    else:
        for section in sections.values():
            print(f"\n### {section.name}\n\n{section.details}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
