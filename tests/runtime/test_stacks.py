"""Sampled Python stacks (``Profiler(sample=HZ)``, ``python -m tinyprof --sample``):
ordinary callpaths below each thread's innermost open event, threads told
apart, a thread waiting in MPI shown in the MPI call, in flushes and
snapshots; real processes and real ranks, no durations asserted."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from test_mpi_large import MPIEXEC, needs_mpi

import tinyprof
from tinyprof.runtime import capture, stacks

# light() does a third of heavy()'s work, in alternation, so that a change of
# the machine's load falls on both alike.
APP = textwrap.dedent("""
    import sys, threading
    import tinyprof
    from tinyprof import Event

    def light(n):
        s = 0
        for i in range(n):
            s += i
        return s

    def heavy(n):
        return light(n) + light(n) + light(n)

    def helper():
        heavy(300_000)

    profiler = tinyprof.Profiler("s", outdir=sys.argv[1], sample=500)
    with Event("main"):
        with Event("phase"):
            for _ in range(20):
                light(100_000)
                heavy(100_000)
        profiler.snapshot()
        worker = threading.Thread(target=helper, name="worker")
        worker.start()
        worker.join()
    tinyprof.flush()
""")


def _sampled(prof, rank=0):
    """Sampled time per callpath of ``rank`` (the values of the added callpaths)."""
    return {cp: sum(map(sum, prof.series(cp, rank))) for cp in prof.callpaths}


def test_a_cpu_heavy_function_holds_its_share(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    out = tmp_path / "prof"
    proc = subprocess.run([sys.executable, "app.py", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    prof = tinyprof.read(out)
    phase = ("main", "phase", "<module> (app.py:1)")
    heavy, light = phase + ("heavy (app.py:12)",), phase + ("light (app.py:6)",)
    assert heavy in prof.callpaths and light in prof.callpaths, prof.callpaths
    time = _sampled(prof)
    # each callpath's value holds its samples and those below it: heavy's own
    # calls of light are heavy's, not the light called from <module>
    assert time[heavy] > time[light] > 0
    assert time[phase] >= time[heavy] + time[light] - 1e-6      # ns in float seconds
    # another thread: its own element, below the main thread's outermost event
    worker = [cp for cp in prof.callpaths if cp[:2] == ("main", "thread worker")]
    assert ("main", "thread worker") in worker and any(cp[-1] == "heavy (app.py:12)" for cp in worker)
    assert not any(name.startswith("thread tinyprof") for cp in prof.callpaths for name in cp)
    # the snapshot taken after the phase holds its samples
    snap = tinyprof.read(out, snapshot=tinyprof.snapshots(out)[-1])
    assert heavy in snap.callpaths and _sampled(snap)[heavy] > 0


@needs_mpi
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
def test_time_waiting_in_mpi_is_the_mpi_call(tmp_path):
    """Rank 0 waits in ``comm.recv`` while rank 1 computes: rank 0's samples
    end in the MPI call, rank 1's in its function, below the script's region."""
    (tmp_path / "app.py").write_text(textwrap.dedent("""
        from mpi4py import MPI

        def spin(n):
            s = 0
            for i in range(n):
                s += i
            return s

        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            value = comm.recv(source=1)
        else:
            comm.send(spin(3_000_000), dest=0)
    """))
    out = tmp_path / "prof"
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "tinyprof", "--sample", "200",
                           "-o", str(out), "app.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prof = tinyprof.read(out)
    waiting = ("app.py", "<module> (app.py:1)", "MPI_recv")
    assert _sampled(prof, 0).get(waiting, 0) > 0
    assert _sampled(prof, 1).get(("app.py", "<module> (app.py:1)", "spin (app.py:4)"), 0) > 0
    assert _sampled(prof, 1)[waiting] == 0


def test_the_called_name_of_a_call():
    def f(comm, MPI, x):
        comm.Allreduce(MPI.IN_PLACE, x)
        MPI.COMM_WORLD.bcast(len(x), root=0)
        return x.sum()
    import dis
    calls = [ins.offset for ins in dis.get_instructions(f.__code__) if ins.opname == "CALL"]
    assert [stacks.called_name(f.__code__, at) for at in calls] == ["Allreduce", "len", "bcast", "sum"]
    assert stacks.called_name(f.__code__, 0) is None


@needs_mpi
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
def test_sites_in_annotated_code_hang_below_the_innermost_event(tmp_path):
    """``Profiler(sites=True)``: each MPI call below the innermost open event,
    at its line; in the flush and in a snapshot alike."""
    (tmp_path / "app.py").write_text(textwrap.dedent("""
        import sys
        import numpy as np
        from mpi4py import MPI
        import tinyprof
        from tinyprof import Event

        profiler = tinyprof.Profiler("a", outdir=sys.argv[1], mpi=True, sites=True)
        comm = MPI.COMM_WORLD

        def step(x):
            comm.Allreduce(MPI.IN_PLACE, x)

        with Event("main"):
            for _ in range(5):
                with Event("solve"):
                    step(np.ones(2))
            comm.Barrier()
            assert profiler.snapshot()
        tinyprof.flush()
    """))
    out = tmp_path / "prof"
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "app.py", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    snap = tinyprof.read(out, snapshot=tinyprof.snapshots(out)[-1])
    for prof in (tinyprof.read(out), snap):
        rows = prof.mpi.groupby(["callpath", "op", "rank"]).calls.sum().to_dict()
        assert rows == {(("main", "solve", "step (app.py:12)"), "Allreduce", r): 5 for r in (0, 1)} | \
            {(("main", "<module> (app.py:18)"), "Barrier", r): 1 for r in (0, 1)}, rows
