"""Time and efficiency over the kept snapshots of a run (``analysis/snapshot_intervals.py``):
each interval holds the time each region spent in it on every rank, a
``loop=2`` region (one growing value per execution) and an enclosing region
still open at the snapshots alike, and the report's series agree.

A real serial run (MPI capture on, a singleton MPI) with the hot path's
clock injected and explicit snapshot triggers: every time is known."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

import tinyprof
from tinyprof.analysis import snapshot_intervals
from tinyprof.views import report_page

pytest.importorskip("mpi4py")

MS = 1_000_000                   # ns
WORK = [300, 500, 200, 400]      # ms of main<step (loop=2) in each interval, in 4 occurrences
OWN = 3                          # ms of main's own time at the start of each interval
MAIN, STEP = ("main",), ("main", "step")

# Snapshots 1..3 are taken inside main (open), snapshot 4 after it closed.
_RUN = """
    import sys
    from mpi4py import MPI
    import tinyprof
    from tinyprof import annotate

    now = [0]
    annotate.impl.set_clock(lambda: now[0])
    prof = tinyprof.Profiler("s", frequency=3600, outdir={out!r}, keep="all", mpi=True)
    with tinyprof.Event("main"):
        for k, work in enumerate({work!r}, 1):
            now[0] += {own} * {ms}
            for _ in range(4):
                with tinyprof.Event("step", loop=2):
                    now[0] += work * {ms} // 4
            if k < {n}:
                assert prof.snapshot(timeout=60)
    assert prof.snapshot(timeout=60)
    prof.close()
"""


@pytest.fixture
def run(tmp_path, run_python):
    out = str(tmp_path / "s")
    run_python(textwrap.dedent(_RUN).format(out=out, work=WORK, own=OWN, ms=MS, n=len(WORK)),
               tmp_path)
    assert tinyprof.snapshots(out) == [1, 2, 3, 4]
    return out


def _truth(path):
    """What the program did in each interval, in seconds."""
    return [(w + (OWN if path == MAIN else 0)) * MS / 1e9 for w in WORK]


def test_every_interval_holds_a_loop2_region_and_its_open_parent(run):
    frame = tinyprof.pop_history(run)
    for path in (STEP, MAIN):
        rows = frame[frame["callpath"] == path]
        assert list(rows["snapshot"]) == [1, 2, 3, 4], path
        assert list(rows["ranks"]) == [1] * 4
        assert list(rows["runtime"]) == pytest.approx(_truth(path), rel=0.1), path
    # the loop=2 region, closed before each snapshot, exactly
    step = frame[frame["callpath"] == STEP]
    assert list(step["runtime"]) == [w * MS / 1e9 for w in WORK]


def test_the_snapshot_series_has_no_spike(run):
    """The report's exclusive time per interval: main's own time is small in
    every interval (it was the whole run in the interval where main closed)."""
    got = snapshot_intervals.series(run, [1, 2, 3, 4])
    exc = dict(zip(got.callpaths, got.exclusive.T))
    assert list(exc[STEP]) == [w * MS / 1e9 for w in WORK]
    total = got.exclusive.sum(axis=1)
    assert np.all(exc[MAIN] >= 0) and np.all(exc[MAIN] <= 0.1 * total)
    assert list(total) == pytest.approx(_truth(MAIN), rel=0.1)
    # one reading gives the POP history too, as pop_history gives it
    assert got.problem == "" and got.efficiency is not None
    history = snapshot_intervals.history(run)
    for name, column in got.efficiency.items():
        assert list(column) == list(history[name]), name
    # the report draws these numbers
    data = report_page.build(tinyprof.read(run), run)
    names = [c["path"] for c in data["callpaths"]]
    series = {names[s["callpath"]]: s["values"] for s in data["snapshots"]["series"]}
    assert series["main<step"] == report_page.rounded(exc[STEP])
    assert series["main"] == report_page.rounded(exc[MAIN])
    history = {names[s["callpath"]]: s for s in data["pop"]["history"]["series"]}
    assert set(history) == {"main", "main<step"}
    assert all(v is not None for s in history.values() for v in s["parallel_efficiency"])


def test_the_report_reads_each_kept_snapshot_once(run, monkeypatch):
    read = tinyprof.read
    taken = []

    def counted(path, snapshot=None, **kwargs):
        taken.append(snapshot)
        return read(path, snapshot=snapshot, **kwargs)
    for module in (snapshot_intervals, report_page):
        monkeypatch.setattr(module, "read", counted)
    report_page.build(read(run), run)
    assert sorted(taken) == [1, 2, 3, 4]


def test_an_open_region_knows_the_time_of_what_closed_inside_it(tmp_path, clock):
    """Per (callpath, rank): the values, plus, in an execution where a region
    has no value but a region below it has, the known time below it."""
    from tinyprof.runtime import session

    tinyprof.Profiler("k", frequency=3600, outdir=tmp_path / "k", keep="all")
    with tinyprof.Event("main"):                # execution 0: closed
        with tinyprof.Event("solve"):
            clock.tick(5)
        clock.tick(1)
    with tinyprof.Event("main"):                # execution 1: open at the snapshot
        clock.tick(100)                         # its own time: known when it closes
        with tinyprof.Event("solve"):           # open too
            for t in (7, 3):
                with tinyprof.Event("step", loop=2):
                    clock.tick(t)
            assert session.current().snapshotter.take(1)
    profile = tinyprof.read(tmp_path / "k", snapshot=1)
    count, inc = snapshot_intervals.known_time(profile)
    got = {p: (int(count[i, 0]), int(inc[i, 0])) for i, p in enumerate(profile.callpaths)}
    assert got == {MAIN: (1, 6 + 10), ("main", "solve"): (1, 5 + 10),
                   ("main", "solve", "step"): (1, 10)}
