"""The POP metrics (``Profile.pop``, ``tinyprof.pop_history``, ``tinyprof pop``)
on profiles whose every time is known: ranks recorded through the annotation
API with a deterministic clock, written by the flush's own ``build_file``,
with an ``mpi`` section encoded by the codec from exact MPI times. Every
expected number is computed here by hand.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import List, Tuple

import numpy as np
import pytest
from helpers import pop_checks
from helpers.browser import needs_chromium
from helpers.mpi import MPIEXEC, needs_capture_library, needs_mpiexec
from helpers.pop_profile import NRANKS, UNIT, growing, pop_section, write_snapshot
from helpers.profiles import record_ranks, write_profile
from helpers.traces import make_trace

import tinyprof
from tinyprof.analysis import pop as _pop
from tinyprof.analysis import trace as _trace
from tinyprof.analysis.pop import PopError
from tinyprof.analysis.profile import read_runs
from tinyprof.cli import main
from tinyprof.format import hostlist, meta_section
from tinyprof.runtime import collect as _collect

pd = pytest.importorskip("pandas")

Event = tinyprof.Event
Callpath = Tuple[str, ...]
MAIN, COMPUTE, SYNC = ("main",), ("main", "compute"), ("main", "sync")
WORLD = "COMM_WORLD"


def _compute_then_sync(rank: int, clock) -> List[_collect.LocalEvent]:
    """Rank r computes (1 + r/3) units, then waits in a barrier for the slowest (2 units)."""
    with Event("main"):
        with Event("compute"):
            clock.tick(UNIT + rank * UNIT // 3)
        with Event("sync"):
            clock.tick(UNIT - rank * UNIT // 3)
    return _collect.collect(tinyprof.annotate.impl.root())


def _write(outdir, ranks, executions, calls, mpi: bool = True, bounds=((0, 2), (2, NRANKS)),
           meta: bytes = b"") -> str:
    """With ``meta``, file 0 holds that meta section payload, as a run's does."""
    def sections(index: int, lo: int, hi: int):
        lines = [e.path for e in ranks[lo]]
        return [("mpi", pop_section(lines, range(lo, hi), calls))] * mpi + \
            [("meta", meta)] * bool(index == 0 and meta)
    return write_profile(outdir, "pop", [], ranks, executions, list(bounds), sections)


# the barrier's whole time is MPI time: rank r waits 1 - r/3 units
BARRIER = [(SYNC, r, "Barrier", UNIT - r * UNIT // 3) for r in range(NRANKS)]


@pytest.fixture
def balance(tmp_path, clock) -> str:
    tinyprof.Profiler("pop", outdir=tmp_path / "p")
    ranks, executions = record_ranks(NRANKS, _compute_then_sync, clock)
    return _write(tmp_path / "p", ranks, executions, BARRIER)


def test_compute_then_sync_gives_the_must_show_numbers(balance):
    frame = tinyprof.read(balance).pop().set_index("callpath")
    assert list(frame.index) == [MAIN, COMPUTE, SYNC]
    main_ = frame.loc[[MAIN]].iloc[0]
    # useful (1 + r/3) units: mean 1.5, max 2; every rank's main lasts 2 units
    assert main_["ranks"] == NRANKS
    assert main_["runtime"] == pytest.approx(0.6, abs=1e-12)
    assert main_["useful_mean"] == pytest.approx(0.45, abs=1e-12)
    assert main_["useful_max"] == pytest.approx(0.6, abs=1e-12)
    assert main_["load_balance"] == pytest.approx(0.75, abs=1e-12)
    assert main_["communication_efficiency"] == pytest.approx(1.0, abs=1e-12)
    assert main_["parallel_efficiency"] == pytest.approx(
        main_["load_balance"] * main_["communication_efficiency"], abs=1e-12)
    compute = frame.loc[[COMPUTE]].iloc[0]
    assert (compute["load_balance"], compute["communication_efficiency"]) == \
        pytest.approx((0.75, 1.0), abs=1e-12)
    # the barrier: no useful time at all, so all communication inefficiency
    sync = frame.loc[[SYNC]].iloc[0]
    assert sync["runtime"] == pytest.approx(0.3, abs=1e-12)
    assert sync["useful_max"] == 0.0
    assert sync["communication_efficiency"] == 0.0 and sync["parallel_efficiency"] == 0.0
    assert math.isnan(sync["load_balance"])          # 0 / 0: no useful time to balance


def test_callpath_selects_a_subtree_and_hosts_split_the_balance(balance):
    profile = tinyprof.read(balance)
    assert list(profile.pop(callpath=COMPUTE)["callpath"]) == [COMPUTE]
    with pytest.raises(KeyError, match="no callpath 'main<nope'"):
        profile.pop(callpath=("main", "nope"))
    # ranks 0, 1 on host a (useful 1, 4/3 units), ranks 2, 3 on b (5/3, 2)
    frame = profile.pop(hosts=["a", "a", "b", "b"]).set_index("callpath")
    row = frame.loc[[MAIN]].iloc[0]
    assert row["hosts"] == 2
    # TALP: in = busiest node's mean / max = (11/6) / 2; out = mean / busiest = 1.5 / (11/6)
    assert row["load_balance_in"] == pytest.approx(11 / 12, abs=1e-12)
    assert row["load_balance_out"] == pytest.approx(9 / 11, abs=1e-12)
    assert row["load_balance_in"] * row["load_balance_out"] == pytest.approx(row["load_balance"])
    # as --hosts writes them, never a sequence of characters
    text = profile.pop(hosts="a*2,b*2").set_index("callpath")
    assert text.equals(profile.pop(hosts=["a", "a", "b", "b"]).set_index("callpath"))
    with pytest.raises(PopError, match=r"^hosts: 'b\*' is not a host name or NAME\*COUNT$"):
        profile.pop(hosts="a*2,b*")
    same = profile.pop(hosts={0: "a", 1: "b", 2: "a", 3: "b"}).set_index("callpath").loc[[MAIN]]
    assert same.iloc[0]["load_balance_in"] == pytest.approx((2 + 4 / 3) / 2 / 2, abs=1e-12)
    one = profile.pop(hosts=["n"] * NRANKS).set_index("callpath").loc[[MAIN]].iloc[0]
    assert (one["load_balance_in"], one["load_balance_out"]) == pytest.approx((0.75, 1.0))
    with pytest.raises(PopError, match="no host for rank 3"):
        profile.pop(hosts={0: "a", 1: "a", 2: "b"})
    with pytest.raises(PopError, match="2 given for the profile's 4 ranks"):
        profile.pop(hosts=["a", "b"])


def test_the_hosts_the_run_recorded_are_the_default(tmp_path, clock, capsys):
    """A profile whose run metadata names each rank's host (``rank_hosts``,
    ranks 0, 1 on a host whose name holds a comma, 2, 3 on b) gets TALP's
    split without ``hosts``; given hosts win; one host, or a ``rank_hosts``
    that does not fit the profile, gives no split."""
    tinyprof.Profiler("pop", outdir=tmp_path / "p")
    ranks, executions = record_ranks(NRANKS, _compute_then_sync, clock)

    def recorded(rank_hosts: str) -> tinyprof.Profile:
        meta = meta_section.encode({"nranks": NRANKS, "rank_hosts": rank_hosts})
        return tinyprof.read(_write(tmp_path / rank_hosts.replace("*", "x"), ranks, executions,
                                    BARRIER, meta=meta))

    profile = recorded(hostlist.encode(["a,z", "a,z", "b", "b"]))
    assert profile.metadata["rank_hosts"] == "a%2Cz*2,b*2"
    row = profile.pop().set_index("callpath").loc[[MAIN]].iloc[0]
    assert row["hosts"] == 2
    assert (row["load_balance_in"], row["load_balance_out"]) == pytest.approx((11 / 12, 9 / 11), abs=1e-12)
    given = profile.pop(hosts={0: "a", 1: "b", 2: "a", 3: "b"}).set_index("callpath").loc[[MAIN]]
    assert given.iloc[0]["load_balance_in"] == pytest.approx((2 + 4 / 3) / 2 / 2, abs=1e-12)
    path = os.path.dirname(profile.files[0])
    assert main(["pop", path]) == 0 and "LB in" in capsys.readouterr().out
    assert main(["pop", path, "--hosts", "n*4"]) == 0 and "LB in" not in capsys.readouterr().out
    for other in ("vm*4", "a*3", "a*2,b*3", "a%2"):    # one host; then not this profile's ranks
        assert "hosts" not in recorded(other).pop().columns, other


@needs_chromium
def test_the_report_splits_the_balance_over_the_recorded_hosts(tmp_path, clock):
    """The report's efficiency table has TALP's columns when the run spanned
    several hosts (as ``Profile.pop`` and ``tinyprof pop``), drawn by real
    Chromium; on one host it has none."""
    pytest.importorskip("plotly")
    from helpers.browser import Browser

    from tinyprof.views import report_page
    tinyprof.Profiler("pop", outdir=tmp_path / "p")
    ranks, executions = record_ranks(NRANKS, _compute_then_sync, clock)
    pages = {}
    for hosts in ("a*2,b*2", "a*4"):
        meta = meta_section.encode({"nranks": NRANKS, "rank_hosts": hosts})
        where = _write(tmp_path / hosts.replace("*", "x"), ranks, executions, BARRIER, meta=meta)
        pages[hosts] = report_page.write(where, tmp_path / f"{hosts.replace('*', 'x')}.html")
    assert report_page.build(tinyprof.read(tmp_path / "ax4"))["pop"]["columns"][-1] == "parallel_efficiency"
    with Browser(1500, 1000) as b:
        facts = {}
        for hosts, page in pages.items():
            b.open(f"file://{page}")
            b.wait_for("document.body && document.body.dataset.ready === '1'", timeout=120)
            facts[hosts] = b.evaluate("""(() => {
                const t = document.querySelector('#pop-table');
                return { head: [...t.querySelectorAll('thead th')].map(h => h.textContent),
                         main: [...t.querySelector('tbody tr[data-callpath="main"]').children]
                               .map(c => c.textContent) }; })()""")
        assert b.console == []
    two, one = facts["a*2,b*2"], facts["a*4"]
    assert two["head"][5:] == ["load balance", "comm. efficiency", "LB within nodes",
                               "LB across nodes", "parallel efficiency"], two
    # main: LB 0.75 = LB in 11/12 x LB out 9/11; the barrier is all MPI time
    assert two["main"][5:] == ["0.75", "1.00", "0.92", "0.82", "0.75"], two
    assert one["head"][5:] == ["load balance", "comm. efficiency", "parallel efficiency"], one
    assert one["main"][5:] == ["0.75", "1.00", "0.75"], one


SOURCE = ("main", "source")


def _source_on_the_last_rank(rank: int, clock) -> List[_collect.LocalEvent]:
    """Rank 3 alone computes 3 units in ``source``; the others wait for it in a barrier."""
    with Event("main"):
        if rank == NRANKS - 1:
            with Event("source"):
                clock.tick(3 * UNIT)
        with Event("sync"):
            clock.tick(0 if rank == NRANKS - 1 else 3 * UNIT)
    return _collect.collect(tinyprof.annotate.impl.root())


@pytest.fixture
def one_rank(tmp_path, clock) -> str:
    tinyprof.Profiler("pop", outdir=tmp_path / "o")
    ranks, executions = record_ranks(NRANKS, _source_on_the_last_rank, clock)
    calls = [(SYNC, r, "Barrier", 3 * UNIT) for r in range(NRANKS - 1)]
    return _write(tmp_path / "o", ranks, executions, calls)


def test_a_region_on_one_rank_of_four_has_load_balance_a_quarter(one_rank, capsys):
    """POP's basis: the mean over all ranks of the run, a rank that did not
    run the region counting 0. ``source``, 3 units on rank 3 only, is the
    run's whole imbalance: LB 0.25 in pop, show and the report alike."""
    frame = tinyprof.read(one_rank).pop(hosts=["a", "a", "b", "b"]).set_index("callpath")
    source = frame.loc[[SOURCE]].iloc[0]
    assert source["ranks"] == 1 and source["hosts"] == 1
    assert source["useful_mean"] == pytest.approx(0.9 / 4, abs=1e-12)
    assert source["useful_max"] == pytest.approx(0.9, abs=1e-12)
    assert source["load_balance"] == pytest.approx(0.25, abs=1e-12)
    assert source["communication_efficiency"] == pytest.approx(1.0, abs=1e-12)
    assert source["parallel_efficiency"] == pytest.approx(0.25, abs=1e-12)
    # TALP, on the same basis: host b's mean is 1.5 units of rank 3's 3, host a's 0
    assert source["load_balance_in"] == pytest.approx(0.5, abs=1e-12)
    assert source["load_balance_out"] == pytest.approx(0.5, abs=1e-12)
    assert frame.loc[[MAIN]].iloc[0]["load_balance"] == pytest.approx(0.25, abs=1e-12)
    # the numbers as analysis computes them, for every view
    from tinyprof.analysis import values
    profile = tinyprof.read(one_rank)
    summary = values.summary(profile)
    i = profile.callpaths.index(SOURCE)
    assert (summary.ranks[i], summary.slowest[i], summary.minimum[i]) == (1, 3, 0.0)
    assert (summary.mean[i], summary.maximum[i], summary.exclusive_mean[i]) == \
        pytest.approx((0.225, 0.9, 0.225), abs=1e-12)
    assert (summary.share[i], summary.imbalance[i]) == pytest.approx((0.25, 4.0), abs=1e-12)
    assert summary.load_balance is not None and summary.load_balance[i] == pytest.approx(0.25)
    assert values.run_times(profile, values.aggregate(profile)) == pytest.approx([0.9] * NRANKS)
    frame = _pop.pop(profile, hosts=["a", "a", "b", "b"])
    assert _pop.worst_first(frame) == [MAIN, SYNC, SOURCE] and _pop.several_hosts(frame)
    # tinyprof pop: below main, the two regions at 0.00 and 0.25, worst first
    assert main(["pop", one_rank]) == 0
    out = capsys.readouterr().out
    assert "mean over all 4 ranks" in out.splitlines()[0]
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:-2]}
    assert list(rows) == ["main", "sync", "source"]
    assert rows["source"][1:4] == ["1/4", "900.000", "225.000"]         # ms
    assert rows["source"][5:] == ["0.25", "1.00", "0.25"]
    # tinyprof show: mean, % run, imbalance and LB on that one basis
    assert main(["show", one_rank]) == 0
    out = capsys.readouterr().out
    assert "min, mean, max: over all 4 ranks" in out.splitlines()[0]
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:5]}
    assert rows["source"][1:] == ["1/4", "0.000", "225.000", "900.000", "225.000", "25.0", "4.00x",
                                  "rank", "3", "0.25"]
    assert rows["sync"][1:5] == ["4/4", "0.000", "675.000", "900.000"]
    # the report's data: the same row, flagged (in red below 0.8, worst first)
    from tinyprof.views import report_page
    built = report_page.build(tinyprof.read(one_rank))
    data = built["pop"]
    at = {name: k + 1 for k, name in enumerate(data["columns"])}
    names = [p["path"] for p in built["callpaths"]]
    rows = {names[r[0]]: r for r in data["rows"]}
    assert [names[r[0]] for r in data["rows"]] == ["main", "main<sync", "main<source"]
    assert rows["main<source"][at["load_balance"]] == pytest.approx(0.25)
    assert rows["main<source"][at["parallel_efficiency"]] == pytest.approx(0.25)
    # its call tree: show's numbers, which the page only lays out
    k = names.index("main<source")
    assert {key: column[k] for key, column in built["stats"].items()} == {
        "ran": 1, "inc": 0.225, "exc": 0.225, "share": 0.25, "imbalance": 4.0, "max": 0.9, "slowest": 3}


def test_every_view_states_one_basis_for_a_mean(one_rank, capsys):
    """``compare`` and ``show`` give ``source`` (0.9 s on rank 3 of 4) the
    same mean, 0.225 s over all ranks of the run, and both say so."""
    assert main(["compare", one_rank, one_rank]) == 0
    out = capsys.readouterr().out
    assert "mean over all ranks of the run (a rank that did not run a callpath counts 0)" \
        in out.splitlines()[0]
    source = next(line.split() for line in out.splitlines() if line.startswith("main < source"))
    assert source[3:6] == ["both", "225.000", "225.000"]          # ms
    frame = tinyprof.compare(one_rank, one_rank).set_index("callpath")
    assert frame.loc[[SOURCE]].iloc[0]["base"] == pytest.approx(0.225, abs=1e-12)

def test_mpi_time_of_nested_regions_counts_in_their_parents(tmp_path, clock):
    """Useful time is inclusive: MPI time charged to a child (and to the
    parent itself) comes off the parent's useful time."""
    tinyprof.Profiler("pop", outdir=tmp_path / "n")
    ranks, executions = record_ranks(NRANKS, _compute_then_sync, clock)
    calls = BARRIER + [(MAIN, r, "Comm_dup", 10_000_000) for r in range(NRANKS)]
    frame = tinyprof.read(_write(tmp_path / "n", ranks, executions, calls)).pop().set_index("callpath")
    assert frame.loc[[MAIN]].iloc[0]["useful_max"] == pytest.approx(0.59, abs=1e-12)
    assert frame.loc[[MAIN]].iloc[0]["useful_mean"] == pytest.approx(0.44, abs=1e-12)


SCRIPT, MODULE = ("app.py",), ("app.py", "<module> (app.py:1)")
WORK, WAIT = MODULE + ("work (app.py:3)",), MODULE + ("MPI_Barrier",)


def _sampled(rank: int, clock) -> List[_collect.LocalEvent]:
    """The shape of an unannotated run's samples (docs/unannotated.md): rank
    r's script computes (1 + r/3) units in ``work`` and waits the rest of 2
    units in a Barrier, sampled as ``MPI_Barrier``. Its calls are charged to
    the script's region (in a real run, to their sites, siblings of the
    sampled frames): none below a frame."""
    with Event(SCRIPT[0]):
        with Event(MODULE[1]):
            with Event(WORK[2]):
                clock.tick(UNIT + rank * UNIT // 3)
            with Event(WAIT[2]):
                clock.tick(UNIT - rank * UNIT // 3)
        with Event("MPI_Bcast"):            # an event's name, not a sample: useful time
            clock.tick(UNIT // 10)
    return _collect.collect(tinyprof.annotate.impl.root())


def test_a_sampled_frame_has_its_samples_in_mpi_calls_as_mpi_time(tmp_path, clock):
    """Below a sampled frame the capture charged nothing; the samples that
    ended in an MPI call are its MPI time. Where the capture charged time
    (the script's region) that exact time counts, not the samples' too."""
    tinyprof.Profiler("pop", outdir=tmp_path / "s")
    ranks, executions = record_ranks(NRANKS, _sampled, clock)
    calls = [(SCRIPT, r, "Barrier", UNIT - r * UNIT // 3 + 5_000_000) for r in range(NRANKS)]
    frame = tinyprof.read(_write(tmp_path / "s", ranks, executions, calls)).pop().set_index("callpath")
    row = {path: frame.loc[[path]].iloc[0] for path in (SCRIPT, MODULE, WORK, WAIT)}
    # the frame: useful 1 + r/3 units of its 2 units: LB 0.75 = 1.5 / 2, no communication loss
    assert (row[MODULE]["useful_mean"], row[MODULE]["useful_max"]) == pytest.approx((0.45, 0.6), abs=1e-12)
    assert row[MODULE]["load_balance"] == pytest.approx(0.75, abs=1e-12)
    assert row[MODULE]["communication_efficiency"] == pytest.approx(1.0, abs=1e-12)
    assert row[WORK]["useful_mean"] == pytest.approx(0.45, abs=1e-12)
    # the wait is all MPI time: no useful time
    assert (row[WAIT]["runtime"], row[WAIT]["useful_max"]) == (pytest.approx(0.3, abs=1e-12), 0.0)
    assert row[WAIT]["communication_efficiency"] == 0.0
    # the script: the capture's own barrier time (5 ms more a rank than sampled), and the
    # event named MPI_Bcast (0.03 s) is the script's useful time
    assert (row[SCRIPT]["useful_mean"], row[SCRIPT]["useful_max"]) == pytest.approx(
        (0.475, 0.625), abs=1e-12)
    assert list(_pop.sampled_waits([WAIT, WORK, SCRIPT + ("MPI_Bcast",), ("MPI_Barrier",),
                                    MODULE + ("MPI_Barrier", "x")])) == [True] + [False] * 4


def test_without_mpi_capture_one_clear_line(tmp_path, clock, capsys):
    tinyprof.Profiler("pop", outdir=tmp_path / "q")
    ranks, executions = record_ranks(NRANKS, _compute_then_sync, clock)
    where = _write(tmp_path / "q", ranks, executions, BARRIER, mpi=False)
    with pytest.raises(PopError, match=r"holds no MPI data.*Profiler\(mpi=True\)"):
        tinyprof.read(where).pop()
    assert main(["pop", where]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tinyprof: profile 'pop' holds no MPI data")


# -- over time ------------------------------------------------------------------------

STEPS = 4


def test_pop_history_shows_the_balance_degrade_step_by_step(tmp_path, clock):
    """Snapshot k holds steps 0..k-1 (the cumulative values a run writes);
    the interval ending at snapshot k is step k-1 alone: load balance
    (1 + (k-1)/2) / (1 + (k-1)), communication efficiency 1."""
    out = tmp_path / "g"
    tinyprof.Profiler("g", outdir=out)
    for k in range(1, STEPS + 1):
        ranks, executions = record_ranks(NRANKS, lambda r, c: growing(r, c, k), clock)
        write_snapshot(out, k, ranks, executions)
    frame = tinyprof.pop_history(out)
    step = frame[frame["callpath"] == ("main", "step")]
    assert list(step["snapshot"]) == [1, 2, 3, 4] and list(step["created"]) == [
        f"2026-11-26T10:00:0{k}Z" for k in range(1, 5)]
    assert list(step["load_balance"]) == pytest.approx([1.0, 0.75, 2 / 3, 0.625], abs=1e-12)
    assert list(step["communication_efficiency"]) == pytest.approx([1.0] * 4, abs=1e-12)
    assert list(step["runtime"]) == pytest.approx([0.3, 0.6, 0.9, 1.2], abs=1e-12)
    # main stays open in every snapshot: each interval holds the time of what
    # closed inside it, here all of its time (it has none of its own)
    main = frame[frame["callpath"] == ("main",)]
    for name in ("snapshot", "ranks", "runtime", "load_balance", "communication_efficiency"):
        assert list(main[name]) == list(step[name]), name
    sub = tinyprof.pop_history(out, callpath=("main", "step", "sync"), numbers=[2, 4])
    # intervals 0-2 and 2-4: sync holds only barrier time
    assert list(sub["snapshot"]) == [2, 4] and list(sub["useful_max"]) == [0.0, 0.0]
    # the snapshots oldest first, whatever the order given
    assert tinyprof.pop_history(out, numbers=[4, 2, 4]).equals(tinyprof.pop_history(out, numbers=[2, 4]))
    with pytest.raises(KeyError, match="no callpath 'main<nope' in the snapshots of"):
        tinyprof.pop_history(out, callpath=("main", "nope"))


@needs_chromium
def test_pop_history_splits_the_balance_on_the_recorded_hosts(tmp_path, clock):
    """The snapshots' run metadata puts ranks 0, 1 on host a and 2, 3 on b:
    pop_history splits the balance of each interval without ``hosts``."""
    out = tmp_path / "g"
    tinyprof.Profiler("g", outdir=out)
    meta = meta_section.encode({"rank_hosts": "a*2,b*2"})
    for k in range(1, 3):
        ranks, executions = record_ranks(NRANKS, lambda r, c: growing(r, c, k), clock)
        write_snapshot(out, k, ranks, executions, meta)
    step = tinyprof.pop_history(out, callpath=("main", "step"))
    step = step[step["callpath"] == ("main", "step")]
    # the interval ending at snapshot 2 is step 1: useful 1, 4/3, 5/3, 2 units
    assert list(step["hosts"]) == [2, 2]
    assert list(step["load_balance_in"]) == pytest.approx([1.0, 11 / 12], abs=1e-12)
    assert list(step["load_balance_out"]) == pytest.approx([1.0, 9 / 11], abs=1e-12)
    assert tinyprof.pop_history(out, hosts="a*2,b*2").equals(tinyprof.pop_history(out))
    given = tinyprof.pop_history(out, callpath=("main", "step"), hosts=["n"] * NRANKS)
    assert list(given[given["callpath"] == ("main", "step")]["hosts"]) == [1, 1]
    # the report draws both over time, in real Chromium
    pytest.importorskip("plotly")
    from helpers.browser import Browser

    from tinyprof.views import report_page
    final = tmp_path / "final"
    ranks, executions = record_ranks(NRANKS, lambda r, c: growing(r, c, 2), clock)
    _write(final, ranks, executions, [], meta=meta)
    data = report_page.build(tinyprof.read(final), str(out))
    series = {data["callpaths"][s["callpath"]]["path"]: s for s in data["pop"]["history"]["series"]}
    assert series["main<step"]["load_balance_in"] == pytest.approx([1.0, 11 / 12], abs=1e-3)
    assert series["main<step"]["load_balance_out"] == pytest.approx([1.0, 9 / 11], abs=1e-3)
    page = tmp_path / "g.html"
    page.write_text(report_page.render(data))
    with Browser(1500, 1400) as b:
        b.open(f"file://{page}")
        b.wait_for("document.body && document.body.dataset.ready === '1'", timeout=120)
        plots = b.evaluate("""[...document.querySelectorAll('#efficiency .js-plotly-plot')]
            .map(p => [p.id, p.data.map(t => t.y.length)])""")
        assert b.console == []
    assert [p[0] for p in plots] == ["pop-history-pe", "pop-history-lb", "pop-history-lb-in",
                                     "pop-history-lb-out"]
    assert all(lengths and set(lengths) == {2} for _, lengths in plots), plots


def test_snapshots_without_mpi_data_one_clear_line_everywhere(tmp_path, clock, capsys):
    """Snapshots without MPI data (an older C++ header's) before one with it:
    pop_history and ``tinyprof pop --over-time`` say so in one line; the
    report keeps its table and says so in place of the metrics over time."""
    out = tmp_path / "g"
    tinyprof.Profiler("g", outdir=out)
    for k in range(1, 4):
        ranks, executions = record_ranks(NRANKS, lambda r, c: growing(r, c, k), clock)
        write_snapshot(out, k, ranks, executions, mpi=k == 3)
    says = f"{out}: snapshot 1 holds no MPI data"
    with pytest.raises(PopError, match=says):
        tinyprof.pop_history(out)
    for argv in (["--over-time"], ["--over-time", "--callpath", "main/step"]):
        assert main(["pop", str(out), *argv]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"tinyprof: {says}"), err
    from tinyprof.views import report_page
    built = report_page.build(tinyprof.read(out), str(out))
    data = built["pop"]
    assert data["history"] is None and data["problem"].startswith(says)
    rows = {built["callpaths"][row[0]]["path"]: row[1:] for row in data["rows"]}
    # steps 0-2: rank r computes 3 + r units
    assert rows["main<step"][data["columns"].index("load_balance")] == pytest.approx(0.75)
    assert main(["pop", str(out), "--over-time", "--callpath", "main/nope"]) == 1


def test_pop_history_without_snapshots_one_clear_line(tmp_path, balance, capsys):
    with pytest.raises(PopError, match="no complete snapshot"):
        tinyprof.pop_history(tmp_path / "none")
    assert main(["pop", balance, "--over-time"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no complete snapshot" in err


# -- on real MPI ranks ---------------------------------------------------------------

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/


def _run_app(outdir, mode: str, unit: float) -> None:
    proc = subprocess.run([MPIEXEC, "-n", str(NRANKS), sys.executable,
                           os.path.join(HERE, "_pop_app.py"), str(outdir), mode, str(unit)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_mpiexec
@needs_capture_library
def test_compute_then_sync_on_real_ranks(tmp_path, capsys):
    _run_app(tmp_path / "b", "balance", 0.5)
    profile = tinyprof.read(tmp_path / "b")
    assert pop_checks.balance(profile, NRANKS) == []
    main_ = profile.pop().set_index("callpath").loc[[MAIN]].iloc[0]
    assert main(["pop", str(tmp_path / "b")]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:-2]}
    assert list(rows) == ["main", "sync", "compute"]         # the worst sibling first
    assert float(rows["main"][5]) == pytest.approx(main_["load_balance"], abs=0.005)


@needs_mpiexec
@needs_capture_library
def test_a_region_on_one_real_rank_is_flagged_everywhere(tmp_path, capsys):
    """4 real ranks, ``source`` on rank 3 only (3 units) while the others wait
    in a barrier: its load balance is about 0.25 in ``tinyprof pop``,
    ``tinyprof show`` and the report's data, and it is flagged (worst first
    among siblings with useful time; the report: red below 0.8)."""
    _run_app(tmp_path / "o", "one", 0.2)
    profile = tinyprof.read(tmp_path / "o")
    row = _pop_row(profile.pop(), SOURCE)
    assert row.ranks == 1 and row.load_balance == pytest.approx(0.25, abs=pop_checks.TOLERANCE)
    assert main(["pop", str(tmp_path / "o")]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:-2]}
    assert list(rows)[1:] == ["sync", "source"]            # both below main's 0.8, worst first
    assert float(rows["source"][5]) == pytest.approx(0.25, abs=pop_checks.TOLERANCE)
    assert float(rows["source"][-1]) < 0.8
    assert main(["show", str(tmp_path / "o")]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:5]}
    assert rows["source"][1] == "1/4"
    assert float(rows["source"][-1]) == pytest.approx(0.25, abs=pop_checks.TOLERANCE)
    assert float(rows["source"][7].rstrip("x")) == pytest.approx(4.0, abs=0.3)    # imbalance
    from tinyprof.views import report_page
    data = report_page.build(profile, str(tmp_path / "o"))
    names = [p["path"] for p in data["callpaths"]]
    at = {name: k + 1 for k, name in enumerate(data["pop"]["columns"])}
    shown = {names[r[0]]: r for r in data["pop"]["rows"]}["main<source"]
    assert shown[at["load_balance"]] == pytest.approx(0.25, abs=pop_checks.TOLERANCE)
    assert shown[at["parallel_efficiency"]] < 0.8


@needs_chromium
@needs_mpiexec
@needs_capture_library
def test_growing_imbalance_over_real_snapshots(tmp_path):
    _run_app(tmp_path / "g", "growing", 0.25)
    assert pop_checks.growing(tmp_path / "g") == []
    # the history page of these snapshots: each interval's MPI time and bytes
    # per callpath are what its snapshot added to the one before
    from tinyprof.views import history_page
    data = history_page.build(*read_runs([str(tmp_path / "g")], of_snapshots=True))
    paths = [tuple(c["path"].split("<")) for c in data["callpaths"]]
    numbers = tinyprof.snapshots(tmp_path / "g")
    assert data["runs"] == [f"snapshot {k}" for k in numbers] and len(numbers) == 4

    def mpi_of(k: int, key: str) -> np.ndarray:
        profile = tinyprof.read(tmp_path / "g", snapshot=k)
        sums = profile.mpi.groupby("callpath")[key].sum()
        return np.array([sums.get(p, 0.0) / NRANKS for p in paths])
    for key in ("time", "bytes"):
        cumulative = [mpi_of(k, key) for k in numbers]
        added = [cumulative[0]] + [b - a for a, b in zip(cumulative, cumulative[1:])]
        shown = [[dict(zip(data["mpi"]["columns"], row)).get(c, 0.0) for c in range(len(paths))]
                 for row in data["mpi"][key]]
        assert np.allclose(shown, added, rtol=1e-4, atol=1e-12), key
    sync = paths.index(("main", "step", "sync"))
    assert all(dict(zip(data["mpi"]["columns"], row)).get(sync, 0.0) > 0 for row in data["mpi"]["time"])
    # the report's efficiency section: the table, worst sibling first, and the
    # metrics per interval, drawn by real Chromium
    pytest.importorskip("plotly")
    from helpers.browser import Browser

    from tinyprof.views import report_page
    page = tmp_path / "g.html"
    report_page.write(tmp_path / "g", page)
    with Browser(1500, 1400) as b:
        b.open(f"file://{page}")
        b.wait_for("document.body && document.body.dataset.ready === '1'", timeout=120)
        facts = b.evaluate("""(() => ({
            rows: [...document.querySelectorAll('#pop-table tbody tr')].map(r => r.dataset.callpath),
            plots: [...document.querySelectorAll('#efficiency .js-plotly-plot')].map(p => [p.id,
                p.data.map(t => t.y.length)]) }))()""")
        assert b.console == []
    assert facts["rows"] == ["main", "main<step", "main<step<sync", "main<step<compute"]
    assert [p[0] for p in facts["plots"]] == ["pop-history-pe", "pop-history-lb"]
    assert all(lengths and set(lengths) == {4} for _, lengths in facts["plots"]), facts


def test_show_gets_a_load_balance_column(balance, capsys):
    """``tinyprof show``: the imbalance of inclusive time hides what the barrier
    absorbs (main: 1.00x); the load balance of useful time shows it."""
    assert main(["show", balance]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[-1] == "LB"
    rows = {line.split()[0]: line.split() for line in lines[2:5]}
    assert rows["main"][7] == "1.00x" and rows["main"][-1] == "0.75"
    assert rows["compute"][-1] == "0.75" and rows["sync"][-1] == "-"


# -- from a trace: serialization and transfer -----------------------------------------

def _split(trace):
    """The POP columns of a hand-made trace, its times summed by hand: inclusive
    time per (callpath, rank) from the occurrences, MPI time of the calls in
    the callpath and below, and the ideal network's inclusive times."""
    shape = (len(trace.callpaths), trace.nranks)
    count, inc, mpi = np.zeros(shape, np.int64), np.zeros(shape), np.zeros(shape)
    for path, rank, start, end in zip(*(trace.ev[k] for k in ("path", "rank", "start", "end"))):
        count[path, rank] += 1
        inc[path, rank] += (end - start) * 1e-9
    for path, rank, start, end in zip(*(trace.calls[k] for k in ("path", "rank", "start", "end"))):
        for i, above in enumerate(trace.callpaths):
            if trace.callpaths[path][:len(above)] == above:
                mpi[i, rank] += (end - start) * 1e-9
    frame = pd.DataFrame(_pop.columns(trace.callpaths, count, inc, mpi, ideal=_trace.ideal_inclusive(trace)))
    return {p: r for p, r in zip(frame["callpath"], frame.itertuples())}


def _check_product(row) -> None:
    assert pop_checks.split_product(row) == []


def test_a_token_pipeline_is_pure_serialization():
    """Rank r receives the token when r-1 sends it (sends take no time),
    works 10 ns, sends it on: each rank computes 10 of the run's 30 ns, the
    others wait. The ideal network changes nothing: transfer 1, serialization 1/3."""
    events = [(0, MAIN, 0, 10), (0, ("main", "work"), 0, 10),
              (1, MAIN, 0, 20), (1, ("main", "work"), 10, 20),
              (2, MAIN, 0, 30), (2, ("main", "work"), 20, 30)]
    calls = [(0, MAIN, "Send", 10, 10, [("s", 1, 5, 8)]),
             (1, MAIN, "Recv", 0, 10, [("r", 0, 5, 8)]), (1, MAIN, "Send", 20, 20, [("s", 2, 5, 8)]),
             (2, MAIN, "Recv", 0, 20, [("r", 1, 5, 8)])]
    trace = make_trace(3, events, calls)
    start, end, _ = _trace.ideal_replay(trace)
    assert list(end) == [10, 10, 20, 20]          # the calls in rank order: nothing moves
    row = _split(trace)[MAIN]
    assert row.ideal_runtime == pytest.approx(30e-9)
    assert row.transfer_efficiency == pytest.approx(1.0, abs=1e-12)
    assert row.serialization_efficiency == pytest.approx(1 / 3, abs=1e-12)
    assert row.load_balance == pytest.approx(1.0, abs=1e-12)      # everyone computes 10 ns
    _check_product(row)


def test_balanced_ranks_exchanging_large_messages_are_pure_transfer():
    """4 ranks on a ring each compute 10 ns, then a Sendrecv with their
    neighbours takes 20 ns of transfer. On the ideal network every
    Sendrecv ends at 10: serialization 1, transfer 10 / 30."""
    events, calls = [], []
    for r in range(4):
        events += [(r, MAIN, 0, 30), (r, ("main", "work"), 0, 10)]
        calls.append((r, MAIN, "Sendrecv", 10, 30, [("s", (r + 1) % 4, 1, 1 << 20),
                                                     ("r", (r - 1) % 4, 1, 1 << 20)]))
    row = _split(make_trace(4, events, calls))[MAIN]
    assert row.ideal_runtime == pytest.approx(10e-9)
    assert row.serialization_efficiency == pytest.approx(1.0, abs=1e-12)
    assert row.transfer_efficiency == pytest.approx(1 / 3, abs=1e-12)
    _check_product(row)


def test_a_collective_after_imbalanced_work_splits_into_both():
    """Rank r works 10 (r + 1) ns, then an Allreduce that ends 10 ns after
    the last arrival (at 40), then a Bcast from rank 2, which computes 5 ns
    more first: on the ideal network the Allreduce ends at the last arrival
    (30) and the Bcast when its root arrives (35): serialization 1 (the
    useful 35 ns of rank 2 fill the ideal run), transfer 35/50."""
    events, calls = [], []
    for r in range(3):
        events += [(r, MAIN, 0, 50), (r, ("main", "work"), 0, 10 * (r + 1))]
        calls.append((r, MAIN, "Allreduce", 10 * (r + 1), 40))
        calls.append((r, MAIN, "Bcast", 40 + (5 if r == 2 else 0), 50, 2))
    trace = make_trace(3, events, calls)
    start, end, _ = _trace.ideal_replay(trace)
    # per rank: Allreduce ends when the last (rank 2) arrives at 30; Bcast waits for root 2 at 35
    assert list(end) == [30, 35, 30, 35, 30, 35]
    row = _split(trace)[MAIN]
    # useful: rank 0 computes 10, rank 1 20, rank 2 30 and 5 more before its Bcast
    assert row.load_balance == pytest.approx((10 + 20 + 35) / 3 / 35, abs=1e-12)
    assert row.ideal_runtime == pytest.approx(35e-9)
    assert row.serialization_efficiency == pytest.approx(1.0, abs=1e-12)
    assert row.transfer_efficiency == pytest.approx(35 / 50, abs=1e-12)
    _check_product(row)


def test_receives_waiting_for_each_other_are_one_clear_line():
    """Each rank's receive is matched to the send the other makes after its own
    receive: no run gives that (it would hang), a damaged file can."""
    calls = [(r, MAIN, op, t0, t1, [(kind, 1 - r, 5, 8)])
             for r in range(2) for op, t0, t1, kind in (("Recv", 0, 10, "r"), ("Send", 10, 11, "s"))]
    trace = make_trace(2, [(0, MAIN, 0, 11), (1, MAIN, 0, 11)], calls)
    with pytest.raises(ValueError, match="cannot be replayed: rank 0's Recv waits for a call "
                                         "that never comes"):
        _trace.ideal_replay(trace)


@needs_mpiexec
@needs_capture_library
def test_pipeline_and_transfer_on_real_ranks(tmp_path, capsys):
    """Traced runs of tests/_pop_app.py on 4 ranks: a token pipeline (each
    rank computes 0.2 s with the token) waits for nothing but the token:
    serialization 1/4, transfer 1; balanced ranks (0.2 s each) that exchange
    8 x 16 MB lose to transfer what the ideal network gives back."""
    _run_app(tmp_path / "p", "pipeline", 0.2)
    assert pop_checks.pipeline(tinyprof.read(tmp_path / "p")) == []
    assert main(["pop", str(tmp_path / "p"), "--trace"]) == 0
    head = capsys.readouterr().out.splitlines()[1].split()
    assert head[-6:] == ["ser", "eff", "trf", "eff", "par", "eff"], head
    _run_app(tmp_path / "x", "transfer", 0.2)
    assert pop_checks.transfer(tinyprof.read(tmp_path / "x")) == []


def _pop_row(frame, path):
    return next(r for p, r in zip(frame["callpath"], frame.itertuples()) if p == path)


def test_the_traced_demo_splits_its_communication_efficiency(traced_demo, tmp_path):
    """The whole run (main) is never longer on the ideal network (but for the
    clocks' alignment, microseconds); a region inside it may be: a rank that
    caught up on the ideal network can wait longer in it (docs/pop.md)."""
    frame = traced_demo.pop(trace=True)
    for row in frame.itertuples():
        if row.communication_efficiency > 0:
            _check_product(row)
    main_ = _pop_row(frame, MAIN)
    assert 0 < main_.transfer_efficiency <= 1 + 1e-3, main_
    from tinyprof.views import report_page
    data = report_page.build(traced_demo)
    assert data["pop"]["columns"][-2:] == ["serialization_efficiency", "transfer_efficiency"]
    assert len(data["pop"]["rows"][0]) == 1 + 9


def test_bad_input_to_tinyprof_pop_is_one_line(balance, tmp_path, capsys):
    for argv, status, says in (
            (["--trace"], 1, "no trace: record with Profiler(trace=True)"),
            (["--hosts", "a*3"], 1, "--hosts: 3 given for the profile's 4 ranks"),
            (["--hosts", "a*99999999999999"], 1, "--hosts: more than the profile's 4 ranks"),
            (["--hosts", "a*x,b"], 1, "--hosts: 'a*x' is not a host name or NAME*COUNT"),
            (["--callpath", "main/nope"], 1, "no callpath 'main/nope' in profile 'pop'"),   # as given
            (["--over-time", "--trace"], 1, "--over-time has no --trace")):
        assert main(["pop", balance, *argv]) == status, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, (argv, err)
    assert main(["pop", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing" in err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pop.0-of-1.tp").write_bytes(b"tinyprof 3\nnot a profile\n")
    assert main(["pop", str(broken / "pop.0-of-1.tp")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pop.0-of-1.tp" in err


def test_show_and_pop_need_no_pandas(balance, run_python, tmp_path):
    """pandas is an extra; numpy is all `tinyprof show` and `tinyprof pop` need."""
    proc = run_python(f"""
        import sys
        sys.modules["pandas"] = None          # import pandas raises ImportError
        from tinyprof.cli import main
        assert main(["show", {balance!r}]) == 0
        assert main(["pop", {balance!r}, "--hosts", "a*2,b*2"]) == 0
        """, cwd=tmp_path)
    assert "  0.75" in proc.stdout and "LB in" in proc.stdout, proc.stdout
