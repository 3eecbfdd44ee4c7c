"""``tinyprof.to_thicket``: several real profiles in one Thicket, every run
present with its metadata, the per-rank values exactly those of
``to_hatchet``; and the ensemble operations docs/guide.md shows (stats,
groupby on a metadata column, a query) on it."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
from helpers.profiles import NRANKS, callpaths, make_profile

import tinyprof

tt = pytest.importorskip("thicket")
pd = pytest.importorskip("pandas")

COLUMNS = ["time", "time (inc)", "count"]
APP = """
    import tinyprof
    tinyprof.Profiler("solver", outdir="out", metadata={"size": 64, "case": "big"})
    for step in range(3):
        with tinyprof.Event("main"):
            with tinyprof.Event("solve", loop=1):
                sum(range(20000))
    tinyprof.flush()
"""


@pytest.fixture
def runs(tmp_path, clock):
    """Three profiles: two recorded by the converter tests' helper (4 ranks,
    no run metadata), one by a real run (1 rank, its metadata recorded)."""
    a = make_profile(tmp_path / "a", clock)
    b = make_profile(tmp_path / "b", clock, name="second")
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYPROF")}
    subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=env, check=True, timeout=120)
    return [tinyprof.read(a), tinyprof.read(b), tinyprof.read(tmp_path / "out")]


def _key(th, profile) -> int:
    """The Thicket profile of a tinyprof profile (its first file's path)."""
    (key,) = [k for k, path in th.profile_mapping.items() if path == os.path.abspath(profile.files[0])]
    return key


def _values(frame, graph, columns):
    """{(callpath, rank): [values]} of a (node, rank)-indexed frame."""
    paths = callpaths(graph)
    return {(paths[id(node)], rank): list(row)
            for (node, rank), row in zip(frame.index, frame[columns].itertuples(index=False))}


def _same(got, want) -> bool:
    return len(got) == len(want) and all(g == w or (math.isnan(g) and math.isnan(w))
                                         for g, w in zip(got, want))


def test_every_run_with_its_metadata_and_to_hatchets_values(runs):
    paths = [os.path.dirname(runs[0].files[0]), runs[1], runs[2]]        # a path or a Profile
    th = tinyprof.to_thicket(paths, metadata=[{"size": 1}, {"size": 2}, {"size": 2, "extra": "x"}])
    assert isinstance(th, tt.Thicket) and len(th.profile) == 3
    assert sorted(th.profile_mapping.values()) == sorted(os.path.abspath(p.files[0]) for p in runs)
    assert list(th.dataframe.index.names) == ["node", "profile", "rank"]

    meta = th.metadata
    assert len(meta) == 3
    for profile, size in zip(runs, (1, 2, 2)):
        row = meta.loc[_key(th, profile)]
        assert (row["tinyprof.name"], row["mpi.world.size"], row["size"]) == (profile.name, profile.nranks, size)
        assert row["tinyprof.run"] == profile.run and row["tinyprof.statistic"] == "sum"
    real = meta.loc[_key(th, runs[2])]
    recorded = runs[2].metadata          # the run's own metadata; "size" overridden by the argument
    assert recorded["size"] == 64 and recorded["nranks"] == 1 and "command" in recorded
    for key, value in recorded.items():
        assert real[key] == (2 if key == "size" else value), key
    assert real["extra"] == "x" and pd.isna(meta.loc[_key(th, runs[0]), "extra"])

    # per (node, rank), each run's rows are exactly to_hatchet's, and no others
    for profile in runs:
        gf = tinyprof.to_hatchet(profile)
        columns = COLUMNS + [k for k, _ in profile.metrics]
        got = _values(th.dataframe.xs(_key(th, profile), level="profile"), th.graph, columns)
        want = _values(gf.dataframe, gf.graph, columns)
        assert set(got) == set(want) and len(want) == len(profile.callpaths) * profile.nranks
        assert all(_same(got[k], want[k]) for k in want), profile.name
    assert len(th.dataframe) == sum(len(p.callpaths) * p.nranks for p in runs)


def test_one_dict_of_metadata_applies_to_every_run(runs):
    th = tinyprof.to_thicket(runs[:2], metadata={"machine": "m1", "tinyprof.name": "renamed"})
    assert th.metadata["machine"].tolist() == ["m1", "m1"]
    assert th.metadata["tinyprof.name"].tolist() == ["renamed", "renamed"]


def test_stats_over_runs_and_ranks(runs):
    th = tinyprof.to_thicket(runs)
    tt.stats.mean(th, columns=["time (inc)"])
    tt.stats.std(th, columns=["time (inc)"])
    stats = th.statsframe.dataframe
    for node, rows in th.dataframe.groupby(level="node"):
        assert stats.loc[node, "time (inc)_mean"] == pytest.approx(rows["time (inc)"].mean())
        assert stats.loc[node, "time (inc)_std"] == pytest.approx(rows["time (inc)"].std(), nan_ok=True)
    names = {callpaths(th.graph)[id(n)] for n in th.graph.traverse()}
    assert names == {p for profile in runs for p in profile.callpaths}     # the union of the trees


def test_groupby_a_metadata_column(runs):
    sizes = [{"size": 1}, {"size": 2}, {"size": 2}]
    # per rank: pandas, with the metadata column joined to every row
    th = tinyprof.to_thicket(runs, metadata=sizes)
    rows = th.dataframe.join(th.metadata["size"], on="profile")
    total = [tinyprof.to_hatchet(p).dataframe["count"].sum() for p in runs]
    assert rows.groupby("size")["count"].sum().to_dict() == {1: total[0], 2: total[1] + total[2]}
    # reduced across ranks: Thicket's own groupby
    slowest = tinyprof.to_thicket(runs, metadata=sizes, across_ranks="max")
    assert list(slowest.dataframe.index.names) == ["node", "profile"]
    groups = slowest.groupby("size")
    assert sorted(groups) == [1, 2]
    assert len(groups[1].profile) == 1 and len(groups[2].profile) == 2
    for profile in runs:
        gf = tinyprof.to_hatchet(profile)
        want = gf.dataframe.groupby("name")["time (inc)"].max()
        got = slowest.dataframe.xs(_key(slowest, profile), level="profile").set_index("name")["time (inc)"]
        assert got.to_dict() == pytest.approx(want.to_dict()), profile.name
    assert set(slowest.metadata["tinyprof.across_ranks"]) == {"max"}


def test_a_query(runs):
    th = tinyprof.to_thicket(runs)
    # per rank, Thicket cannot squash: keep the matching nodes' rows (squash=False)
    found = th.query([{"name": "main"}, {"name": "solve|compute"}], squash=False, multi_index_mode="all")
    assert set(found.dataframe["name"]) == {"main", "compute", "solve"}
    slowest = tinyprof.to_thicket(runs, across_ranks="max")
    squashed = slowest.query([{"name": "main"}, {"name": "solve"}], multi_index_mode="all")
    assert {n.frame["name"] for n in squashed.graph.traverse()} == {"main", "solve"}
    assert set(squashed.dataframe["name"]) == {"main", "solve"}


def test_bad_arguments(runs, tmp_path):
    with pytest.raises(ValueError, match="2 metadata dicts for 3 profiles"):
        tinyprof.to_thicket(runs, metadata=[{}, {}])
    with pytest.raises(ValueError, match="same profile is given twice"):
        tinyprof.to_thicket([runs[0], runs[0]])
    with pytest.raises(TypeError, match="list of profiles"):
        tinyprof.to_thicket(os.path.dirname(runs[0].files[0]))
    with pytest.raises(ValueError, match="at least one profile"):
        tinyprof.to_thicket([])
    with pytest.raises(ValueError, match="across_ranks"):
        tinyprof.to_thicket(runs, across_ranks="median")
    (tmp_path / "junk.tp").write_bytes(b"not a profile")
    with pytest.raises(tinyprof.FormatError):
        tinyprof.to_thicket([runs[0], tmp_path / "junk.tp"])


def test_one_profile_is_a_thicket_too(runs):
    th = tinyprof.to_thicket([runs[0]])
    assert len(th.profile) == 1 and len(th.dataframe) == len(runs[0].callpaths) * NRANKS
