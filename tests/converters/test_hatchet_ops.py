"""Hatchet's own operations on a converted profile, in the environment that
``make install`` builds (llnl-hatchet, pandas >= 2, numpy >= 2: docs/convert.md):
filter (in worker processes, as by default), squash, drop_index_levels, tree
and GraphFrame arithmetic, and our load_imbalance (which llnl-hatchet dropped),
each checked against the Profile's own numbers."""
from __future__ import annotations

import signal

import numpy as np
import pytest
from helpers.profiles import NRANKS, make_profile

import tinyprof
from tinyprof.converters.hatchet import load_imbalance

ht = pytest.importorskip("hatchet")
pd = pytest.importorskip("pandas")


@pytest.fixture
def gf(tmp_path, clock):
    def late(*_):
        raise TimeoutError("a hatchet operation hung (its worker processes died?)")
    signal.signal(signal.SIGALRM, late)
    signal.alarm(120)              # filter waits on worker processes: never hang the suite
    yield tinyprof.to_hatchet(make_profile(tmp_path / "prof", clock))
    signal.alarm(0)


def _by_name(frame, column):
    """{(name, rank): value} of a (node, rank)-indexed dataframe."""
    return {(node.frame["name"], rank): v for (node, rank), v in frame[column].items()}


def test_filter_keeps_the_rows_asked_for_and_squash_rebuilds_the_tree(gf):
    threshold = float(gf.dataframe["time"].median())
    want = {k for k, v in _by_name(gf.dataframe, "time").items() if v > threshold}
    kept = gf.filter(lambda row: row["time"] > threshold)       # default: worker processes
    assert set(_by_name(kept.dataframe, "time")) == want and want
    single = gf.filter(lambda row: row["time"] > threshold, num_procs=1)
    assert set(_by_name(single.dataframe, "time")) == want
    squashed = gf.filter(lambda row: row["name"] != "compute").squash()
    names = {n.frame["name"] for n in squashed.graph.traverse()}
    assert "compute" not in names and {"main", "comm"} <= names
    main = squashed.dataframe.xs(next(n for n in squashed.graph.roots if n.frame["name"] == "main"),
                                 level="node")
    before = gf.dataframe.xs(next(n for n in gf.graph.roots if n.frame["name"] == "main"), level="node")
    compute = gf.dataframe[gf.dataframe["name"] == "compute"].groupby(level="rank")["time (inc)"].sum()
    # squash recomputes inclusive time from what is left: main lost compute's time
    assert np.allclose(main["time (inc)"], before["time (inc)"] - compute)


def test_load_imbalance_is_max_over_mean_across_ranks(gf):
    before = gf.dataframe.copy()
    out = load_imbalance(gf, metric_column="time")
    assert gf.dataframe.equals(before) and list(out.dataframe.index.names) == ["node"]
    times = {name: before.loc[before["name"] == name, "time"] for name in set(before["name"])}
    assert sorted(out.dataframe["name"]) == sorted(times)
    for name, value, mean in out.dataframe[["name", "time.imbalance", "time"]].itertuples(index=False):
        t = times[name]
        assert len(t) == NRANKS and mean == pytest.approx(t.mean())
        assert value == pytest.approx(t.max() / t.mean() if t.mean() else np.nan, nan_ok=True)
    assert "main" in out.tree(metric_column="time.imbalance", precision=2)


def test_drop_index_levels_reduces_the_ranks(gf):
    per_rank = gf.dataframe.copy()
    reduced = gf.deepcopy()
    reduced.drop_index_levels(function=np.max)
    assert list(reduced.dataframe.index.names) == ["node"]
    for node, row in reduced.dataframe.iterrows():
        assert row["time"] == pytest.approx(per_rank.xs(node, level="node")["time"].max())
        assert row["count"] == per_rank.xs(node, level="node")["count"].max()
    mean = gf.deepcopy()
    mean.drop_index_levels()                                    # hatchet's default: mean
    main = next(n for n in mean.graph.roots if n.frame["name"] == "main")
    assert mean.dataframe.loc[main, "time (inc)"] == pytest.approx(
        per_rank.xs(main, level="node")["time (inc)"].mean())
    text = mean.tree(metric_column="time (inc)")
    assert all(name in text for name in ("main", "compute", "comm", "inner"))


def test_graphframe_arithmetic(gf):
    # llnl-hatchet's + and - write through their shallow copy into the left
    # operand (gf + gf doubles gf too), so each side is a deepcopy, as docs/convert.md says.
    times = gf.dataframe["time"].copy()
    twice = gf.deepcopy() + gf.deepcopy()
    assert np.allclose(twice.dataframe["time"], 2 * times) and gf.dataframe["time"].equals(times)
    zero = gf.deepcopy() - gf.deepcopy()
    assert np.allclose(zero.dataframe["time (inc)"], 0.0)
    assert len(twice.dataframe) == len(gf.dataframe) == len(gf.graph) * NRANKS
