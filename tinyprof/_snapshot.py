"""Continuous introspection (paper Fig. 1 (6)): periodic snapshots, the exit
flush and crash safety.

A snapshot is per rank and makes no MPI call: each rank writes its own event
map, with one atomic write, as its file of the snapshot's set
``<outdir>/snapshots/<k>/<name>.<rank>-of-<P>.tp``; the set is complete, and
readable, once all P files are there. Nothing waits for another rank, so a
snapshot can never deadlock or match an application collective, whatever the
ranks are doing. All ranks number snapshots alike: snapshot ``k`` is due at
``start + k * frequency`` on a wall-clock ``start`` broadcast once by
``Profiler()``. Each file is whole, but its text is encoded incrementally:
only occurrences new since this rank's previous snapshot are encoded.
Layout and reading rules: docs/format.md; behaviour: docs/api.md.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from . import _annotate, _flush, _profile
from ._eventmap import LocalEvent, collect
from ._format import encode_rank_field, file_name
from ._profiler import Profiler

# Seconds the SIGTERM snapshot may take before the application's own handling goes on.
TERM_TIMEOUT = 5.0

_current: Optional["Snapshotter"] = None
_aborting = False           # an unhandled exception or a coming MPI_Abort: no collective at exit
_installed = False
_previous_term: Any = None
_pending: list = []
_wakeup = -1                       # our wakeup fd (write end), if the watcher runs
_term_done = threading.Event()     # the watcher finished a SIGTERM snapshot
_VOTE, _DECISION = 1, 2            # message tags of the exit agreement


class Snapshotter:
    """This rank's snapshots for one ``Profiler``: the periodic thread (or
    timer), and the forced snapshots of SIGTERM and of an aborting exit."""

    def __init__(self, prof: Profiler, rank: int, size: int, start: float, comm: Any) -> None:
        self.prof, self.rank, self.size, self.start = prof, rank, size, start
        self.comm = comm                    # private Dup of the flush communicator, or None
        self.last = 0                       # newest snapshot number this rank wrote
        self.lock = threading.RLock()       # RLock: a signal handler may interrupt a snapshot
        self.stop = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.timer = False
        self.warned: set = set()
        self.taken, self.cpu = 0, 0.0       # snapshots written, CPU seconds spent in them
        # Incremental encoding: per callpath, the count of occurrences already
        # encoded and their text (all but the newest, which may still change:
        # a loop-2 sum, a metric given late); valid for the event map of `root`.
        self.encoded: Dict[Tuple[str, ...], Tuple[int, bytes]] = {}
        self.root: Any = None

    def due(self) -> int:
        """Number of the newest periodic snapshot due by now."""
        f = self.prof.frequency
        return int((time.time() - self.start) // f) if f else self.last

    def take(self, k: int) -> bool:
        """Write this rank's file of snapshot ``k``; False (and a warning) if it cannot."""
        with self.lock:
            cpu = time.thread_time()
            try:
                return self._write(k)
            finally:
                self.cpu += time.thread_time() - cpu

    def _write(self, k: int) -> bool:
        """``take`` under the lock."""
        prof = self.prof
        impl = _annotate.impl
        if impl.root() is not self.root:        # a reset: a new event map
            self.root, self.encoded = impl.root(), {}
        events = collect(self.root)
        executions = impl.executions()     # after collect: never fewer than the fields hold
        header = _flush._header(prof, self.size, self.rank, 1, self.rank, self.size)
        data = _flush.build_file(header, [events], [executions], self._encode)
        del events
        directory = snapshot_dir(prof.outdir, k)
        path = os.path.join(directory, file_name(prof.name, self.rank, self.size))
        failure = _flush.write_file(directory, path, data)
        if failure:
            self.warn(prof.outdir, f"cannot write snapshot file {path}: {failure}; "
                      "the data stays in memory for the next attempt")
            return False
        self.last = max(self.last, k)
        self.taken += 1
        if prof.keep == "last":
            _prune(prof.outdir, k)
        return True

    def _encode(self, e: LocalEvent, inconsistent: Sequence[str]) -> bytes:
        """``e``'s rank field, encoding only the occurrences not encoded before."""
        done, text = self.encoded.get(e.path, (0, b""))
        stable = max(len(e.times) - 1, done)
        columns = e.metric_columns(inconsistent)
        text += encode_rank_field(e.times[:stable], e.execs,
                                  [None if c is None else c[:stable] for c in columns], done)
        self.encoded[e.path] = (stable, text)
        return text + encode_rank_field(e.times, e.execs, columns, stable)

    def forced(self) -> int:
        """Number of an unscheduled snapshot (SIGTERM, aborting exit): the next
        periodic one, which every rank signalled at about the same time names alike."""
        return max(self.due() + (1 if self.prof.frequency else 0), self.last + 1)

    def warn(self, key: str, message: str) -> None:
        if key not in self.warned:          # once per directory: not every period
            self.warned.add(key)
            warnings.warn(f"tinyprof: {message}", RuntimeWarning, stacklevel=3)

    def safe_take(self, k: int) -> None:
        try:
            self.take(k)
        except Exception as e:      # the profiler never takes the application down
            self.warn("error", f"snapshot failed: {type(e).__name__}: {e}")

    # -- periodic snapshots ----------------------------------------------------------

    def run_periodic(self, timer: bool) -> None:
        if not timer:
            self.thread = threading.Thread(target=self._loop, name="tinyprof-snapshots",
                                           daemon=True)
            self.thread.start()
            return
        # Safe points: the handler runs in the main thread between bytecodes, so
        # no second thread exists (MPI_THREAD_SINGLE); a long C call delays it.
        if threading.current_thread() is not threading.main_thread() or \
                signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
            self.warn("timer", "MPI thread level is MPI_THREAD_SINGLE and SIGALRM is taken "
                      "(or Profiler() is not in the main thread): no periodic snapshots; "
                      "the exit flush and the SIGTERM snapshot still work")
            return
        self.warn("timer", "MPI thread level is MPI_THREAD_SINGLE: snapshots are taken at "
                  "safe points (a SIGALRM timer, run between bytecodes of the main thread), "
                  "delayed while the main thread is inside a long MPI or C call")
        signal.signal(signal.SIGALRM, lambda signum, frame: self.safe_take(self.due()))
        first = self.start + self.prof.frequency - time.time()
        signal.setitimer(signal.ITIMER_REAL, max(first, 1e-3), self.prof.frequency)
        self.timer = True

    def _loop(self) -> None:
        f = self.prof.frequency
        while not self.stop.wait(max(self.start + (self.due() + 1) * f - time.time(), 0)):
            self.safe_take(self.due())

    def close(self) -> None:
        """Stop periodic snapshots (waits for one in progress, boundedly)."""
        self.stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(TERM_TIMEOUT)
        if self.timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self.timer = False


def snapshot_dir(outdir: str, k: int) -> str:
    return os.path.join(outdir, _profile.SNAPSHOTS, f"{k:06d}")


def _prune(outdir: str, k: int) -> None:
    """keep="last": once snapshot ``k`` is complete, remove every older one.
    Each rank checks after its own write (one directory listing), so the rank
    that completes ``k`` removes ``k - 1``; until then ``k - 1`` stays readable."""
    if _profile._complete(snapshot_dir(outdir, k)) is None:
        return
    base = os.path.join(outdir, _profile.SNAPSHOTS)
    for entry in os.listdir(base):
        if entry.isdigit() and int(entry) < k:
            shutil.rmtree(os.path.join(base, entry), ignore_errors=True)


def start(prof: Profiler) -> None:
    """Called by every ``Profiler()``: replace the previous snapshotter,
    start periodic snapshots if asked, install the exit handlers once."""
    global _current
    if _current is not None:
        _current.close()
        if _current.comm is not None and not sys.modules["mpi4py.MPI"].Is_finalized():
            _current.comm.Free()            # collective, like Profiler() itself
        _current = None
    if not _annotate.ENABLED:
        return
    rank, size, start_time, timer, private = 0, 1, time.time(), False, None
    comm = _flush._mpi_comm(prof)
    if comm is not None:
        from mpi4py import MPI      # the application imported it already
        rank, size = comm.Get_rank(), comm.Get_size()
        private = comm.Dup()        # tinyprof's own: its exit vote never matches the application's
        if prof.frequency:          # one clock for all ranks
            start_time = private.bcast(start_time, root=0)
            timer = MPI.Query_thread() == MPI.THREAD_SINGLE
    _current = Snapshotter(prof, rank, size, start_time, private)
    _install_once()
    if prof.frequency:
        _current.run_periodic(timer)


# -- exit, exceptions, SIGTERM ----------------------------------------------------------

def _install_once() -> None:
    global _installed, _previous_term
    if _installed:
        return
    _installed = True
    atexit.register(_at_exit)
    # A main-thread exception ends the rank (and the job); a thread's does not,
    # so only the former rules out the collective exit flush.
    sys.excepthook = _marking(sys.excepthook, lambda *args: True)
    run = sys.modules.get("mpi4py.run")     # python -m mpi4py: MPI_Abort at exit is coming
    if run is not None and hasattr(run, "set_abort_status"):
        run.set_abort_status = _marking(run.set_abort_status, _abort_status)
    if threading.current_thread() is threading.main_thread():
        _previous_term = signal.signal(signal.SIGTERM, _on_sigterm)
        _watch_sigterm()


def _abort_status(status) -> bool:
    """Whether mpi4py's ``set_abort_status(status)`` means MPI_Abort at exit."""
    if isinstance(status, SystemExit):
        status = status.code
    return status not in (0, None)


def _marking(hook, aborts):
    def wrapper(*args):
        global _aborting
        if aborts(*args):
            _aborting = True
        return hook(*args)
    return wrapper


# A Python signal handler runs only when the main thread next executes
# bytecode: a rank blocked in MPI (waiting for a rank that died) would neither
# snapshot nor die. Python's C-level handler also writes the signal number to
# the wakeup fd at once, so a watcher thread snapshots, and applies the default
# action, without the main thread. The Python handler remains for a callable
# previous handler, and for when another wakeup fd (e.g. asyncio's) is in use.

def _watch_sigterm() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    other = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if other != -1:                     # the application's: keep it, no watcher
        signal.set_wakeup_fd(other)
        os.close(read_end)
        os.close(write_end)
        return
    global _wakeup
    _wakeup = write_end
    threading.Thread(target=_watch, args=(read_end,), name="tinyprof-sigterm",
                     daemon=True).start()


def _watch(fd: int) -> None:
    while True:
        if signal.SIGTERM in os.read(fd, 64):
            _term_snapshot()
            if _previous_term == signal.SIG_DFL:
                _die()
            _term_done.set()


def _term_snapshot() -> None:
    """This rank's SIGTERM snapshot, then (boundedly) wait until every rank's
    file of it is there: the first rank to die makes mpiexec kill the rest."""
    snap = _current
    if snap is None or not _annotate.impl.root().children:
        return
    end = time.monotonic() + TERM_TIMEOUT
    k = snap.forced()
    # A helper thread bounds the attempt: a hung file system cannot hold the exit.
    worker = threading.Thread(target=snap.safe_take, args=(k,), daemon=True)
    worker.start()
    worker.join(TERM_TIMEOUT)
    directory = snapshot_dir(snap.prof.outdir, k)
    while snap.size > 1 and time.monotonic() < end and _profile._complete(directory) is None:
        time.sleep(0.01)


def _die() -> None:
    """Die by SIGTERM from any thread (``signal.signal`` is main-thread only)."""
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal(signal.SIGTERM, ctypes.c_void_p(0))        # SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)


def _on_sigterm(signum, frame) -> None:
    current = signal.set_wakeup_fd(_wakeup)
    if _wakeup == -1 or current != _wakeup:     # no watcher saw this signal
        signal.set_wakeup_fd(current)
        _term_snapshot()
    else:
        _term_done.wait(TERM_TIMEOUT + 1)
    _term_done.clear()
    previous = _previous_term
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:         # the default action: die by SIGTERM
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _at_exit() -> None:
    """Flush if the application did not: collective while MPI is still alive
    (atexit runs before mpi4py's MPI_Finalize) if every rank exits normally,
    else each rank's own snapshot, which needs no other rank."""
    snap = _current
    if snap is None:
        return
    snap.close()
    prof = snap.prof
    need = not prof.flushed and bool(_annotate.impl.root().children)
    try:
        normal, needed = _agree_at_exit(snap, need)
        if normal and needed:
            _flush.flush()
        elif need:
            snap.take(snap.forced())
    except Exception as e:
        snap.warn("exit", f"exit flush failed: {type(e).__name__}: {e}")


def _agree_at_exit(snap: Snapshotter, need: bool) -> Tuple[bool, bool]:
    """(every rank exits normally, some rank needs a flush), agreed over the
    private communicator, so that no rank enters a collective flush that an
    aborting rank will never join. Without MPI, a lone process flushes even
    when aborting (its flush has no collective); ranks whose MPI is gone cannot.

    Point-to-point, not a collective: an aborting rank posts its small
    (eager) message and goes on to MPI_Abort or MPI_Finalize without waiting
    for, or progressing, anyone. Rank 0 gathers the votes and sends the
    decision; if rank 0 itself aborts, it sends "abort" at once.
    """
    comm = snap.comm
    if comm is None or _flush._mpi_comm(snap.prof) is None:
        return snap.size == 1, need
    mine = np.array([0 if _aborting else 1, int(need)], np.int64)
    _pending.append(mine)                   # buffers outlive requests never completed
    if comm.Get_rank() != 0:
        sent = comm.Isend(mine, dest=0, tag=_VOTE)
        if _aborting:
            _wait([sent], TERM_TIMEOUT)
            return False, need
        decision = np.empty(2, np.int64)
        _pending.append(decision)
        _wait([sent, comm.Irecv(decision, source=0, tag=_DECISION)])
        return bool(decision[0]), bool(decision[1])
    if not _aborting:
        votes = np.empty((comm.Get_size() - 1, 2), np.int64)
        _wait([comm.Irecv(votes[r - 1], source=r, tag=_VOTE) for r in range(1, comm.Get_size())])
        mine[0] &= int(votes[:, 0].all())
        mine[1] |= int(votes[:, 1].any())
    _wait([comm.Isend(mine, dest=r, tag=_DECISION) for r in range(1, comm.Get_size())],
          TERM_TIMEOUT if _aborting else None)
    return bool(mine[0]), bool(mine[1])


def _wait(requests: list, timeout: Optional[float] = None) -> None:
    """Sleep-poll ``requests`` (no busy wait on slow ranks), at most ``timeout`` s."""
    from mpi4py import MPI
    end = None if timeout is None else time.monotonic() + timeout
    while not MPI.Request.Testall(requests):
        if end is not None and time.monotonic() > end:
            return
        time.sleep(0.001)
