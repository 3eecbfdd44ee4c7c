"""``tinyprof.compare`` and ``tinyprof compare`` on runs with exact times.

Each run is 4 ranks recorded one after the other through the annotation API
with the deterministic clock, written by the flush's own ``build_file``.
Per iteration a rank computes (longer on higher ranks), solves, and waits
for the slowest rank (a barrier's wait: what the others computed more, plus
a loaded machine's jitter). Every duration carries a few percent of seeded
noise, different per run, so the runs of one side differ as real runs do.
"""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import warnings
from typing import List

import numpy as np
import pytest

import tinyprof
from tinyprof import annotate
from tinyprof.analysis.compare import _betainc, _t_two_sided
from tinyprof.cli import main
from tinyprof.format import encoding as _format
from tinyprof.format import output_dir
from tinyprof.runtime import assemble, sites
from tinyprof.runtime import collect as _collect

pd = pytest.importorskip("pandas")

impl = annotate.impl
Event = tinyprof.Event
NRANKS, STEPS = 4, 5
MAIN, COMPUTE, SOLVE, WAIT = ("main",), ("main", "compute"), ("main", "solve"), ("main", "wait")
MS = 1_000_000


def write_run(outdir, clock, seed: int, slow: float = 1.0, nranks: int = NRANKS, extra: bool = False,
              name: str = "app", shift: float = 1.0) -> str:
    """One run on ``nranks`` ranks, ``solve`` ``slow`` times as long; ``extra``:
    rank 0 also enters ``main<io``; ``shift``: every duration that many times
    as long (a whole run on a loaded machine). Returns the output directory."""
    rng = np.random.default_rng(seed)
    jitter = lambda: shift * (1 + rng.uniform(-0.02, 0.02, (nranks, STEPS)))
    compute = 20 * MS * (1 + 0.1 * np.arange(nranks))[:, None] * jitter()
    solve = 10 * MS * slow * jitter()
    busy = compute + solve
    wait = busy.max(axis=0) - busy + shift * rng.uniform(0, 2 * MS, (nranks, STEPS))   # the machine's jitter
    ranks, executions = [], []
    for r in range(nranks):
        impl.reset()
        with Event("main"):
            clock.tick(int(shift * MS))
            for step in range(STEPS):
                for region, ns in (("compute", compute), ("solve", solve), ("wait", wait)):
                    with Event(region, loop=1):
                        clock.tick(int(ns[r, step]))
            if extra and r == 0:
                with Event("io", is_common=False):
                    clock.tick(3 * MS)
        ranks.append(_collect.collect(impl.root()))
        executions.append(impl.executions())
    impl.reset()
    os.makedirs(outdir, exist_ok=True)
    header = _format.Header(name=name, nranks=nranks, first_rank=0, rank_count=nranks,
                            file_index=0, file_count=1, metrics=[])
    output_dir.write_atomic(os.path.join(outdir, output_dir.file_name(name, 0, 1)),
                            assemble.build_file(header, ranks, executions))
    return str(outdir)


def runs(tmp_path, clock, tag: str, seeds, slow: float = 1.0, **kw) -> List[str]:
    return [write_run(tmp_path / f"{tag}{s}", clock, s, slow, **kw) for s in seeds]


def flagged(frame, column: str) -> List[tuple]:
    return list(frame.loc[frame[column], "callpath"])


def row(frame, path):
    return frame.set_index(frame["callpath"]).loc[[path]].iloc[0]


def test_the_t_distribution_is_right():
    """Against values of Student's t computed elsewhere (R's 2 * pt(-|t|, df))."""
    assert _t_two_sided(2.0, 1.0, 10) == pytest.approx(0.07338803, rel=1e-6)
    assert _t_two_sided(-3.182446, 1.0, 3) == pytest.approx(0.05, rel=1e-5)
    assert _t_two_sided(1.959964, 1.0, 1e7) == pytest.approx(0.05, rel=1e-5)
    assert _betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248, rel=1e-12)    # 1 - 0.6^4 - 4*0.4*0.6^3
    assert _t_two_sided(0.0, 0.0, 3) == 1.0 and _t_two_sided(1e-9, 0.0, 3) == 0.0


def test_the_t_distribution_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for df, t in zip(rng.uniform(0.5, 300, 500), rng.normal(0, 1, 500) * rng.choice([0.1, 1, 4, 20], 500)):
        assert _t_two_sided(t, 1.0, df) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("per_side", [(3, 3), (3, 1), (1, 2)])
def test_a_region_made_25_percent_slower_is_flagged_alone(tmp_path, clock, per_side):
    """Several runs a side (the guide's 3 against 3), or several on one side
    only (its runs' noise is the noise the single run is judged by)."""
    base = runs(tmp_path, clock, "base", range(per_side[0]))
    new = runs(tmp_path, clock, "new", range(10, 10 + per_side[1]), slow=1.25)
    frame = tinyprof.compare(base, new)
    assert list(frame["callpath"]) == [MAIN, COMPUTE, SOLVE, WAIT]
    assert flagged(frame, "regressed") == [SOLVE] and flagged(frame, "improved") == []
    solve = row(frame, SOLVE)
    assert solve["change"] == pytest.approx(0.25, abs=0.02) and solve["p_value"] < 0.01
    # base and new are seconds per rank, exclusive: main's own 1 ms is unchanged
    assert row(frame, MAIN)["base"] == pytest.approx(1e-3) and row(frame, MAIN)["change"] == pytest.approx(0)
    assert solve["base"] == pytest.approx(STEPS * 0.010, rel=0.01)
    assert set(frame["status"]) == {"both"} and frame.attrs["notes"] == []
    assert frame.attrs["test"] == {(3, 3): "Welch's t-test over runs (3 vs 3)",
                                   (3, 1): "the 1 new run against the 3 base runs' noise (t, 2 df)",
                                   (1, 2): "the 1 base run against the 2 new runs' noise (t, 1 df)"}[per_side]


def test_one_run_a_side_cannot_tell_and_the_gate_passes(tmp_path, clock, capsys):
    """Two runs of the same code, the second on a loaded machine: every
    duration 40% longer, on every rank. One run a side holds no run-to-run
    noise to judge that by: nothing is flagged, the gate passes and says why."""
    base = write_run(tmp_path / "b", clock, 1)
    new = write_run(tmp_path / "n", clock, 2, shift=1.4)
    frame = tinyprof.compare(base, new)
    assert row(frame, SOLVE)["change"] == pytest.approx(0.4, abs=0.03)      # it did move
    assert not frame["regressed"].any() and not frame["improved"].any() and frame["p_value"].isna().all()
    assert frame.attrs["test"] == "none: one run a side"
    assert frame.attrs["notes"] == [ONE_A_SIDE]
    assert main(["compare", base, new, "--fail-above", "10"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].endswith("evidence: none: one run a side") and f"note: {ONE_A_SIDE}" in out
    assert err == f"tinyprof compare: not gated: {ONE_A_SIDE}\n"


ONE_A_SIDE = ("one run a side cannot tell a change from run-to-run noise (a run on a busier machine is "
              "slower on every rank): nothing flagged; give several runs on a side (--base A B C --new D E F)")


def test_the_values_are_the_runs_means_per_rank(tmp_path, clock):
    base = runs(tmp_path, clock, "b", [1, 2])
    frame = tinyprof.compare(base, base[0])
    expected = np.mean([[sum(sum(ex) for ex in p.series(SOLVE, r)) for r in range(NRANKS)]
                        for p in map(tinyprof.read, base)])
    assert row(frame, SOLVE)["base"] == pytest.approx(expected, rel=1e-12)
    inclusive = tinyprof.compare(base[0], base[0], inclusive=True)
    p = tinyprof.read(base[0])
    main_total = np.mean([sum(sum(ex) for ex in p.series(MAIN, r)) for r in range(NRANKS)])
    assert row(inclusive, MAIN)["base"] == pytest.approx(main_total, rel=1e-12)
    assert frame.attrs["test"] == "the 1 new run against the 2 base runs' noise (t, 1 df)"


@pytest.mark.parametrize("per_side", [3, 1])
def test_two_runs_of_the_same_code_flag_nothing(tmp_path, clock, per_side):
    """The wait region changes by more than the 5% threshold between runs of
    the same code (the machine's jitter): neither test nor floor lets it through."""
    changes = []
    for trial in range(10):
        base = runs(tmp_path, clock, f"a{trial}-", range(100 * trial, 100 * trial + per_side))
        new = runs(tmp_path, clock, f"b{trial}-", range(100 * trial + 50, 100 * trial + 50 + per_side))
        frame = tinyprof.compare(base, new)
        assert not frame["regressed"].any() and not frame["improved"].any(), frame
        changes.append(abs(row(frame, WAIT)["change"]))
    assert max(changes) > 0.05          # the wait did move beyond the threshold


def test_the_floor_and_threshold_hold_back_small_changes(tmp_path, clock):
    base = runs(tmp_path, clock, "b", range(3))
    new = runs(tmp_path, clock, "n", range(3, 6), slow=1.25)
    assert flagged(tinyprof.compare(base, new, threshold=0.30), "regressed") == []
    frame = tinyprof.compare(base, new)
    share = (row(frame, SOLVE)["new"] - row(frame, SOLVE)["base"]) / frame["base"].sum()
    assert 0.06 < share < 0.07        # solve's 12.5 ms more per rank, of a ~186 ms run
    assert flagged(tinyprof.compare(base, new, floor=0.06), "regressed") == [SOLVE]
    assert flagged(tinyprof.compare(base, new, floor=0.07), "regressed") == []
    assert flagged(tinyprof.compare(new, base), "improved") == [SOLVE]


def test_new_and_gone_callpaths_and_other_rank_counts(tmp_path, clock):
    base = write_run(tmp_path / "b", clock, 1)
    new = write_run(tmp_path / "n", clock, 2, nranks=8, extra=True)
    frame = tinyprof.compare(base, new)
    io = row(frame, ("main", "io"))
    assert io["status"] == "new" and math.isnan(io["base"]) and io["new"] == pytest.approx(3e-3 / 8)
    assert not io["regressed"] and math.isnan(io["change"])
    assert frame.attrs["notes"] == [ONE_A_SIDE, "rank counts differ (base 4 ranks, new 8 ranks): "
                                    "values are per rank on average"]
    back = tinyprof.compare(new, base)
    assert row(back, ("main", "io"))["status"] == "gone"


def test_mpi_time_and_bytes_are_compared_when_recorded(tmp_path, clock):
    from test_mpi_convert import HALO, REDUCE, make_profile

    p = tinyprof.read(make_profile(tmp_path / "m", clock))
    frame = tinyprof.compare(p, p)
    halo = row(frame, HALO)
    # base and new: the exclusive time outside MPI calls (rank 2 never entered halo)
    assert halo["base"] == pytest.approx((10 + 10 - 49600 - 58000) / 3 / 1e9)   # made-up MPI rows
    assert frame.attrs["outside_mpi"] and frame.attrs["test"] == "none: one run a side"
    assert halo["mpi_bytes_base"] == pytest.approx((4296 + 6000 + 0) / 3)
    assert halo["mpi_time_base"] == halo["mpi_time_new"] == pytest.approx((49600 + 58000) / 3 / 1e9)
    assert row(frame, REDUCE)["mpi_time_change"] == 0.0
    without = tinyprof.compare(write_run(tmp_path / "b", clock, 1), write_run(tmp_path / "n", clock, 2))
    assert "mpi_time_base" not in without.columns


def test_bad_arguments(tmp_path, clock):
    base = write_run(tmp_path / "b", clock, 1)
    with pytest.raises(ValueError, match="no base profile"):
        tinyprof.compare([], base)
    with pytest.raises(ValueError, match="no per-occurrence metric 'mem'"):
        tinyprof.compare(base, base, metric="mem")
    with pytest.raises(tinyprof.FormatError):
        tinyprof.compare(base, tmp_path / "nothing")


# -- the command ------------------------------------------------------------------

def test_the_gate_exits_1_naming_the_regressed_callpath(tmp_path, clock, capsys):
    base = runs(tmp_path, clock, "b", range(3))
    new = runs(tmp_path, clock, "n", range(3, 6), slow=1.25)
    assert main(["compare", "--base", *base, "--new", *new, "--fail-above", "20"]) == 1
    out, err = capsys.readouterr()
    table = out.splitlines()
    assert table[0].startswith("compare: 3 base run(s), 3 new run(s); exclusive time in ms")
    assert table[2].split()[:2] == ["main", "<"] and "REGRESSED" in table[2] and "solve" in table[2]
    assert err.startswith("tinyprof compare: regressed by more than 20%: main < solve: +2")
    assert main(["compare", "--base", *base, "--new", *new, "--fail-above", "30"]) == 0
    assert main(["compare", base[0], base[1], "--fail-above", "5"]) == 0
    assert main(["compare", base[0], new[0]]) == 0          # no gate asked for
    assert main(["compare", "--base", *base, "--new", new[0], "--fail-above", "20"]) == 1   # 3 against 1
    assert main(["compare", "--base", *base, "--new", *new, "--threshold", "40", "--fail-above", "20"]) == 1


@pytest.mark.parametrize("argv, message", [
    (["compare", "X"], "give BASE NEW, or --base PROFILE... --new PROFILE..."),
    (["compare", "X", "Y", "--new", "Z"], "give BASE NEW, or --base PROFILE... --new PROFILE..."),
])
def test_the_command_refuses_bad_input_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"tinyprof compare: {message}\n"


def test_the_command_names_a_bad_file_and_a_bad_metric(tmp_path, clock, capsys):
    base = write_run(tmp_path / "b", clock, 1)
    (tmp_path / "bad").mkdir()
    assert main(["compare", base, str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "bad") in err
    assert main(["compare", base, base, "--metric", "mem"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no per-occurrence metric 'mem'" in err
    with pytest.raises(SystemExit):
        main(["compare", base, base, "--fail-above", "-3"])


MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
APP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_compare_app.py")


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
                    reason="needs mpi4py and mpiexec next to the Python executable")
def test_the_gate_on_real_mpi_runs(tmp_path):
    """Real runs on 4 ranks: one run a side passes the gate, saying it cannot
    tell, whatever a loaded machine does to the sleeps and the barrier's waits.
    Whether a change is flagged depends on the machine's noise, so it is
    proven on runs of known values (test_a_region_made_25_percent_slower_is_flagged_alone)."""
    def run(name: str, slow: float) -> str:
        subprocess.run([MPIEXEC, "-n", "4", sys.executable, APP, str(tmp_path / name), str(slow)],
                       check=True, capture_output=True, timeout=300)
        return str(tmp_path / name)

    base, same, slower = run("base", 1), run("same", 1), run("slower", 2)
    gate = [sys.executable, "-m", "tinyprof.cli", "compare", "--fail-above", "25"]
    for new in (same, slower):
        passed = subprocess.run([*gate, base, new], capture_output=True, text=True, timeout=120)
        assert passed.returncode == 0 and "not gated: one run a side" in passed.stderr, passed.stdout
    frame = tinyprof.compare(base, same)
    assert (frame["base"] >= 0).all() and frame.attrs["outside_mpi"]
    if sites.sites_unavailable() is None:      # call sites: CPython 3.11-3.13 (docs/unannotated.md)
        # The barrier's wait is charged to its call site, which has no time of its own:
        # it comes out of sync's time, never making a negative time outside MPI.
        site = frame[frame["callpath"].map(len) == 3]
        assert len(site) == 1 and site["callpath"].iloc[0][:2] == ("main", "sync")
        assert site["base"].iloc[0] == 0 and site["mpi_time_base"].iloc[0] > 0


# -- read_many ----------------------------------------------------------------------

def test_read_many_reads_in_order_and_names_a_bad_run(tmp_path, clock):
    good = runs(tmp_path, clock, "r", range(3))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "app.0-of-1.tp").write_bytes(b"not a profile\n")
    for threads in (None, 1):
        got = tinyprof.read_many([good[2], good[0], good[1]], threads=threads)
        assert [p.files for p in got] == [tinyprof.read(g).files for g in (good[2], good[0], good[1])]
    with pytest.raises(tinyprof.FormatError) as raised:
        tinyprof.read_many([good[0], str(bad), good[1]])
    assert str(bad) in str(raised.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = tinyprof.read_many([good[0], str(bad), good[1], str(tmp_path / "none")], errors="skip")
    assert [p.files[0] for p in got] == [tinyprof.read(g).files[0] for g in (good[0], good[1])]
    assert [w.category for w in caught] == [RuntimeWarning] * 2
    assert str(caught[0].message).startswith(f"tinyprof: skipped {bad}: {bad}{os.sep}app.0-of-1.tp:1: ")
    assert str(caught[1].message).startswith(f"tinyprof: skipped {tmp_path / 'none'}: ")
    with pytest.raises(ValueError, match="errors must be"):
        tinyprof.read_many(good, errors="ignore")


def test_read_many_gives_each_run_its_metadata(tmp_path, clock):
    outdirs = []
    for k in range(3):
        tinyprof.Profiler("meta", outdir=tmp_path / f"m{k}", metadata={"k": k})
        with Event("main"):
            clock.tick(k + 1)
        outdirs.append(tinyprof.flush())
    got = tinyprof.read_many(outdirs)
    assert [p.metadata["k"] for p in got] == [0, 1, 2]
    assert all("start" in p.metadata and p.metadata["nranks"] == 1 for p in got)


def test_a_custom_metric_is_compared_summed_per_rank(tmp_path, clock):
    from test_convert import make_profile

    p = tinyprof.read(make_profile(tmp_path / "c", clock))
    frame = tinyprof.compare(p, p, metric="mem")
    compute = ("main", "compute")
    given = [v for r in range(p.nranks) for ex in p.series(compute, r, "mem") for v in ex if not math.isnan(v)]
    assert row(frame, compute)["base"] == pytest.approx(sum(given) / p.nranks)
    assert row(frame, compute)["change"] == 0 and not frame["regressed"].any()
    with pytest.raises(ValueError, match="no per-occurrence metric 'tag'"):
        tinyprof.compare(p, p, metric="tag")          # consistent: one value, nothing to sum


def test_one_value_a_side_is_never_flagged_on_size_alone(tmp_path, clock):
    """One rank, one run a side: no noise to test with: nothing flagged, however large."""
    base = write_run(tmp_path / "b", clock, 1, nranks=1)
    new = write_run(tmp_path / "n", clock, 2, nranks=1, slow=2)
    frame = tinyprof.compare(base, new)
    assert frame["p_value"].isna().all() and flagged(frame, "regressed") == []
    assert frame.attrs["notes"] == [ONE_A_SIDE]
