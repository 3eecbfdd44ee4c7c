"""The MPI flush at sizes too big for a pytest process per rank, and when the
flush is (not) collective.

P = 16 and 33 run tests/mpi/check_large.py under mpiexec, one launch per P,
checking every aggregator count from 1 to P, the default and a wrong hint.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tinyprof.format.output_dir import file_name

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")

needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
    reason="needs mpi4py and mpiexec next to the Python executable (pip install mpi4py mpich)")


@needs_mpi
@pytest.mark.parametrize("nranks", [16, 33])
def test_every_aggregator_count_at_large_sizes(tmp_path, nranks):
    proc = subprocess.run(
        [MPIEXEC, "-n", str(nranks), sys.executable, os.path.join(HERE, "mpi", "check_large.py"),
         str(tmp_path / "out")],
        capture_output=True, text=True, timeout=240,
        env=dict(os.environ, TINYPROF_AGGREGATORS=""))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"ok: {nranks} ranks"), proc.stdout
    default = max(1, nranks // 16)     # the last flush of the sweep; older sets removed
    assert sorted(os.listdir(tmp_path / "out")) == ["hint"] + [
        file_name("wl", i, default) for i in range(default)] + ["wl.run"]


RECORD = """
    import sys
    import tinyprof
    tinyprof.Profiler("solo", outdir="out")
    with tinyprof.Event("main"):
        pass
    assert tinyprof.flush() == "out"
    p = tinyprof.read("out")
    assert (p.nranks, p.callpaths, p.files) == (1, [("main",)], ["out/solo.0-of-1.tp"]), p
"""


def test_tinyprof_never_imports_mpi4py(run_python, tmp_path):
    run_python("import sys, tinyprof\nassert 'mpi4py' not in sys.modules, sorted(sys.modules)",
               cwd=tmp_path)


def test_flush_works_when_mpi4py_cannot_be_imported(run_python, tmp_path):
    run_python("import sys\nsys.modules['mpi4py'] = None   # import mpi4py raises ImportError\n"
               + RECORD.replace("\n    ", "\n"), cwd=tmp_path)


@needs_mpi
def test_flush_is_single_process_while_mpi_is_not_initialised(run_python, tmp_path):
    run_python("import mpi4py\nmpi4py.rc.initialize = False\nfrom mpi4py import MPI\n"
               + RECORD.replace("\n    ", "\n")
               + "from tinyprof.runtime import session\n"
               + "assert not MPI.Is_initialized() and session.current().last_flush is None",
               cwd=tmp_path)


@needs_mpi
def test_flush_is_collective_once_the_application_initialised_mpi(run_python, tmp_path):
    run_python("from mpi4py import MPI\n" + RECORD.replace("\n    ", "\n")
               + "from tinyprof.runtime import session\n"
               + "stats = session.current().last_flush\n"
               + "assert stats.sync_path == 'common' and stats.written",
               cwd=tmp_path)


@needs_mpi
def test_demo_runs_on_three_ranks_and_summarises(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tinyprof.demo", "--run", "-n", "3", "--steps", "20", "heat"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import tinyprof
    p = tinyprof.read(tmp_path / "heat")
    assert p.nranks == 3 and p.metrics == [("kind", True), ("bytes", False)]
    assert sorted(p.callpaths) == sorted([("main",)] + [("main", e) for e in (
        "init", "halo", "stencil", "residual", "boundary")])
    ran = [r for r in range(3) if any(p.series(("main", "boundary"), r))]
    assert ran == [0, 2]                                    # the edges of the plate only
    assert [len(p.series(("main", "halo"), r)[0]) for r in range(3)] == [20, 20, 20]
    assert p.series(("main", "halo"), 1, "bytes")[0][0] == 2 * 2 * 256 * 8
    assert p.value(("main", "halo"), "kind") == 2
    # The summary line of each callpath: ranks, min, mean, max of the totals over all
    # ranks of the run (a rank that did not run it counts 0), mean exclusive time,
    # % of the run, imbalance (max/mean), slowest rank; one unit; with MPI capture
    # (the demo's default) the POP load balance.
    out = proc.stdout.splitlines()          # the application's line, a title, the header
    assert out[2].split()[:3] == ["callpath", "ranks", "min"]
    unit = out[1].split("times in ")[1].split()[0]
    summary = out[3:out.index("")]                         # then the hint, the MPI table
    lines = {line.split()[0]: line.split() for line in summary}
    scale = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
    run = sum(sum(map(sum, p.series(("main",), r))) for r in range(3))
    balance = dict(zip(p.pop()["callpath"], p.pop()["load_balance"]))
    for path in p.callpaths:
        totals = {r: sum(map(sum, p.series(path, r))) for r in range(3)}
        mean = sum(totals.values()) / 3
        cells = lines[path[-1]]
        assert cells[1] == f"{sum(any(p.series(path, r)) for r in range(3))}/3"
        assert [float(c) for c in cells[2:5]] == [
            round(v / scale, 3) for v in (min(totals.values()), mean, max(totals.values()))]
        assert float(cells[6]) == round(100 * sum(totals.values()) / run, 1)
        assert cells[7] == f"{max(totals.values()) / mean:.2f}x"
        assert cells[8:10] == ["rank", str(max(totals, key=totals.get))]
        assert cells[10:] == [f"{balance[path]:.2f}"]
    # The exclusive time: a leaf's is its inclusive time; main's what its children leave.
    assert lines["halo"][5] == lines["halo"][3]
    kids = [c for c in p.callpaths if len(c) == 2]
    own = [sum(map(sum, p.series(("main",), r))) - sum(sum(map(sum, p.series(c, r))) for c in kids)
           for r in range(3)]
    assert float(lines["main"][5]) == pytest.approx(sum(own) / 3 / scale, abs=0.0005)
    assert "Next: tinyprof report heat -o report.html" in proc.stdout
    # With MPI capture (on for --run): 20 steps x 2 Sendrecv per rank, the 40
    # at the plate's edges with no peer (mpi4py sends nothing to PROC_NULL).
    m = p.mpi
    halo = m[m.callpath.map(("main", "halo").__eq__) & (m.op == "Sendrecv")]
    per_bucket = halo.groupby("bucket")[["calls", "bytes"]].sum()
    assert per_bucket.to_dict("index") == {0: {"calls": 40, "bytes": 0},
                                           12: {"calls": 80, "bytes": 80 * 2048}}
    assert "MPI calls (tinyprof mpi heat; docs/mpi.md):" in out
