"""Runs that share an output directory, and hostile files in it.

Each run is tests/_outdir_app.py in its own process, killed with SIGKILL by
the test where the issue says so; each run's id is set (TINYPROF_RUN_ID), so
that what ``read`` returns is checked by run id and by its values.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import warnings

import pytest

import tinyprof
from tinyprof import cli
from tinyprof.errors import FormatError
from tinyprof.format import output_dir
from tinyprof.format.encoding import Header
from tinyprof.format.reader import parse_file
from tinyprof.runtime import assemble as _assemble
from tinyprof.runtime.collect import LocalEvent

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/
APP = os.path.join(HERE, "_outdir_app.py")
A, B = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
STEP = ("main", "step")


def _env(run, **extra):
    return dict(os.environ, TINYPROF_RUN_ID=run, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]), **extra)


def _exit_run(out, run, steps, snapshots, *more, **env):
    """A run to its end: its exit flush writes the profile."""
    proc = subprocess.run([sys.executable, APP, str(out), str(steps), str(snapshots), "exit",
                           *more], env=_env(run, **env), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


def _killed_run(out, run, steps, snapshots, *more, end="wait", **env):
    """A run killed with SIGKILL once it has taken its snapshots."""
    proc = subprocess.Popen([sys.executable, APP, str(out), str(steps), str(snapshots), end,
                             *more], env=_env(run, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)


def _steps(profile):
    """The ``it`` values of ``main<step`` (0, 1, 2, ...): how many steps it holds."""
    (its,) = profile.series(STEP, 0, "it")
    assert its == list(range(len(its))), its
    return len(its)


def _read(out, **kwargs):
    """``tinyprof.read`` and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = tinyprof.read(out, **kwargs)
    return profile, [str(w.message) for w in caught]


def test_a_killed_run_wins_over_a_longer_earlier_run(tmp_path):
    out = tmp_path / "out"
    _exit_run(out, A, 6, 5)                 # snapshots 1..5 and the flushed set
    _killed_run(out, B, 2, 2)               # its snapshots 1 and 2, over A's
    p, said = _read(out)
    assert (p.run, p.snapshot, _steps(p)) == (B, 2, 2) and said == []
    assert tinyprof.snapshots(out) == [1, 2]
    first, _ = _read(out, snapshot=1)
    assert (first.run, _steps(first)) == (B, 1)


def test_pruning_keeps_the_own_runs_snapshots_and_leaves_others(tmp_path):
    out = tmp_path / "out"
    _exit_run(out, A, 4, 3, TINYPROF_CHAIN="1")     # 1 full, 2 over 1, 3 full
    _killed_run(out, B, 2, 2, "last")               # 1 full, 2 over 1; prunes after each
    p, said = _read(out)
    assert (p.run, p.snapshot, _steps(p)) == (B, 2, 2) and said == []
    assert output_dir.head(output_dir.set_file(output_dir.snapshot_dir(str(out), 3), "app", 0, 1)).run == A


def test_a_run_that_left_nothing_is_named_in_a_warning(tmp_path):
    out = tmp_path / "out"
    _exit_run(out, A, 3, 2)
    _killed_run(out, B, 1, 0)
    p, said = _read(out)
    assert (p.run, p.snapshot, _steps(p)) == (A, None, 3)
    assert len(said) == 1 and B in said[0] and A in said[0] and "flushed" in said[0], said


def _foreign_set(out, k, nfiles):
    """Snapshot ``k`` of an earlier run ``A`` with ``nfiles`` ranks, one file each."""
    for r in range(nfiles):
        events = [LocalEvent(("main",), 0, True, [], [], {}, {}, -1, "main")]
        part, _ = _assemble.rank_part(events, r, 1, [])
        header = Header(name="app", nranks=nfiles, first_rank=r, rank_count=1, file_index=r,
                        file_count=nfiles, run=A, set_kind="snapshot", set_number=k)
        directory = output_dir.snapshot_dir(str(out), k)
        assert output_dir.write_file(directory, output_dir.set_file(directory, "app", r, nfiles),
                                     _assemble.assemble(header, [part])) is None


def test_snapshots_beside_an_earlier_runs_of_another_size(tmp_path):
    out = tmp_path / "out"
    for k in (1, 2):
        _foreign_set(out, k, 2)             # app.0-of-2.tp, app.1-of-2.tp
    _killed_run(out, B, 3, 3)
    p, said = _read(out)
    assert (p.run, p.snapshot, _steps(p)) == (B, 3, 3) and said == []
    assert tinyprof.snapshots(out) == [1, 2, 3]
    for k in (1, 2):
        q, _ = _read(out, snapshot=k)
        assert (q.run, _steps(q)) == (B, k)


def test_a_renamed_snapshot_directory_is_not_read(tmp_path):
    out = tmp_path / "out"
    _killed_run(out, A, 3, 3)               # 1 full, 2 over 1, 3 over 2
    os.rename(output_dir.snapshot_dir(str(out), 2), output_dir.snapshot_dir(str(out), 9))
    p, _ = _read(out)
    assert (p.snapshot, _steps(p)) == (1, 1)        # 3 builds on the missing 2
    assert tinyprof.snapshots(out) == [1]
    with pytest.raises(FormatError, match="renamed directory"):
        tinyprof.read(out, snapshot=9)


def _read_guarded(out):
    """``read(out)`` in a thread; what it returned (None: it hung)."""
    got = []
    thread = threading.Thread(target=lambda: got.append(tinyprof.read(out)), daemon=True)
    thread.start()
    thread.join(60)             # a hang guard, not a timing assumption
    return got[0] if got else None


def test_a_fifo_in_a_snapshot_directory_blocks_nothing(tmp_path):
    out = tmp_path / "out"
    _killed_run(out, A, 2, 2)
    directory = output_dir.snapshot_dir(str(out), 7)
    os.makedirs(directory)
    fifo = output_dir.set_file(directory, "app", 0, 1)
    os.mkfifo(fifo)
    p = _read_guarded(out)
    assert p is not None and (p.snapshot, _steps(p)) == (2, 2)
    with pytest.raises(FormatError, match="not a regular file"):
        parse_file(fifo)


def test_a_sparse_file_is_never_read_whole(tmp_path):
    out = tmp_path / "out"
    _killed_run(out, A, 2, 2)
    real = output_dir.set_file(output_dir.snapshot_dir(str(out), 1), "app", 0, 1)
    directory = output_dir.snapshot_dir(str(out), 8)
    os.makedirs(directory)
    sparse = output_dir.set_file(directory, "app", 0, 1)
    with open(real, "rb") as f:
        head = f.read().replace(b"set snapshot 1\n", b"set snapshot 8\n")
    with open(sparse, "wb") as f:
        f.write(head[:head.index(b"names ")])
        f.truncate(1536 << 20)              # 1.5 GB, nearly all of it a hole
    if os.lseek(os.open(sparse, os.O_RDONLY), 0, os.SEEK_HOLE) >= 1536 << 20:
        pytest.skip("this file system shows no holes (SEEK_HOLE)")
    p = _read_guarded(out)
    assert p is not None and (p.snapshot, _steps(p)) == (2, 2)
    with pytest.raises(FormatError, match="sparse file"):
        parse_file(sparse)


def test_a_traced_run_that_flushed_keeps_its_trace(tmp_path, capsys):
    out = tmp_path / "out"
    _killed_run(out, A, 3, 0, "all", "3600", "trace", end="flush-wait")
    snapshot = output_dir.set_file(output_dir.snapshot_dir(str(out), 1), "app", 0, 1)
    flushed = output_dir.set_file(str(out), "app", 0, 1)
    later = os.stat(snapshot).st_mtime_ns       # file systems' clocks tick coarsely: make it later
    os.utime(flushed, ns=(later - 10**9, later - 10**9))
    p, said = _read(out)
    assert (p.run, p.snapshot, said) == (A, 1, [])     # the snapshot after the flush
    assert not any("trace" in f.sections for f in p.parsed)
    path = p.critical_path()
    assert set(path["rank"]) == {0} and path["duration"].sum() > 0
    assert cli.main(["critical-path", str(out)]) == 0
    assert "critical path" in capsys.readouterr().out


def test_planted_symlinks_at_temporary_names_redirect_no_write(tmp_path):
    """A symlink at the old predictable temporary name of every write (the
    flush, a snapshot, the report) to a file outside: it stays untouched."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.write_bytes(b"precious\n")
    script = f"""
import os, tinyprof
p = tinyprof.Profiler("app", outdir={str(out)!r}, keep="all")
with tinyprof.Event("main"):
    pass
for path in ({str(out / "app.0-of-1.tp")!r},
             os.path.join({str(out)!r}, "snapshots", "000001", "app.0-of-1.tp")):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink({str(outside)!r}, path + ".tmp" + str(os.getpid()))
assert p.snapshot()
tinyprof.flush()
"""
    proc = subprocess.run([sys.executable, "-c", script], env=_env(A), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = tmp_path / "report.html"
    os.symlink(outside, f"{report}.tmp{os.getpid()}")
    pytest.importorskip("plotly")
    from tinyprof.views import report_page
    report_page.write(str(out), report)
    assert outside.read_bytes() == b"precious\n"
    assert tinyprof.read(out).run == A and tinyprof.read(out, snapshot=1).run == A
    assert report.read_bytes().startswith(b"<!")
