"""Sampled Python stacks (``Profiler(sample=HZ)``, ``python -m tinyprof --sample``):
ordinary callpaths below each thread's innermost open event, threads told
apart, a thread waiting in MPI shown in the MPI call, in flushes and
snapshots; real processes and real ranks, no durations asserted."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from test_mpi_large import MPIEXEC, needs_mpi

import tinyprof
from tinyprof import annotate
from tinyprof.runtime import capture, sites, unannotated
from tinyprof.runtime.sampler import PREFIX, PySamples, Sampler, samples_type, thread_names

# Call sites read CPython 3.11-3.13's frames (docs/unannotated.md): elsewhere they are off, with a warning.
needs_sites = pytest.mark.skipif(sites.sites_unavailable() is not None,
                                 reason=str(sites.sites_unavailable()))


HERE = os.path.basename(__file__)

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
    end in the MPI call that mpi4py's ``recv`` makes (the capture library's
    word), rank 1's in its function, below the script's region."""
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
    module = ("app.py", "<module> (app.py:1)")
    waiting = [cp for cp in prof.callpaths if cp[:2] == module and cp[-1].startswith("MPI_")]
    assert {cp[-1] for cp in waiting} <= {"MPI_Probe", "MPI_Mprobe", "MPI_Recv", "MPI_Mrecv"}, waiting
    assert sum(_sampled(prof, 0)[cp] for cp in waiting) > 0
    assert _sampled(prof, 1).get(module + ("spin (app.py:4)",), 0) > 0
    assert sum(_sampled(prof, 1)[cp] for cp in waiting) == 0


# A thread in a real MPI call, one in a lock's acquire called through a
# method named as an MPI operation, sampled by the table named in argv[1].
IN_MPI = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    from mpi4py import MPI
    from tinyprof.runtime import capture
    from tinyprof.runtime.sampler import PySamples, Sampler, samples_type

    capture.Capture.start()
    sampler = Sampler(10_000_000, PySamples if sys.argv[1] == "python" else samples_type())
    comm = MPI.COMM_WORLD
    lock = threading.Lock()
    lock.acquire()

    class Fake:
        Allreduce = staticmethod(lock.acquire)

    def named_like_mpi():
        Fake.Allreduce()

    def in_mpi():
        comm.Recv(np.empty(1), source=1)

    if comm.rank == 0:
        threads = [threading.Thread(target=named_like_mpi, name="lock"),
                   threading.Thread(target=in_mpi, name="recv")]
        for t in threads:
            t.start()
        for _ in range(3000):   # a hang guard, not a duration: until the Recv is sampled in MPI
            sampler.take()
            if any(k[2][0] == "thread recv" and k[2][-1].startswith("MPI_") for k in sampler.counts()):
                break
            time.sleep(0.01)
        comm.send(None, dest=1)
        lock.release()
        for t in threads:
            t.join()
        for key in sampler.counts():
            print("|".join(key[2]))
    else:
        comm.recv(source=0)
        comm.Send(np.ones(1), dest=0)
""")


@needs_mpi
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
def test_only_a_thread_inside_an_mpi_call_ends_in_it(samples, tmp_path):
    """The capture library says which thread is inside which MPI call: a
    thread in ``comm.Recv`` ends in ``MPI_Recv``; one in a call of a
    method named ``Allreduce`` that is no MPI call ends in its frame."""
    (tmp_path / "app.py").write_text(IN_MPI)
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "app.py",
                           "python" if samples is PySamples else "c"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = IN_MPI.splitlines()
    line = {fn: lines.index(f"def {fn}():") + 1 for fn in ("named_like_mpi", "in_mpi")}
    paths = {tuple(p.split("|")) for p in proc.stdout.splitlines()}
    recv = (f"in_mpi (app.py:{line['in_mpi']})", "MPI_Recv")
    assert any(p[0] == "thread recv" and p[-2:] == recv for p in paths), paths
    lock = {p for p in paths if p[0] == "thread lock"}
    assert lock and all(p[-1] == f"named_like_mpi (app.py:{line['named_like_mpi']})" for p in lock), lock



@needs_mpi
@needs_sites
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


# What counts the samples: the C table (CPython 3.11-3.13) and its pure-Python
# twin (other Pythons, or the extension not built) run the same tests.
TABLES = [pytest.param(PySamples, id="python"),
          pytest.param(samples_type(), id="c",
                       marks=pytest.mark.skipif(samples_type() is PySamples,
                                                reason="no C sampler on this Python"))]


@pytest.fixture(params=TABLES)
def samples(request):
    """The class that counts samples; a Sampler made with it takes samples
    only when a test calls ``take``."""
    return request.param


def _line(fn) -> str:
    return f"{fn.__qualname__} ({HERE}:{fn.__code__.co_firstlineno})"


class Parked:
    """A thread stopped, in C (a lock's acquire), inside ``parked``, inside
    an open Event ``event`` if given: its stack and node stay put while the
    test samples."""

    def __init__(self, name: str, event=None) -> None:
        self.lock, self.ready = threading.Lock(), threading.Event()
        self.lock.acquire()
        self.node = None
        self.thread = threading.Thread(target=self.body, args=(event,), name=name)
        self.thread.start()
        self.ready.wait()

    def body(self, event) -> None:
        if event is None:
            self.parked()
        else:
            with tinyprof.Event(event):
                self.node = annotate.impl.current().id
                self.parked()

    def parked(self) -> None:
        self.ready.set()
        self.lock.acquire()

    def release(self) -> None:
        self.lock.release()
        self.thread.join()


def test_samples_name_threads_frames_and_their_events(samples):
    """Each thread's stack below its innermost open event, ``thread <name>``
    above a thread's frames but the main thread's; tinyprof's threads not
    sampled; one stack sampled twice is one callpath with both samples."""
    sampler = Sampler(10_000_000, samples)
    busy = Parked("busy", event="work")
    mine = Parked(PREFIX + "mine")
    try:
        with tinyprof.Event("main"):
            main = annotate.impl.current().id
            for _ in range(2):
                sampler.take()
            counts = sampler.counts()
    finally:
        busy.release()
        mine.release()
    assert sampler.taken == 2
    parked = _line(Parked.parked)
    keys = [k for k in counts if parked in k[2]]
    assert len(keys) == 1, counts
    execution, parent, names = keys[0]
    assert parent == busy.node and names[0] == "thread busy" and names[-1] == parked
    assert _line(Parked.body) in names
    assert counts[keys[0]] > 0
    here = _line(test_samples_name_threads_frames_and_their_events)
    own = [k for k in counts if k[1] == main and k[2][-1] == here]
    assert not own      # the main thread was inside tinyprof (Sampler.take): its own work, not charged
    assert not any(name.startswith("thread " + PREFIX) for k in counts for name in k[2])
    assert not any(" (sampler.py:" in name for k in counts for name in k[2])    # tinyprof's frames


def test_threads_with_no_open_event_go_below_the_default(samples):
    """A thread with no open event: below the main thread's outermost open
    event, or below ``default`` when set (python -m tinyprof's region); when
    the main thread has no open event, below the root (a sample taken after
    the region closed is not the region's)."""
    sampler = Sampler(10_000_000, samples)
    idle = Parked("idle")
    try:
        with tinyprof.Event("outer"):
            outer = annotate.impl.current().id
            with tinyprof.Event("inner"):
                sampler.take()
                first = sampler.counts()
                sampler.default = 12345
                sampler.take()
                second = sampler.counts()
        sampler.take()
        third = sampler.counts()
    finally:
        idle.release()
    parked = _line(Parked.parked)
    assert {k[1] for k in first if k[2][-1] == parked} == {outer}
    assert {k[1] for k in second if k[2][-1] == parked} == {outer, 12345}
    # the main thread's events closed (python -m tinyprof's region too): below the root, not the default
    assert {k[1] for k in third if k[2][-1] == parked and third[k] != second.get(k)} == {0}
    # counts() adds each read's samples to what it had: the first read's stay
    assert all(second[k] == v for k, v in first.items() if k[1] == outer and k[2][-1] == parked)


def test_sampled_children_never_outgrow_their_event(samples):
    """Two threads with no open event sampled below one event: their samples
    stand for twice the time that passed (and for time before the event
    opened), yet below the event, closed, they add up to no more than its
    time, and each keeps its share."""
    from tinyprof.runtime.collect import collect
    added = unannotated.Unannotated(sample=100)
    added.sampler = Sampler(10_000_000, samples)
    threads = [Parked("one"), Parked("two")]
    try:
        with tinyprof.Event("capped"):
            node = annotate.impl.current().id
            for _ in range(3):
                added.sampler.take()
    finally:
        for t in threads:
            t.release()
    events = added.extend(collect(annotate.impl.root()))
    event = next(e for e in events if e.node.id == node)
    at = events.index(event)
    below = {e.path[-1]: int(e.times.sum()) for e in events if e.parent == at}
    assert set(below) == {"thread one", "thread two"}, below
    assert 0 < sum(below.values()) <= int(event.times.sum())


# Run in a process of its own: a thread named by threading.current_thread()
# stays in threading's registry after it ends (3.11's dummy threads), and a
# later thread given its id would be named after it.
UNNAMED = textwrap.dedent("""
    import _thread, sys, threading, time
    from tinyprof.runtime.sampler import PREFIX, PySamples, Sampler, samples_type

    sampler = Sampler(10_000_000, PySamples if sys.argv[1] == "python" else samples_type())
    steps = [threading.Lock() for _ in range(5)]
    ready = [threading.Event() for _ in range(5)]
    for lock in steps:
        lock.acquire()

    def window(i):
        ready[i].set()
        steps[i].acquire()          # sampled: in a Thread's run, never registered

    def late():
        ready[0].set()
        steps[0].acquire()          # sampled: unnamed
        threading.current_thread().name = "late"    # threading registers it now
        ready[1].set()
        steps[1].acquire()          # sampled: named

    def anonymous():
        ready[2].set()
        steps[2].acquire()          # sampled: never named

    # Threads that run as between their start and threading's registration
    # of them: one of the program's, one named as tinyprof's (never sampled)
    unregistered = [threading.Thread(target=window, args=(3,), name="window"),
                    threading.Thread(target=window, args=(4,), name=PREFIX + "own")]
    idents = [_thread.start_new_thread(late, ()), _thread.start_new_thread(anonymous, ()),
              *(_thread.start_new_thread(t.run, ()) for t in unregistered)]
    for i in (0, 2, 3, 4):
        ready[i].wait()
    sampler.take()
    steps[0].release()
    ready[1].wait()
    sampler.take()
    for i in (1, 2, 3, 4):
        steps[i].release()
    for _ in range(3000):   # a hang guard, not a duration: until both have left Python
        if not any(ident in sys._current_frames() for ident in idents):
            break
        time.sleep(0.01)
    print(idents[1])
    for key in sampler.counts():
        print("|".join(key[2]))
""")


def test_a_thread_sampled_before_threading_names_it_is_named(samples, tmp_path):
    """A thread that threading does not know when it is sampled has all its
    samples under ``thread <name>``, even if it ends before they are read:
    one running a Thread not registered yet (as between a Thread's start and
    its registration: here its ``run`` started with ``_thread``, never
    registered), and one registered before the next sample; a thread that
    ends unnamed keeps its id; one of tinyprof's is not sampled."""
    (tmp_path / "app.py").write_text(UNNAMED)
    proc = subprocess.run([sys.executable, "app.py", "python" if samples is PySamples else "c"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    anonymous, *paths = proc.stdout.splitlines()
    lines = UNNAMED.splitlines()
    leaves = {f"{fn} (app.py:{lines.index(f'def {fn}({arg}):') + 1})"
              for fn, arg in (("late", ""), ("anonymous", ""), ("window", "i"))}
    threads = {path.split("|")[0] for path in paths if path.split("|")[-1] in leaves}
    assert threads == {"thread late", f"thread {anonymous}", "thread window"}, proc.stdout


def test_a_thread_that_ended_before_the_read_keeps_its_name(samples):
    """A thread sampled, then ended (threading forgets it) before the
    samples are read: named as when it was sampled."""
    sampler = Sampler(10_000_000, samples)
    done = Parked("done")
    sampler.take()
    done.release()
    assert done.thread.ident not in thread_names()
    names = {k[2][0] for k in sampler.counts() if k[2][-1] == _line(Parked.parked)}
    assert names == {"thread done"}, names


def test_samples_keep_the_code_of_a_stack_alive(samples):
    """A sampled function's code freed before the samples are read is named
    all the same (a sample holds its code objects, whose addresses key it)."""
    sampler = Sampler(10_000_000, samples)
    scope: dict = {}
    exec(compile("def transient(wait):\n    wait()\n", "gone.py", "exec"), scope)
    lock, ready = threading.Lock(), threading.Event()
    lock.acquire()

    def wait():
        ready.set()
        lock.acquire()

    thread = threading.Thread(target=scope["transient"], args=(wait,), name="t")
    thread.start()
    ready.wait()
    sampler.take()
    lock.release()
    thread.join()
    del scope, thread
    gc.collect()
    for _ in range(3):      # new code objects, where the old one's memory may be reused
        exec(compile("def other(wait):\n    wait()\n", "other.py", "exec"), {})
    names = [k[2] for k in sampler.counts() if k[2][:1] == ("thread t",)]
    assert len(names) == 1 and "transient (gone.py:1)" in names[0], names


def test_the_sampler_thread_samples_until_stopped(samples):
    """``start`` samples in a thread of tinyprof's until ``stop``."""
    sampler = Sampler(1_000_000, samples)
    sampler.start()
    try:    # a hang guard, not a duration: 3000 polls
        for _ in range(3000):
            if sampler.taken >= 3 or not sampler.thread.is_alive():
                break
            time.sleep(0.01)
    finally:
        sampler.stop()
        sampler.thread.join()
    assert sampler.taken >= 3
    assert sampler.thread.name.startswith(PREFIX)
    assert any(k[2] and k[2][0] != "thread " + sampler.thread.name for k in sampler.counts())


def test_a_full_table_returns_from_run_to_be_drained(samples):
    """``run`` returns True once the table holds ``limit`` stacks (the
    sampler then names and empties it), False when stopped."""
    table = samples(annotate.impl.executions, thread_names, type(annotate.impl.root()),
                    threading.main_thread().ident)
    assert table.run(1_000_000, 1) is True
    assert table.taken >= 1 and table.drain()
    assert not table.drain()
    table.stop()
    assert table.run(1_000_000, 1) is False


def test_both_tables_count_alike():
    """The C table and the Python one name the same stacks the same way."""
    if samples_type() is PySamples:
        pytest.skip("no C sampler on this Python")
    pair = [Sampler(10_000_000, t) for t in (PySamples, samples_type())]
    busy, idle = Parked("busy", event="work"), Parked("idle")
    try:
        with tinyprof.Event("main"):
            for sampler in pair:
                sampler.take()
    finally:
        busy.release()
        idle.release()
    python, c = ({k[:2] + (k[2],) for k in s.counts()} for s in pair)
    assert python == c and len(c) >= 2


def _spin_until(condition) -> int:
    """Pure-Python work in this (the main) thread until ``condition()``."""
    s = 0
    while not condition():
        for i in range(1000):
            s += i
    return s


@pytest.mark.skipif(samples_type() is PySamples, reason="no C sampler on this Python")
def test_a_main_thread_running_python_takes_its_own_samples():
    """While the main thread runs Python, the sampler asks it for the sample
    (a pending call) instead of taking the GIL from it; a thread it has not
    named yet is named by the sampler's own next sample, never by its id
    (even when sampled before threading registered it)."""
    sampler = Sampler(1_000_000)
    sampler.start()
    newcomer = None
    try:    # bounded by samples taken either way: no time asserted
        _spin_until(lambda: sampler.by_main >= 3 or sampler.taken >= 300 or not sampler.thread.is_alive())
        newcomer = Parked("newcomer")
        later = sampler.taken + 300
        _spin_until(lambda: any(k[2][:1] == ("thread newcomer",) for k in sampler.counts())
                    or sampler.taken >= later or not sampler.thread.is_alive())
    finally:
        sampler.stop()
        sampler.thread.join()
        if newcomer is not None:
            newcomer.release()
    counts = sampler.counts()
    assert sampler.by_main >= 3
    assert any(k[2][:1] == ("thread newcomer",) for k in counts)
    assert any(k[2][-1] == _line(_spin_until) for k in counts)
    assert not any(k[2][:1] == (f"thread {newcomer.thread.ident}",) for k in counts)
