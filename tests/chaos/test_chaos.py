"""A bounded chaos run in the suite: three scheduler processes, a real PostgreSQL and a real
Redis broker, every default kind of fault, the checker.

About two and a half minutes, and under a minute for the sharded run (4 shards shared by the
three schedulers). The long runs are ``./dev soak`` (``python -m tests.chaos.run --duration
600``) and ``./dev soak --shards 4``; their figures go in docs/reliability.md and
docs/scaling.md, never in assertions.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.chaos.harness import FAULTS, ChaosConfig
from tests.chaos.run import run_chaos

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.mark.timeout(420)
def test_no_guarantee_breaks_under_kills_pauses_lost_connections_and_restarts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("GOATBEAT_CHAOS_SEED") or random.SystemRandom().randrange(1, 2**31))
    lines: list[str] = []
    # Every kind at least once (a shuffled round of them), however slow the machine.
    config = ChaosConfig(seed=seed, duration=80.0, min_faults=len(FAULTS), log=lines.append)
    run, report = run_chaos(config, tmp_path)
    with capsys.disabled():
        print(f"\nchaos seed {seed} (replay: GOATBEAT_CHAOS_SEED={seed})")
        print(report.summary())
    assert report.ok, f"seed {seed}:\n{report.summary()}\n" + "\n".join(lines)
    # The run really exercised what it claims to.
    assert set(run.stats.faults) >= set(FAULTS), run.stats.faults
    assert report.figures["occurrences_checked"] > 1000
    assert report.figures["admin_edits_checked"] > 0
    assert report.figures["pauses_replaced"] > 0
    assert report.figures["refused_schedules"] > 0
    assert report.figures["broker_messages"] > 1000


@pytest.mark.timeout(240)
def test_no_guarantee_breaks_with_four_shards_shared_by_three_schedulers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same checker with ``--shards 4``: zero doubled claims, nothing early, nothing lost
    beyond the misfire policies, tokens in order per shard; kills, pauses and the rest hit a
    random shard's holder."""
    seed = int(os.environ.get("GOATBEAT_CHAOS_SEED") or random.SystemRandom().randrange(1, 2**31))
    lines: list[str] = []
    config = ChaosConfig(
        seed=seed, duration=30.0, shards=4, settle=8.0, min_faults=5, log=lines.append
    )
    run, report = run_chaos(config, tmp_path)
    with capsys.disabled():
        print(f"\nsharded chaos seed {seed} (replay: GOATBEAT_CHAOS_SEED={seed})")
        print(report.summary())
    assert report.ok, f"seed {seed}:\n{report.summary()}\n" + "\n".join(lines)
    assert report.figures["occurrences_checked"] > 300
    assert sum(n for k, n in run.stats.faults.items() if k != "end") >= 5
