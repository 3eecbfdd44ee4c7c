"""Continuous introspection: snapshots, the exit flush, crash safety.

MPI jobs run tests/_snapshot_app.py under mpiexec (every launch has a
timeout); the rest runs in this process.
"""
from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import tinyprof
from tinyprof.format import output_dir, snapshot_chain
from tinyprof.runtime import session

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/
APP = os.path.join(HERE, "_snapshot_app.py")
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
STEP = ("main", "step")

needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
    reason="needs mpi4py and mpiexec next to the Python executable (pip install mpi4py mpich)")


def _command(nranks, outdir, frequency, keep="last", steps=0, mode="plain", runner=()):
    args = [sys.executable, *runner, APP, str(outdir), str(frequency), keep, str(steps), mode]
    return [MPIEXEC, "-n", str(nranks), *args] if nranks else args


def _run(*args, timeout=60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(_command(*args, **kwargs), capture_output=True, text=True,
                          timeout=timeout)


def _signal_when_running(cmd, signum, until=lambda: True) -> subprocess.CompletedProcess:
    """Start ``cmd`` in its own process group, signal the whole group (as a
    scheduler does) once rank 0 printed ``running`` and ``until()`` holds."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == "running\n", proc.stderr.read()
        deadline = time.monotonic() + 60        # a hang guard, not a timing assumption
        while not until() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, "running\n" + out, err)


def _steps(profile, rank):
    """The ``it`` values of ``main<step`` on ``rank``: must be 0, 1, 2, ..."""
    (its,) = profile.series(STEP, rank, "it")
    assert its == list(range(len(its))), its
    return len(its)


@needs_mpi
def test_sigkill_mid_run_leaves_the_last_complete_snapshot(tmp_path):
    out = tmp_path / "out"
    _signal_when_running(_command(4, out, 0.2, keep="all"), signal.SIGKILL,
                         until=lambda: len(tinyprof.snapshots(out)) >= 3)
    done = tinyprof.snapshots(out)
    assert len(done) >= 3, sorted(os.listdir(out / "snapshots"))
    latest = tinyprof.read(out)
    assert (latest.snapshot, latest.nranks) == (done[-1], 4)
    counts = []
    for k in done:                      # keep="all": a time series, each snapshot whole
        p = tinyprof.read(out, snapshot=k)
        counts.append([_steps(p, r) for r in range(4)])
    # Each rank's steps only grow from one snapshot to the next; how far apart
    # the ranks' cuts fall depends on the load, so it is not checked.
    for rank in range(4):
        series = [c[rank] for c in counts]
        assert series == sorted(series) and series[0] > 0, (rank, series)
    assert counts[-1] == [_steps(latest, r) for r in range(4)]


@needs_mpi
@pytest.mark.parametrize("keep", ["last", "all"])
def test_sigkill_at_random_instants_leaves_a_readable_recent_state(tmp_path, monkeypatch, keep):
    """Kills at random instants (some during a snapshot, some while files of
    older ones are being removed) on 3 ranks writing 2 files per snapshot:
    the newest complete snapshot reads, and at most the one after it was
    under way (snapshots follow one another: never two behind)."""
    monkeypatch.setenv("TINYPROF_AGGREGATORS", "2")
    monkeypatch.setenv("TINYPROF_CHAIN", "3")
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    for attempt in range(3):
        out = tmp_path / f"out{attempt}"
        pause = rng.uniform(0, 0.3)
        until_one = lambda: bool(tinyprof.snapshots(out))
        start = []

        def later():
            if not until_one():
                return False
            start.append(start[0] if start else time.monotonic())
            return time.monotonic() - start[0] >= pause
        _signal_when_running(_command(3, out, 0.02, keep=keep), signal.SIGKILL, until=later)
        done = tinyprof.snapshots(out)
        started = output_dir.snapshot_numbers(out)
        where = f"seed {seed}, attempt {attempt}: complete {done}, started {started}"
        assert done and len([k for k in started if k > done[-1]]) <= 1, where
        latest = tinyprof.read(out)
        assert latest.snapshot == done[-1] and latest.nranks == 3, where
        if STEP in latest.callpaths:
            for r in range(3):
                _steps(latest, r)       # 0, 1, 2, ...: whole steps, in order


@needs_mpi
def test_keep_last_leaves_the_newest_snapshots_chain(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYPROF_CHAIN", "2")    # full, delta, delta, full, ...
    out = tmp_path / "out"

    def second_chain():         # a second chain with a delta: the first one is gone
        done = tinyprof.snapshots(out)
        return bool(done) and output_dir.chain(out, done[-1])[0] > 1 and \
            len(output_dir.chain(out, done[-1])) > 1
    _signal_when_running(_command(2, out, 0.1), signal.SIGKILL, until=second_chain)
    done = tinyprof.snapshots(out)
    newest = output_dir.chain(out, done[-1])
    # The newest's chain, and the one before only if the kill fell between
    # completing a full snapshot and removing the older chain; never the first.
    assert newest[0] > 1 and set(newest) <= set(done) and len(done) <= 2 * 3, done
    assert min(done) > 1, done
    assert len(os.listdir(out / "snapshots")) <= len(done) + 1       # + one in progress
    assert _steps(tinyprof.read(out), 1) > 0


@needs_mpi
def test_sigterm_before_the_first_snapshot_leaves_a_profile(tmp_path):
    out = tmp_path / "out"
    proc = _signal_when_running(_command(4, out, 3600), signal.SIGTERM)
    assert proc.returncode != 0          # the default action went on: the job died
    p = tinyprof.read(out)
    assert (p.snapshot, p.nranks) == (1, 4)
    assert min(_steps(p, r) for r in range(4)) >= 19


def test_sigterm_chains_to_the_applications_handler(tmp_path):
    out = tmp_path / "out"
    proc = _signal_when_running(_command(0, out, 3600, mode="handler"), signal.SIGTERM)
    assert (proc.returncode, proc.stdout) == (0, "running\nhandled\n"), proc.stderr
    assert tinyprof.snapshots(out) == [1]
    p = tinyprof.read(out)              # the exit flush came last: it wins
    assert p.snapshot is None and _steps(p, 0) >= _steps(tinyprof.read(out, snapshot=1), 0)


@needs_mpi
def test_exit_flush_when_the_application_never_flushes(tmp_path):
    out = tmp_path / "out"
    proc = _run(3, out, 0, steps=30)
    assert proc.returncode == 0, proc.stderr
    p = tinyprof.read(out)
    assert p.snapshot is None and p.files == [str(out / "app.0-of-1.tp")]
    assert [_steps(p, r) for r in range(3)] == [30, 30, 30]


@needs_mpi
def test_a_rank_raising_at_the_end_does_not_hang(tmp_path):
    out = tmp_path / "out"
    proc = _run(4, out, 0, steps=30, mode="raise_end")
    assert proc.returncode != 0 and "rank 1 fails at the end" in proc.stderr
    # No collective flush: every rank wrote its own file of one snapshot.
    p = tinyprof.read(out)
    assert p.snapshot == 1 and [_steps(p, r) for r in range(4)] == [30] * 4


@needs_mpi
def test_a_rank_raising_under_mpi4py_aborts_without_hanging(tmp_path):
    out = tmp_path / "out"
    proc = _run(4, out, 0.1, mode="raise_mid", runner=("-m", "mpi4py"))
    # Not asserted: MPICH's "MPI_Abort" line, which the process manager may
    # cut off when it kills the job first (seen once in a clean-clone run).
    assert proc.returncode != 0 and "rank 1 fails" in proc.stderr


@needs_mpi
@pytest.mark.parametrize("frequency, mode", [(3600, "plain"), (0.002, "plain"), (0.002, "trace"),
                                             (3600, "late"), (0.002, "late")])
def test_an_application_that_finalizes_mpi_itself(tmp_path, frequency, mode):
    """MPI_Finalize makes the snapshot helpers take a last snapshot together
    and stop (a COMM_SELF attribute's delete callback), so none calls MPI
    after it, and every rank numbers its own files alike from there: the
    exit writes each rank's full file of the next snapshot, which holds what
    was recorded after MPI_Finalize."""
    out = tmp_path / "out"
    cmd = [MPIEXEC, "-n", "3", sys.executable, os.path.join(HERE, "_finalize_app.py"), str(out),
           str(frequency), mode]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.count("finalized") == 3, proc.stderr
    assert "tinyprof" not in proc.stderr
    p = tinyprof.read(out)
    steps = [300, 3000 if mode == "late" else 300, 300]
    assert p.snapshot is not None and [len(p.series(STEP, r)[0]) for r in range(3)] == steps
    assert [len(p.series(("after",), r)[0]) for r in range(3)] == [1] * 3


@needs_mpi
def test_unwritable_output_directory_warns_and_exits_0(tmp_path):
    (tmp_path / "file").write_text("a regular file: no directory can be made below it")
    out = tmp_path / "file" / "out"
    proc = _run(2, out, 0.1, steps=100)
    assert proc.returncode == 0, proc.stderr
    assert f"tinyprof: cannot write snapshot file {out}/snapshots/" in proc.stderr
    assert f"tinyprof: cannot write profile file {out}/app.0-of-1.tp" in proc.stderr
    # Once, by the one aggregator (A = 1 file per snapshot), not once per period.
    assert proc.stderr.count("cannot write snapshot") == 1


@needs_mpi
@pytest.mark.parametrize("level, warning", [
    ("single", "below MPI_THREAD_MULTIPLE: each rank writes its own snapshot file"),
    ("funneled", "below MPI_THREAD_MULTIPLE: each rank writes its own snapshot file")])
def test_lower_thread_levels_fall_back_to_per_rank_snapshots(tmp_path, level, warning):
    out = tmp_path / "out"
    cmd = _command(2, out, 0.1, steps=150)
    cmd[4:4] = ["-c", f"import mpi4py, runpy, sys; mpi4py.rc.thread_level = '{level}'; "
                      "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert warning in proc.stderr and proc.stderr.count("tinyprof:") == 2     # once per rank
    done = tinyprof.snapshots(out)
    assert done and len(os.listdir(output_dir.snapshot_dir(str(out), done[-1]))) == 2   # P files
    assert [len(tinyprof.read(out, snapshot=done[-1]).series(STEP, r)) for r in (0, 1)] == [1, 1]


SIGALRM_APP = """
import signal, sys, time
import mpi4py
mpi4py.rc.thread_level = "single"
from mpi4py import MPI
import tinyprof

out = sys.argv[1]
alarms = []
tinyprof.Profiler("app", frequency=0.01, outdir=out, keep="all")
signal.signal(signal.SIGALRM, lambda signum, frame: alarms.append(signum))   # the application's
deadline = time.monotonic() + 60                # a hang guard, not a timing assumption
with tinyprof.Event("main"):
    while True:
        with tinyprof.Event("step", loop=1):
            time.sleep(0.005)
        if len(tinyprof.snapshots(out)) >= 3 or time.monotonic() > deadline:
            break
# rank 0 prints every rank's line: mpiexec may run two ranks' output together
lines = MPI.COMM_WORLD.gather(f"{len(tinyprof.snapshots(out)) >= 3} {len(alarms)}")
if lines:
    print(*lines, sep="\\n", flush=True)
"""


@needs_mpi
def test_snapshots_at_thread_level_single_leave_sigalrm_to_the_application(tmp_path):
    """A helper thread that makes no MPI call writes them: no timer, no signal borrowed."""
    script = tmp_path / "app.py"
    script.write_text(SIGALRM_APP)
    out = tmp_path / "out"
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(script), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True 0", "True 0"]     # snapshots, and no alarm
    p = tinyprof.read(out / "app.0-of-1.tp")        # the exit flush
    assert p.nranks == 2 and all(len(p.series(STEP, r)[0]) >= 1 for r in (0, 1))


# -- in this process -----------------------------------------------------------------

@pytest.fixture
def snap(tmp_path):
    """This process's snapshotter, with no periodic snapshot due during the test."""
    tinyprof.Profiler("s", frequency=3600, outdir=tmp_path / "s", keep="all")
    return session.current().snapshotter


def _record(n):
    with tinyprof.Event("main"):
        for _ in range(n):
            with tinyprof.Event("step", loop=1):
                pass


def test_read_picks_the_newest_of_flush_and_snapshots(snap, tmp_path):
    out = tmp_path / "s"
    _record(2)
    assert snap.take(1)
    assert tinyprof.read(out).snapshot == 1
    _record(3)
    tinyprof.flush()
    p = tinyprof.read(out)
    assert p.snapshot is None and len(p.series(STEP, 0)) == 2
    time.sleep(0.01)
    _record(1)
    assert snap.take(2)
    assert tinyprof.snapshots(out) == [1, 2]
    assert [len(tinyprof.read(out, snapshot=k).series(STEP, 0)) for k in (1, 2)] == [1, 3]
    assert tinyprof.read(out).snapshot == 2


def test_a_snapshot_without_all_its_files_is_not_complete(snap, tmp_path):
    _record(1)
    assert snap.take(1)
    snap.size = 2                       # pretend to be rank 0 of 2: rank 1's file never comes
    assert snap.take(2)
    assert tinyprof.snapshots(tmp_path / "s") == [1] and tinyprof.read(tmp_path / "s").snapshot == 1
    with pytest.raises(tinyprof.FormatError, match="missing"):
        tinyprof.read(tmp_path / "s", snapshot=2)
    with pytest.raises(tinyprof.FormatError, match="no such file"):
        tinyprof.read(tmp_path / "s", snapshot=7)


@pytest.mark.parametrize("chain, kept", [(1, ["000003"]), (2, ["000001", "000002", "000003"])])
def test_keep_last_removes_older_complete_snapshots(tmp_path, chain, kept):
    """keep="last" keeps the newest complete snapshot and the ones its deltas
    build on: with chain=1, 2 is a delta over 1 and 3 a full snapshot again."""
    tinyprof.Profiler("s", frequency=3600, outdir=tmp_path / "s", chain=chain)
    for k in (1, 2, 3):
        _record(1)
        assert session.current().snapshotter.take(k)
    assert sorted(os.listdir(tmp_path / "s" / "snapshots")) == kept
    assert len(tinyprof.read(tmp_path / "s").series(STEP, 0)) == 3


@pytest.mark.parametrize("chain, fulls", [(1, [1, 3, 6, 11, 20]), (3, [1, 5, 12])])
def test_full_snapshots_end_chains_that_double(tmp_path, chain, fulls):
    """``chain`` deltas after the first full snapshot, twice as many after
    each later one; every delta is over the snapshot before it."""
    tinyprof.Profiler("s", frequency=3600, outdir=tmp_path / "s", chain=chain, keep="all")
    for k in range(1, 25):
        _record(1)
        assert session.current().snapshotter.take(k)
    sets = [(tmp_path / "s" / "snapshots" / f"{k:06d}" / "s.0-of-1.tp").read_bytes().split(b"\n")[3]
            for k in range(1, 25)]
    assert sets == [b"set snapshot %d" % k if k in fulls else b"set snapshot %d over %d" % (k, k - 1)
                    for k in range(1, 25)]
    assert len(tinyprof.read(tmp_path / "s").series(STEP, 0)) == 24


def test_write_failures_warn_and_keep_the_data(tmp_path):
    (tmp_path / "file").write_text("")
    bad = str(tmp_path / "file" / "out")
    prof = tinyprof.Profiler("s", frequency=3600, outdir=bad)
    _record(2)
    with pytest.warns(RuntimeWarning, match=f"cannot write snapshot file {bad}/snapshots/"):
        assert not session.current().snapshotter.take(1)
    with pytest.warns(RuntimeWarning, match=f"cannot write profile file {bad}/s.0-of-1.tp"):
        assert tinyprof.flush() == bad
    assert prof.session.flushed is None     # the exit flush will try again
    good = tinyprof.Profiler("s", outdir=tmp_path / "good")
    tinyprof.flush()
    assert len(tinyprof.read(good.outdir).series(STEP, 0)[0]) == 2


def test_snapshots_of_a_directory_without_any():
    assert tinyprof.snapshots("no/such/dir") == []


def test_bad_keep_policy():
    with pytest.raises(ValueError, match="keep must be 'last' or 'all'"):
        tinyprof.Profiler("s", keep="some")


def test_a_snapshot_while_another_thread_records(tmp_path):
    tinyprof.Profiler("s", frequency=0.01, outdir=tmp_path / "s", keep="all")
    deadline = time.monotonic() + 60        # a hang guard: the loop ends on the count
    while len(tinyprof.snapshots(tmp_path / "s")) < 5 and time.monotonic() < deadline:
        _record(50)
        time.sleep(0.001)
    session.current().snapshotter.close()
    done = tinyprof.snapshots(tmp_path / "s")
    assert len(done) >= 5
    profiles = [tinyprof.read(tmp_path / "s", snapshot=k) for k in done]
    # The first snapshot may come before the first step.
    counts = [len(p.series(STEP, 0)) if STEP in p.callpaths else 0 for p in profiles]
    assert counts == sorted(counts) and counts[-1] > 0


def test_incremental_snapshots_write_what_a_flush_writes(tmp_path, clock):
    """Snapshots encode only new occurrences (and the newest again, which may
    still change): after any history, a snapshot's file is the flush's file."""
    tinyprof.Profiler("s", frequency=3600, selfkeys="tag:0,mem:1", outdir=tmp_path / "s",
                      keep="all")
    snap = session.current().snapshotter
    for k in range(1, 6):
        with tinyprof.Event("main"):                    # a new execution each time
            for i in range(k):
                clock.tick(k + i)
                with tinyprof.Event("step", loop=1, **({"mem": i / 2} if i % 2 else {})):
                    clock.tick(3)
                with tinyprof.Event("sum", loop=2, tag=k, mem=1.5):
                    clock.tick(i + 1)
                    snap.take(100 + k * 10 + i)         # inside an open event
            if k == 3:
                with tinyprof.Event("late", is_common=False):
                    clock.tick(7)
        snap.take(k)
    tinyprof.flush()
    snap.take(99)

    def body(data):
        # all but the lines naming the set and when (and the checksum covering them)
        return [line for line in data.split(b"\n")
                if not line.startswith((b"created", b"set ", b"end "))]
    last = tmp_path / "s" / "snapshots" / "000099" / "s.0-of-1.tp"
    assert b"\nset snapshot 99 over 5\n" in last.read_bytes()       # a delta ...
    flushed = (tmp_path / "s" / "s.0-of-1.tp").read_bytes()
    assert len(last.read_bytes()) < len(flushed)
    assert body(flushed) == body(snapshot_chain.rebuild(str(last)))         # ... rebuilt exactly
    p = tinyprof.read(tmp_path / "s", snapshot=3)
    assert p.series(STEP, 0) == [[3e-9], [3e-9] * 2, [3e-9] * 3]
    assert p.series(("main", "sum"), 0, "mem") == [[1.5], [3.0], [4.5]]
