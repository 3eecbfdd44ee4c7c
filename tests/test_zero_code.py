"""``python -m tinyprof app.py`` and ``python -m tinyprof -m module``: an
unannotated script or module runs as under ``python`` (``__file__``, argv,
``sys.path``, ``__main__``, traceback, exit status) under one region named
after it, with its MPI communication recorded, on real ranks, mpi4py's own
demos included."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest
from test_mpi_large import MPIEXEC, needs_mpi
from test_stacks import needs_sites

import tinyprof
from tinyprof.runtime import capture

APP = textwrap.dedent("""
    import sys
    import numpy as np
    from mpi4py import MPI

    def exchange(comm):
        rank, size = comm.Get_rank(), comm.Get_size()
        data = np.arange(64, dtype=np.int64)
        comm.Sendrecv(data, dest=(rank + 1) % size, recvbuf=np.empty_like(data),
                      source=(rank - 1) % size)

    if __name__ == "__main__":
        comm = MPI.COMM_WORLD
        assert sys.argv[1:] == ["--steps", "4"], sys.argv
        rows = comm.Split(comm.rank // 2, comm.rank)
        for _ in range(int(sys.argv[2])):
            exchange(comm)
            rows.Allreduce(MPI.IN_PLACE, np.ones(3))
        comm.Barrier()
        sys.exit(3 if comm.rank == 0 else 0)
""")


@needs_mpi
@needs_sites
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
@pytest.mark.parametrize("nranks", [1, 3])
def test_an_unannotated_script_under_mpiexec(tmp_path, nranks):
    app = tmp_path / "app.py"
    app.write_text(APP)
    out = tmp_path / "prof"
    proc = subprocess.run([MPIEXEC, "-n", str(nranks), sys.executable, "-m", "tinyprof",
                           "-o", str(out), str(app), "--steps", "4"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr      # rank 0's exit status
    prof = tinyprof.read(out)
    # each MPI call below the line that made it (sites are on by default)
    split, sendrecv, allreduce, barrier = (("app.py", site) for site in (
        "<module> (app.py:15)", "exchange (app.py:9)", "<module> (app.py:18)", "<module> (app.py:19)"))
    assert prof.name == "app" and sorted(prof.callpaths) == sorted(
        [("app.py",), split, sendrecv, allreduce, barrier])
    rows = {(r.callpath, r.rank, r.comm, r.op): (r.calls, r.bytes) for r in prof.mpi.itertuples()}
    for r in range(nranks):
        part = "COMM_WORLD.split1" + ("@%d" % (r // 2 * 2) if nranks > 2 else "")
        assert rows[(sendrecv, r, "COMM_WORLD", "Sendrecv")] == (4, 4 * 512)
        assert rows[(allreduce, r, part, "Allreduce")] == (4, 4 * 24)
        assert rows[(barrier, r, "COMM_WORLD", "Barrier")] == (1, 0)
        assert rows[(split, r, "COMM_WORLD", "Comm_split")] == (1, 0)
    assert set(prof.communicators.created[prof.communicators.comm.str.startswith(
        "COMM_WORLD.split1")]) == {split}
    expected = [[4 * 512 if j == (i + 1) % nranks else 0 for j in range(nranks)]
                for i in range(nranks)]
    assert prof.comm_matrix().tolist() == expected


# Two functions of an unannotated script call Allreduce 20 and 60 times; the
# same line of a helper called from both is told apart by --site-depth 2.
SITES_APP = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI

    def allreduce(comm, x):
        comm.Allreduce(MPI.IN_PLACE, x)

    def reduce_a(comm):
        x = np.ones(4)
        for _ in range(20):
            comm.Allreduce(MPI.IN_PLACE, x)
        for _ in range(2):
            allreduce(comm, x)

    def reduce_b(comm):
        x = np.ones(4)
        for _ in range(60):
            comm.Allreduce(MPI.IN_PLACE, x)
        allreduce(comm, x)

    if __name__ == "__main__":
        reduce_a(MPI.COMM_WORLD)
        reduce_b(MPI.COMM_WORLD)
        total = MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.rank)
        if MPI.COMM_WORLD.rank == 0:
            print(f"sum {total}")
""")


@needs_mpi
@needs_sites
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
def test_each_mpi_call_is_charged_to_its_python_line(tmp_path):
    """On 3 ranks of an unannotated script, each function's line gets exactly
    its calls on every rank; ``--site-depth 2`` adds the caller's line, and
    the profile reads as any other (``tinyprof mpi --callpath``, the report,
    the matrix)."""
    (tmp_path / "app.py").write_text(SITES_APP)

    def run(*options):
        out = tmp_path / f"prof{len(options)}"
        proc = subprocess.run([MPIEXEC, "-n", "3", sys.executable, "-m", "tinyprof", "-o", str(out),
                               *options, "app.py"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0 and proc.stdout == "sum 3\n", proc.stdout + proc.stderr
        prof = tinyprof.read(out)
        calls = prof.mpi[prof.mpi.op == "Allreduce"].groupby(["callpath", "rank"]).calls.sum()
        return prof, {key: int(n) for key, n in calls.items()}

    prof, calls = run()
    site = "reduce_b (app.py:18)"
    table = subprocess.run([sys.executable, "-m", "tinyprof.cli", "mpi", str(tmp_path / "prof0"),
                            "--callpath", f"app.py/{site}"], capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and f"app.py<{site}" in table.stdout and " 180 " in table.stdout, table.stdout
    report = subprocess.run([sys.executable, "-m", "tinyprof.cli", "report", str(tmp_path / "prof0"),
                             "-o", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and site in (tmp_path / "r.html").read_text()
    assert prof.comm_matrix(callpath=("app.py", site)).sum() == 0      # collectives only
    for r in range(3):
        assert calls[(("app.py", "reduce_a (app.py:11)"), r)] == 20
        assert calls[(("app.py", "reduce_b (app.py:18)"), r)] == 60
        assert calls[(("app.py", "allreduce (app.py:6)"), r)] == 3
    assert sum(calls.values()) == 3 * 83
    # mpi4py's lowercase allreduce: its hidden communicator's calls are the line's too
    assert {cp for cp in prof.mpi.callpath if cp[1].startswith("<module>")} == {
        ("app.py", "<module> (app.py:24)")}

    prof, calls = run("--site-depth", "2")
    for r in range(3):
        assert calls[(("app.py", "<module> (app.py:22)", "reduce_a (app.py:11)"), r)] == 20
        assert calls[(("app.py", "<module> (app.py:23)", "reduce_b (app.py:18)"), r)] == 60
        assert calls[(("app.py", "reduce_a (app.py:13)", "allreduce (app.py:6)"), r)] == 2
        assert calls[(("app.py", "reduce_b (app.py:19)", "allreduce (app.py:6)"), r)] == 1
    assert sum(calls.values()) == 3 * 83

    prof, calls = run("--site-depth", "0")
    assert prof.callpaths == [("app.py",)] and calls == {(("app.py",), r): 83 for r in range(3)}


NUMPY_REDUCE = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI

    def reduce_loop(a, n):
        s = 0.0
        for _ in range(n):
            s += np.add.reduce(a)
        return s

    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        reduce_loop(np.ones(4_000_000), 300)   # rank 1 waits in the Allreduce meanwhile
    comm.Allreduce(MPI.IN_PLACE, np.ones(1))
""")


def _sampled(prof, rank):
    """Sampled (or measured) time per callpath of ``rank``, in s."""
    return {cp: sum(map(sum, prof.series(cp, rank))) for cp in prof.callpaths}


@needs_mpi
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
def test_only_a_real_mpi_call_is_labelled_mpi(tmp_path):
    """numpy's ``ufunc.reduce`` is named like an MPI operation, but only the
    capture library knows whether a thread is inside an MPI call: the loop
    over ``np.add.reduce`` has no ``MPI_`` label (its time stays useful),
    while the real ``Allreduce`` keeps its label."""
    (tmp_path / "app.py").write_text(NUMPY_REDUCE)
    out = tmp_path / "prof"
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "tinyprof", "--sample", "200",
                           "-o", str(out), "app.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prof = tinyprof.read(out)
    loop = ("app.py", "<module> (app.py:1)", "reduce_loop (app.py:5)")
    assert _sampled(prof, 0)[loop] > 0
    assert not [cp for cp in prof.callpaths if cp[:3] == loop and len(cp) > 3], prof.callpaths
    assert not [cp for cp in prof.callpaths if cp[-1].lower() == "mpi_reduce"], prof.callpaths
    assert _sampled(prof, 1)[("app.py", "<module> (app.py:1)", "MPI_Allreduce")] > 0


BUSY = textwrap.dedent("""
    def spin(n):
        s = 0
        for i in range(n):
            s += i
        return s

    for _ in range(4):
        spin(500_000)
""")


def test_sampled_children_never_outgrow_their_region(tmp_path):
    """A sampled region's children add up to no more than its own time, and
    tinyprof's own exit work (its flush imports numpy, which the script never
    does) is not charged to it: only the script's frames are below it."""
    (tmp_path / "app.py").write_text(BUSY)
    out = tmp_path / "prof"
    proc = subprocess.run([sys.executable, "-m", "tinyprof", "--sample", "200", "-o", str(out), "app.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prof = tinyprof.read(out)
    time = _sampled(prof, 0)
    below = [cp for cp in prof.callpaths if len(cp) > 1]
    assert below and all("(app.py:" in name for cp in below for name in cp[1:]), below
    for parent in prof.callpaths:
        children = [cp for cp in prof.callpaths if cp[:-1] == parent]
        assert sum(time[cp] for cp in children) <= time[parent], (parent, time)


def test_a_missing_script_is_a_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tinyprof", str(tmp_path / "nope.py")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [f"python -m tinyprof: no such script: {tmp_path / 'nope.py'}"]


@pytest.mark.parametrize("option, value", [("--site-depth", "9"), ("--sample", "-5"), ("--frequency", "-1")])
def test_a_bad_option_is_a_one_line_error(tmp_path, option, value):
    (tmp_path / "app.py").write_text("print('ran')\n")
    proc = subprocess.run([sys.executable, "-m", "tinyprof", option, value, "app.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("python -m tinyprof: error: ")


# What a script or module sees of how it was started, and how it ends.
INTROSPECT = textwrap.dedent("""
    import sys, __main__
    print("file", __file__)
    print("argv", sys.argv)
    print("path0", sys.path[0])
    print("main", __name__, __main__.__spec__ is None, type(__main__.__loader__).__name__,
          hasattr(__main__, "__cached__"), repr(__main__.__package__), type(__builtins__).__name__)
    print("is main", sys.modules["__main__"] is __main__ and vars(__main__) is globals())
    def fail():
        raise ValueError("the script's own error")
    fail()
""")
DEMOS = os.path.join(os.path.dirname(__file__), "mpi4py_demo")


def _both(argv, cwd, out, options=()):
    """``python ARGV`` and ``python -m tinyprof -o OUT [OPTIONS] ARGV``, run from cwd."""
    runs = [subprocess.run([sys.executable, *prefix, *argv], cwd=cwd,
                           capture_output=True, text=True, timeout=60)
            for prefix in ([], ["-m", "tinyprof", "-o", str(out), *options])]
    return runs[0], runs[1], tinyprof.read(str(out))


# sampled (a bare --sample: its default rate, the script still the script), sites deeper
OPTIONS = [(), ("--sample",), ("--sample", "1000", "--site-depth", "3")]


@pytest.mark.parametrize("options", OPTIONS)
def test_a_script_sees_and_ends_as_under_python(tmp_path, options):
    """Through a relative path and a symbolic link: the same absolute
    ``__file__``, ``sys.argv``, ``sys.path[0]`` (the link's target's
    directory), ``__main__`` module, traceback and exit status."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text(INTROSPECT)
    (tmp_path / "link.py").symlink_to(tmp_path / "src" / "app.py")
    for script in ("src/app.py", "link.py"):
        plain, profiled, prof = _both([script, "-o", "x"], tmp_path, tmp_path / script[:3], options)
        assert plain.returncode == 1 and "ValueError" in plain.stderr, plain.stderr
        assert (profiled.returncode, profiled.stdout, profiled.stderr) == \
            (plain.returncode, plain.stdout, plain.stderr)
        assert f"file {tmp_path / script}\n" in plain.stdout
        assert prof.callpaths[0] == (os.path.basename(script),)
        if not options:
            assert prof.callpaths == [(os.path.basename(script),)]


@pytest.mark.parametrize("options", OPTIONS)
def test_a_module_runs_as_under_python_m(tmp_path, options):
    """``python -m tinyprof -m pkg.mod args`` is ``python -m pkg.mod args``:
    everything after the module is its own, options included."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(INTROSPECT)
    plain, profiled, prof = _both(["-m", "pkg.mod", "-o", "x", "--name", "y"], tmp_path,
                                  tmp_path / "prof", options)
    assert plain.returncode == 1 and f"file {tmp_path / 'pkg' / 'mod.py'}\n" in plain.stdout
    assert "argv ['" + str(tmp_path / "pkg" / "mod.py") + "', '-o', 'x', '--name', 'y']" \
        in plain.stdout
    assert (profiled.returncode, profiled.stdout) == (plain.returncode, plain.stdout)
    # runpy's frames differ (run_module against python's own start): the script's are the same
    assert profiled.stderr.splitlines()[-5:] == plain.stderr.splitlines()[-5:]
    assert prof.name == "pkg.mod" and prof.callpaths[0] == ("pkg.mod",)


@needs_mpi
@needs_sites
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
def test_mpi4py_demos(tmp_path):
    """mpi4py's own demos, by relative path from their directory, sampled at
    100 Hz: the spawning counter (it spawns ``__file__`` and tells the child
    by ``sys.argv[0] == __file__``), hello world (also under ``-m mpi4py``),
    the futures pool (``-m mpi4py.futures``), the ring and pi by collectives
    (its interval counts from stdin): the same output and status as plain
    runs, and each MPI call at its line."""
    def run(nranks, *argv, stdin=None, plain=False):
        out = tmp_path / f"prof{len(os.listdir(tmp_path))}"
        profiling = [] if plain else ["-m", "tinyprof", "--sample", "100", "-o", str(out)]
        proc = subprocess.run([MPIEXEC, "-n", str(nranks), sys.executable, *profiling, *argv],
                              cwd=DEMOS, capture_output=True, text=True, timeout=120, input=stdin)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout, None if plain else tinyprof.read(str(out))

    def calls(prof, callpath, op):
        rows = prof.mpi[(prof.mpi.op == op) & (prof.mpi.callpath == callpath)]
        return rows.groupby("rank").calls.sum().to_dict()

    _, prof = run(2, "nxtval-dynproc.py")
    assert prof.nranks == 2 and prof.callpaths[0] == ("nxtval-dynproc.py",)
    child = prof.mpi[~prof.mpi.comm.str.startswith("COMM_WORLD")]  # the spawned counter's
    ops = child.groupby("op").calls.sum()
    assert (ops["Send"], ops["Mrecv"]) == (2 * 5 + 1, 2 * 5)     # 5 values a rank, 1 stop
    assert set(child[child.op == "Mrecv"].callpath) == {("nxtval-dynproc.py", "Counter.next (nxtval-dynproc.py:30)")}
    # mpiexec may run two ranks' output together: their lines are found, not split
    hello = re.compile(r"Hello, World! I am process (\d) of (\d) on " + re.escape(socket.gethostname()))
    out, prof = run(3, "helloworld.py")
    assert sorted(hello.findall(out)) == [(str(r), "3") for r in range(3)], out
    assert prof.nranks == 3 and prof.callpaths[0] == ("helloworld.py",)
    out, prof = run(2, "-m", "mpi4py", "helloworld.py")            # mpi4py's own runner
    assert sorted(hello.findall(out)) == [("0", "2"), ("1", "2")] and prof.callpaths[0] == ("mpi4py",)
    out, prof = run(3, "-m", "mpi4py.futures", "run_hello.py")
    assert re.findall(r"Hello, World! I am worker (\d) of 2", out) == ["0", "1"], out
    assert prof.nranks == 3 and prof.callpaths[0] == ("mpi4py.futures",)
    sendrecv = prof.mpi[prof.mpi.op == "Sendrecv"]
    assert (sendrecv.calls.sum(), sendrecv.bytes.sum()) == (2 * 2, 2 * 2 * 128)
    # the task's calls at its lines; the pool's own, from mpi4py's and threading's frames, the region's
    assert set(prof.mpi.callpath) == {("mpi4py.futures",), ("mpi4py.futures", "helloworld (run_hello.py:7)"),
                                      ("mpi4py.futures", "helloworld (run_hello.py:22)")}

    # three runs of pi: two interval counts, then 0 (stop); rank 0 prints each pi
    intervals = "1000\n100000\n0\n"
    out, prof = run(3, "cpi-cco.py", stdin=intervals)
    assert out == run(3, "cpi-cco.py", stdin=intervals, plain=True)[0] and out.count("pi is") == 2
    region = ("cpi-cco.py",)
    assert calls(prof, region + ("<module> (cpi-cco.py:55)",), "Bcast") == {0: 3, 1: 3, 2: 3}
    assert calls(prof, region + ("<module> (cpi-cco.py:60)",), "Reduce") == {0: 2, 1: 2, 2: 2}
    assert prof.mpi.calls.sum() == 3 * 5

    # the ring: a Sendrecv to the right, then an Isend/Irecv pair completed by Waitall
    out, prof = run(3, "ring.py")
    assert out == ""
    region, megs = ("ring.py",), 8 * 1_000_000
    for line, op in ((36, "Sendrecv"), (44, "Isend"), (45, "Irecv"), (43, "Waitall")):
        assert calls(prof, region + (f"<module> (ring.py:{line})",), op) == {0: 1, 1: 1, 2: 1}
    assert prof.comm_matrix().tolist() == [[0, 2 * megs, 0], [0, 0, 2 * megs], [2 * megs, 0, 0]]
