"""Continuous introspection (paper Fig. 1 (6)): periodic per-rank snapshots.

A snapshot is per rank and makes no MPI call: each rank writes its own event
map, with one atomic write, as its file of the snapshot's set
``<outdir>/snapshots/<k>/<stem>.<rank>-of-<P>.tp``; the set is complete, and
readable, once all P files are there. Nothing waits for another rank, so a
snapshot can never deadlock or match an application collective, whatever the
ranks are doing. All ranks number snapshots alike: snapshot ``k`` is due at
``start + k * frequency`` on a wall-clock ``start`` broadcast once when the
session starts. A rank that fell behind and skipped numbers also writes its
new data into the skipped snapshots that other ranks started (relabelled as
theirs), so that every started snapshot completes. Each file is whole, but
its text is encoded incrementally: only occurrences new since this rank's
previous snapshot.
Layout and reading rules: docs/format.md; behaviour: docs/api.md.
"""
from __future__ import annotations

import signal
import threading
import time
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import _annotate, _assemble, _layout
from ._assemble import HeaderMaker
from ._collect import LocalEvent, collect
from ._format import encode_rank_field, relabel
from ._settings import Settings

# Seconds a stopping snapshot thread may take to finish the snapshot in progress.
STOP_TIMEOUT = 5.0


class Snapshotter:
    """This rank's snapshots for one session: the periodic thread (or timer),
    and the forced snapshots of SIGTERM and of an aborting exit.

    ``clock`` gives wall-clock seconds (tests inject one); ``take(k)`` writes
    snapshot ``k`` now, whatever the clock says. ``sections(events)`` gives
    the file's sections (the ``mpi`` one) for its events, one line each.
    """

    def __init__(self, settings: Settings, stem: str, rank: int, size: int, start: float,
                 headers: Callable[[str, int], HeaderMaker],
                 clock: Callable[[], float] = time.time,
                 sections: Callable[[List[LocalEvent]], Sequence[Tuple[str, bytes]]] = lambda e: ()
                 ) -> None:
        self.settings, self.stem, self.sections = settings, stem, sections
        self.rank, self.size, self.start = rank, size, start
        self.headers, self.clock = headers, clock     # headers(kind, number): the set's
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
        self.encoded: Dict[object, Tuple[int, bytes]] = {}     # keyed by hot-path node
        self.root: object = None

    def due(self) -> int:
        """Number of the newest periodic snapshot due by now."""
        f = self.settings.frequency
        return int((self.clock() - self.start) // f) if f else self.last

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
        impl = _annotate.impl
        if impl.root() is not self.root:        # a reset: a new event map
            self.root, self.encoded = impl.root(), {}
        events = collect(self.root)
        executions = impl.executions()     # after collect: never fewer than the fields hold
        header = self.headers("snapshot", k)(self.size, self.rank, 1, self.rank, self.size)
        data = _assemble.build_file(header, [events], [executions], self._encode,
                                    self.sections(events))
        del events
        outdir = self.settings.outdir
        directory = _layout.snapshot_dir(outdir, k)
        path = _layout.set_file(directory, self.stem, self.rank, self.size)
        failure = _layout.write_file(directory, path, data)
        if failure:
            self.warn(outdir, f"cannot write snapshot file {path}: {failure}; "
                      "the data stays in memory for the next attempt")
            return False
        self._complete_skipped(k, data)
        self.last = max(self.last, k)
        self.taken += 1
        if self.settings.keep == "last":
            _layout.prune_snapshots(outdir, k)
        return True

    def _complete_skipped(self, k: int, data: bytes) -> None:
        """Snapshots between this rank's previous one and ``k`` that other ranks
        started get this rank's data of ``k`` too, labelled as theirs: they
        complete, a little newer for this rank, instead of never (under load
        ranks skip numbers apart)."""
        if k <= self.last + 1:          # nothing skipped: no directory listing
            return
        outdir = self.settings.outdir
        for j in _layout.snapshot_numbers(outdir):
            if self.last < j < k:
                directory = _layout.snapshot_dir(outdir, j)
                _layout.write_file(directory, _layout.set_file(directory, self.stem, self.rank,
                                                               self.size), relabel(data, "snapshot", j))

    def _encode(self, e: LocalEvent, inconsistent: Sequence[str]) -> bytes:
        """``e``'s rank field, encoding only the occurrences not encoded before."""
        done, text = self.encoded.get(e.node, (0, b""))
        stable = max(len(e.times) - 1, done)
        columns = e.metric_columns(inconsistent)
        text += encode_rank_field(e.times[:stable], e.execs,
                                  [None if c is None else c[:stable] for c in columns], done)
        self.encoded[e.node] = (stable, text)
        return text + encode_rank_field(e.times, e.execs, columns, stable)

    def forced(self) -> int:
        """Number of an unscheduled snapshot (SIGTERM, aborting exit): the next
        periodic one, which every rank signalled at about the same time names alike."""
        return max(self.due() + (1 if self.settings.frequency else 0), self.last + 1)

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
        """Start periodic snapshots: a daemon thread, or with ``timer`` (MPI
        thread level SINGLE: no second thread may call into anything) a SIGALRM timer."""
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
        first = self.start + self.settings.frequency - self.clock()
        signal.setitimer(signal.ITIMER_REAL, max(first, 1e-3), self.settings.frequency)
        self.timer = True

    def _loop(self) -> None:
        f = self.settings.frequency
        while not self.stop.wait(max(self.start + (self.due() + 1) * f - self.clock(), 0)):
            self.safe_take(self.due())

    def close(self) -> None:
        """Stop periodic snapshots (waits for one in progress, boundedly)."""
        self.stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(STOP_TIMEOUT)
        if self.timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self.timer = False

