"""``tinyprof.history``: the changes flagged over a series of runs, each run
against the runs since the callpath's last change, by the run-to-run noise
seen over the series. Runs of 4 ranks written as in test_compare.py: exact
times with seeded noise per (rank, step), and a barrier's waits."""
from __future__ import annotations

import pytest
from test_compare import SOLVE, write_run

import tinyprof

pytest.importorskip("pandas")


def series(tmp_path, clock, slows, seed: int = 0):
    return [write_run(tmp_path / f"r{k}", clock, seed + k, slow) for k, slow in enumerate(slows)]


@pytest.mark.parametrize("seed", [0, 100, 200])
def test_runs_of_the_same_code_flag_nothing(tmp_path, clock, seed):
    assert tinyprof.history(series(tmp_path, clock, [1.0] * 8, seed)).empty


def test_a_drift_of_2_5_percent_a_run_is_flagged(tmp_path, clock):
    """No run is 5% slower than the one before it; the series is."""
    runs = series(tmp_path, clock, [1.025 ** k for k in range(8)])
    table = tinyprof.history(runs)
    assert set(table["callpath"]) == {SOLVE} and table["regressed"].all() and len(table) >= 1
    assert (table["change"] > 0.05).all() and (table["run"] >= 3).all()


def test_a_step_is_flagged_once_and_starts_a_new_baseline(tmp_path, clock):
    runs = series(tmp_path, clock, [1.0] * 4 + [1.25] * 4)
    table = tinyprof.history(runs)
    assert list(zip(table["callpath"], table["run"], table["since"])) == [(SOLVE, 4, 0)]
    assert table["change"].iloc[0] == pytest.approx(0.25, abs=0.02)
    assert table.attrs["runs"] == [f"r{k}" for k in range(8)]


def test_alternating_runs_flag_each_change(tmp_path, clock):
    runs = series(tmp_path, clock, [1.0, 1.25] * 3)
    table = tinyprof.history(runs)
    assert set(table["callpath"]) == {SOLVE}
    assert sorted(table.loc[table["regressed"], "run"]) == [1, 3, 5]
    assert sorted(table.loc[table["improved"], "run"]) == [2, 4]


def test_too_few_runs_flag_nothing_and_say_so(tmp_path, clock):
    table = tinyprof.history(series(tmp_path, clock, [1.0, 1.0, 2.0]))
    assert table.empty and table.attrs["notes"] == [
        "3 runs: too few to see the run-to-run noise (it takes 4): nothing flagged"]
