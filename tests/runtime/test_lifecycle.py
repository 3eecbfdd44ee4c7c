"""The session lifecycle on the paths an ordinary program takes: forks,
signals, generators, events open at exit, flushes before exit, settings,
MPI launches without mpi4py, and snapshots whose ranks fell behind.

Each program runs in a real process (and under a real mpiexec where MPI is
the point); the profile it leaves is read back from disk.
"""
from __future__ import annotations

import importlib.util
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import tinyprof
from tinyprof.runtime import assemble, session
from tinyprof.runtime.settings import Settings
from tinyprof.runtime.snapshots import Snapshotter

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
    reason="needs mpi4py and mpiexec next to the Python executable (pip install mpi4py mpich)")


def _python(tmp_path, code: str, nranks: int = 0, timeout: float = 120):
    """Run ``code`` (in ``tmp_path``) alone or under ``mpiexec -n nranks``."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(code))
    cmd = [sys.executable, str(script)]
    if nranks:
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    env = {k: v for k, v in os.environ.items() if k not in ("TINYPROF", "TINYPROF_PURE")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env=env)


def _ok(proc):
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


# -- fork ------------------------------------------------------------------------------

FORK_PRELUDE = """
    import multiprocessing, os, signal, sys, time
    import tinyprof
    tinyprof.Profiler("app", outdir="out", frequency=3600)
    def idle(_=None):
        time.sleep(60)
"""


def test_pool_terminate_does_not_kill_the_parent(tmp_path):
    _ok(_python(tmp_path, FORK_PRELUDE + """
    with tinyprof.Event("main"):
        pool = multiprocessing.get_context("fork").Pool(2)
        pool.map_async(idle, range(2))
        time.sleep(0.5)
        pool.terminate()
        pool.join()
        with tinyprof.Event("after"):
            pass
    print("survived")
    """))
    assert tinyprof.read(tmp_path / "out").callpaths == [("main",), ("main", "after")]


def test_process_terminate_does_not_kill_the_parent(tmp_path):
    proc = _ok(_python(tmp_path, FORK_PRELUDE + """
    with tinyprof.Event("main"):
        child = multiprocessing.get_context("fork").Process(target=idle)
        child.start()
        child.terminate()
        child.join()
        print(child.exitcode)
    """))
    assert proc.stdout == f"{-signal.SIGTERM}\n"
    assert tinyprof.read(tmp_path / "out").callpaths == [("main",)]


def test_a_forked_child_killed_by_sigterm_leaves_the_parent_alone(tmp_path):
    proc = _ok(_python(tmp_path, FORK_PRELUDE + """
    with tinyprof.Event("main"):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b"x")
            idle()
            os._exit(0)
        os.read(r, 1)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        print(os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit")
    """))
    assert proc.stdout == f"{int(signal.SIGTERM)}\n"
    assert tinyprof.read(tmp_path / "out").callpaths == [("main",)]


def test_a_forked_child_neither_writes_nor_overwrites_the_parents_profile(tmp_path):
    _ok(_python(tmp_path, FORK_PRELUDE + """
    with tinyprof.Event("parent"):
        pass
    tinyprof.flush()
    pid = os.fork()
    if pid == 0:                     # the child exits normally: atexit handlers run
        with tinyprof.Event("child"):
            pass
        sys.exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert tinyprof.read("out").callpaths == [("parent",)]
    with tinyprof.Event("parent"):
        pass
    """))
    p = tinyprof.read(tmp_path / "out")
    assert p.callpaths == [("parent",)] and len(p.series(("parent",), 0)) == 2


def test_a_forked_child_can_profile_itself(tmp_path):
    _ok(_python(tmp_path, FORK_PRELUDE + """
    with tinyprof.Event("parent"):
        pid = os.fork()
        if pid == 0:
            tinyprof.Profiler("kid", outdir="kid")
            with tinyprof.Event("child"):
                pass
            sys.exit(0)
        assert os.waitpid(pid, 0)[1] == 0
    """))
    assert tinyprof.read(tmp_path / "kid").callpaths == [("child",)]
    assert tinyprof.read(tmp_path / "out").callpaths == [("parent",)]


# -- exit paths ------------------------------------------------------------------------

def test_a_suspended_generator_neither_crashes_nor_loses_the_profile(tmp_path):
    _ok(_python(tmp_path, """
    import tinyprof
    tinyprof.Profiler("app", outdir="out")
    def rows():
        with tinyprof.Event("read_rows"):
            yield from range(10)
    with tinyprof.Event("main"):
        g = rows(); next(g)
    with tinyprof.Event("next"):
        pass
    """))
    p = tinyprof.read(tmp_path / "out")
    # read_rows is still open (the generator never finished): written as open
    assert p.callpaths == [("main",), ("main", "read_rows"), ("next",)]
    assert p.series(("main", "read_rows"), 0) == [[]]
    assert len(p.series(("main",), 0)[0]) == len(p.series(("next",), 0)[0]) == 1


def test_events_open_at_exit_are_written_as_open(tmp_path):
    _ok(_python(tmp_path, """
    import tinyprof
    tinyprof.Profiler("app", outdir="out")
    tinyprof.Event("main").__enter__()
    for _ in range(3):
        with tinyprof.Event("step", loop=1):
            pass
    """))
    p = tinyprof.read(tmp_path / "out")
    assert p.callpaths == [("main",), ("main", "step")]
    assert p.series(("main",), 0) == [[]] and len(p.series(("main", "step"), 0)[0]) == 3


def test_data_recorded_after_an_explicit_flush_is_written_at_exit(tmp_path):
    _ok(_python(tmp_path, """
    import tinyprof
    tinyprof.Profiler("app", outdir="out")
    with tinyprof.Event("before"):
        pass
    tinyprof.flush()
    with tinyprof.Event("after"):
        pass
    """))
    p = tinyprof.read(tmp_path / "out")
    assert p.callpaths == [("before",), ("after",)]


def test_nothing_new_after_a_flush_means_no_rewrite_at_exit(tmp_path):
    _ok(_python(tmp_path, """
    import os, tinyprof
    tinyprof.Profiler("app", outdir="out")
    with tinyprof.Event("main"):
        pass
    tinyprof.flush()
    os.utime("out/app.0-of-1.tp", (0, 0))
    """))
    assert os.stat(tmp_path / "out" / "app.0-of-1.tp").st_mtime == 0


# -- the application's own SIGTERM handling ------------------------------------------------
# Whoever installed a handler last gets the signal, with tinyprof's snapshot on the way.

def _terminated(tmp_path, code: str):
    """Run ``code``, send it SIGTERM once it printed ``ready``, return what it printed."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(code))
    return _terminate([sys.executable, str(script)], tmp_path)


def _terminate(argv, cwd, env=None):
    """Run ``argv``, send it SIGTERM once it printed ``ready``, return what it printed."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


TERM_PRELUDE = """
    import signal, threading, time
    import tinyprof
    got = []
"""


def test_a_python_handler_installed_after_the_profiler_gets_sigterm(tmp_path):
    proc = _ok(_terminated(tmp_path, TERM_PRELUDE + """
    tinyprof.Profiler("app", outdir="out", frequency=3600)
    signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    with tinyprof.Event("main"):
        print("ready", flush=True)
        while not got or not tinyprof.snapshots("out"):     # handled, snapshot taken on the way
            time.sleep(0.01)
    tinyprof.flush()                # and the application goes on
    print("handled", got)
    """))
    assert proc.stdout == "handled [15]\n"
    assert tinyprof.snapshots(tmp_path / "out") == [1]
    assert tinyprof.read(tmp_path / "out").callpaths == [("main",)]


def test_a_sigterm_blocked_and_collected_with_sigwait_reaches_the_application(tmp_path):
    """tinyprof's threads block it too, so the kernel keeps it for sigwait."""
    proc = _ok(_terminated(tmp_path, TERM_PRELUDE + """
    tinyprof.Profiler("app", outdir="out", frequency=0.01)   # a snapshot thread too
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    with tinyprof.Event("main"):
        print("ready", flush=True)
        while signal.SIGTERM not in signal.sigpending():   # collected later, not at once
            time.sleep(0.01)
        got.append(signal.sigwait({signal.SIGTERM}))
    print("handled", int(got[0]))
    """))
    assert proc.stdout == "handled 15\n"
    assert tinyprof.read(tmp_path / "out").callpaths == [("main",)]


def test_a_profiler_created_in_another_thread_snapshots_on_sigterm(tmp_path):
    """signal.signal works only in the main thread: it hooks SIGTERM as soon
    as it next runs Python code (here: the call of ``python_code``)."""
    proc = _terminated(tmp_path, TERM_PRELUDE + """
    started = threading.Event()
    def work():
        tinyprof.Profiler("app", outdir="out")
        with tinyprof.Event("main"):
            with tinyprof.Event("step"):
                pass
            started.set()
            time.sleep(3600)
    def python_code():
        pass
    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    started.wait()
    python_code()
    print("ready", flush=True)
    worker.join()
    """)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert tinyprof.snapshots(tmp_path / "out") == [1]
    assert tinyprof.read(tmp_path / "out").callpaths == [("main",), ("main", "step")]


EMBED = r"""
#include <Python.h>
#include <signal.h>
#include <unistd.h>
static void on_term(int sig) {
    static const char m[] = "c handler\n";
    (void)sig;
    (void)!write(1, m, sizeof m - 1);
    _exit(0);
}
int main(int argc, char **argv) {       /* a C handler installed before Python starts */
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    return Py_BytesMain(argc, argv);
}
"""
PYTHON_CONFIG = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}."
                             f"{sys.version_info[1]}-config")


@pytest.mark.skipif(not (shutil.which("cc") and os.path.exists(PYTHON_CONFIG)),
                    reason="needs a C compiler and python-config to embed Python")
def test_a_c_handler_installed_before_python_gets_sigterm_after_the_snapshot(tmp_path):
    def config(*args):
        return subprocess.run([PYTHON_CONFIG, *args], capture_output=True, text=True,
                              check=True).stdout.split()
    (tmp_path / "embed.c").write_text(EMBED)
    subprocess.run(["cc", "-o", str(tmp_path / "embed"), str(tmp_path / "embed.c"),
                    *config("--includes"), *config("--ldflags", "--embed")], check=True)
    (tmp_path / "app.py").write_text(textwrap.dedent(TERM_PRELUDE + """
    assert signal.getsignal(signal.SIGTERM) is None     # set from C: Python cannot call it
    tinyprof.Profiler("app", outdir="out")
    with tinyprof.Event("main"):
        print("ready", flush=True)
        time.sleep(3600)
    """))
    root = os.path.dirname(os.path.dirname(tinyprof.__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *sys.path[1:]])}
    env.pop("TINYPROF", None)
    proc = _terminate([str(tmp_path / "embed"), "app.py"], tmp_path, env)
    assert (proc.returncode, proc.stdout) == (0, "c handler\n"), proc.stderr
    assert tinyprof.read(tmp_path / "out").callpaths == [("main",)]      # the snapshot


@pytest.mark.parametrize("frequency", [math.nan, math.inf, -1, "5", True, None])
def test_bad_frequencies_are_refused_at_once(frequency):
    with pytest.raises((ValueError, TypeError), match="frequency"):
        tinyprof.Profiler("s", frequency=frequency)


def test_settings_are_frozen():
    s = Settings.create("heat", 2, "tag:0,mem:1")
    assert (s.outdir, s.metrics, s.selfkeys) == ("heat.tinyprof", (("tag", True), ("mem", False)),
                                                 "tag:0,mem:1")
    with pytest.raises(AttributeError):
        s.frequency = 3
    assert [s.aggregator_count(p) for p in (1, 15, 16, 40)] == [1, 1, 1, 2]


# -- MPI launches ----------------------------------------------------------------------

@needs_mpi
def test_a_launched_program_without_mpi4py_gets_every_rank(tmp_path):
    _ok(_python(tmp_path, """
    import sys, tinyprof
    assert "mpi4py" not in sys.modules
    tinyprof.Profiler("app", outdir="out")
    with tinyprof.Event("main"):
        pass
    tinyprof.flush()
    """, nranks=3))
    p = tinyprof.read(tmp_path / "out")
    assert p.nranks == 3 and all(len(p.series(("main",), r)[0]) == 1 for r in range(3))


@needs_mpi
def test_without_mpi4py_each_rank_writes_its_own_profile(tmp_path):
    proc = _ok(_python(tmp_path, """
    import sys
    sys.modules["mpi4py"] = None          # as if mpi4py were not installed
    import tinyprof
    tinyprof.Profiler("app", outdir="out")
    with tinyprof.Event("main"):
        pass
    """, nranks=3))
    assert proc.stderr.count("each rank writes its own profile") == 3
    for rank in range(3):
        p = tinyprof.read(tmp_path / "out" / f"app.rank{rank}.0-of-1.tp")
        assert p.nranks == 1 and p.callpaths == [("main",)]


# -- snapshots of ranks that fell behind --------------------------------------------------

def test_a_rank_that_skipped_snapshots_completes_those_others_started(tmp_path):
    """Rank 0 takes snapshots 1, 2, 3; rank 1, late, takes only 3: all three complete."""
    tinyprof.Profiler("s", outdir=tmp_path / "s")
    with tinyprof.Event("main"):
        pass
    settings = Settings.create("s", 3600, outdir=str(tmp_path / "s"), keep="all")
    run = session.current().run
    ranks = [Snapshotter(settings, "s", r, 2, 0.0, run, clock=lambda: 0.0) for r in (0, 1)]
    for k in (1, 2, 3):
        assert ranks[0].take(k)
    assert tinyprof.snapshots(tmp_path / "s") == []
    assert ranks[1].take(3)
    assert tinyprof.snapshots(tmp_path / "s") == [1, 2, 3]
    assert tinyprof.read(tmp_path / "s", snapshot=2).nranks == 2


def test_a_snapshot_never_starts_inside_another(tmp_path):
    """As a signal handler run between bytecodes of a snapshot would: told no at once."""
    tinyprof.Profiler("s", outdir=tmp_path / "s")
    with tinyprof.Event("main"):
        pass
    settings = Settings.create("s", 3600, outdir=str(tmp_path / "s"), keep="all")
    nested: list = []

    def extras(events):
        if not nested:
            nested.append(snap.take(2))
        return None, ()

    snap = Snapshotter(settings, "s", 0, 1, 0.0, session.current().run, clock=lambda: 0.0,
                       extras=extras)
    assert snap.take(1) and nested == [False]
    assert tinyprof.snapshots(tmp_path / "s") == [1]
    assert snap.take(2) and tinyprof.snapshots(tmp_path / "s") == [1, 2]


def test_snapshot_numbers_follow_the_injected_clock(tmp_path):
    now = [100.0]
    settings = Settings.create("s", 2, outdir=str(tmp_path / "s"))
    snap = Snapshotter(settings, "s", 0, 1, 100.0, session.current().run,
                       clock=lambda: now[0])
    assert (snap.due(), snap.forced()) == (0, 1)
    now[0] = 107.5
    assert (snap.due(), snap.forced()) == (3, 4)


def test_the_header_names_run_and_set(tmp_path):
    h = session.current().label("flush", 7).header(4, 2, 2, 1, 2)
    assert (h.set_kind, h.set_number, h.nranks, h.first_rank, h.rank_count) == ("flush", 7, 4, 2, 2)
    assert h.run == session.current().run
    label = assemble.SetLabel("n", (), "ab" * 8, "snapshot", 3)
    assert label.header(1, 0, 1, 0, 1).set_kind == "snapshot"


# -- deep nesting ----------------------------------------------------------------------

def test_deep_nesting_round_trips_through_flush_and_read(clock, flush_read):
    """Recursion thousands of levels deep: every level written and read back."""
    depth = 3000
    events = [tinyprof.Event(f"f{i % 3}") for i in range(depth)]
    for e in events:
        e.__enter__()
        clock.tick(1)
    for e in reversed(events):
        e.__exit__(None, None, None)
    p = flush_read()
    assert len(p.callpaths) == depth and p.callpaths[-1] == tuple(f"f{i % 3}" for i in range(depth))
    assert p.series(p.callpaths[0], 0) == [[depth / 1e9]]
    assert p.series(p.callpaths[-1], 0) == [[1 / 1e9]]
