"""bench/bench_paired.py's arithmetic: ABBA order, per-pair ratios, their median and range."""

from __future__ import annotations

import pytest

from bench.bench_paired import abba, ratios, summarize, table, within


def test_abba_alternates_which_side_goes_first() -> None:
    assert list(abba(4)) == [
        (0, "base"),
        (0, "new"),
        (1, "new"),
        (1, "base"),
        (2, "base"),
        (2, "new"),
        (3, "new"),
        (3, "base"),
    ]


def test_abba_gives_each_side_once_per_round() -> None:
    order = list(abba(7))
    for r in range(7):
        assert sorted(side for rr, side in order if rr == r) == ["base", "new"]


def test_ratios_are_per_pair_new_over_base() -> None:
    # Pairs, not medians of each side: (2/1, 3/4, 10/5).
    assert ratios([1.0, 4.0, 5.0], [2.0, 3.0, 10.0]) == [2.0, 0.75, 2.0]


def test_ratios_leave_out_pairs_without_a_base() -> None:
    assert ratios([0.0, None, 2.0], [1.0, 1.0, 3.0]) == [1.5]


def test_ratios_need_as_many_pairs_on_each_side() -> None:
    with pytest.raises(ValueError):
        ratios([1.0, 2.0], [1.0])


def test_summary_is_median_and_range() -> None:
    assert summarize([1.2, 0.9, 1.0, 1.5]) == {"median": 1.1, "low": 0.9, "high": 1.5}
    assert summarize([]) is None


def test_within_five_percent_depends_on_the_direction() -> None:
    assert within({"median": 0.96}, higher_is_better=True) is True
    assert within({"median": 0.94}, higher_is_better=True) is False
    assert within({"median": 1.04}, higher_is_better=False) is True
    assert within({"median": 1.06}, higher_is_better=False) is False
    assert within(None, higher_is_better=False) is None


def test_table_uses_per_pair_ratios_not_ratio_of_medians() -> None:
    runs = {
        "claim_store": {
            "base": [{"rate": 100.0, "cpu": 1.0}, {"rate": 200.0, "cpu": 2.0}],
            "new": [{"rate": 110.0, "cpu": 1.0}, {"rate": 180.0, "cpu": 2.4}],
        }
    }
    calls = {"claim_store": {"base": {"calls": 1000}, "new": {"calls": 1100}}}
    text = table(runs, calls, "aaa", "bbb")
    lines = text.splitlines()
    assert lines[0] == "| measure | aaa | bbb | new/base, median (range) | within 5 % |"
    rate = next(line for line in lines if "(per s)" in line)
    # ratios 1.10 and 0.90: median 1.000; medians of the sides 150 and 145 would say 0.967
    assert "| 150 | 145 | 1.000 (0.90-1.10) | yes |" in rate
    cpu = next(line for line in lines if "(CPU s)" in line)
    assert "1.100 (1.00-1.20) | **no** |" in cpu
    count = next(line for line in lines if "Python calls" in line)
    assert "| 1,000 | 1,100 | 1.100 (1.10-1.10) | **no** |" in count
