"""Continuous introspection (paper Fig. 1 (6)): snapshots while the run goes on.

Snapshot ``k`` is a set of files in ``<outdir>/snapshots/<k>/``. Each file is
full, or a delta over the previous complete snapshot (``set snapshot k over
j``) holding only what its ranks recorded since. Full ones end chains of
deltas that double in length (``chain``, then 2 x ``chain``, ...): reading
one takes its chain, and the bytes all snapshots write grow with the data,
not with data x snapshots (docs/api.md). Two ways to write them:

* **aggregated** (MPI at ``MPI_THREAD_MULTIPLE``): a helper thread of every
  rank cuts its data at time ``start + k * frequency`` (or at once on a
  request), sends it to its group's aggregator with nonblocking point-to-point
  messages on tinyprof's own communicator, the aggregator writes one file of
  ``A``, and one nonblocking allreduce tells every rank that ``k`` is complete
  and which number comes next. Every rank takes part in every snapshot, so
  snapshot ``k`` holds every rank's data as of ``k``; the application's
  thread never waits for another rank.
* **per rank** (no MPI, or a lower thread level): each rank writes its own
  file of the set (P files) from a helper thread that makes no MPI call
  (so even ``MPI_THREAD_SINGLE`` allows it: docs/api.md). A rank that fell
  behind also writes its file into the snapshots it skipped that others started.

One snapshot at a time: a snapshot never starts inside another (``_one``).

Layout and reading rules: docs/format.md, "Snapshots"; behaviour: docs/api.md.
"""
from __future__ import annotations

import contextlib
import pickle
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator, List, Optional, Sequence, Tuple

from .. import annotate
from ..format import output_dir
from ..format.encoding import relabel
from ..format.mpi_section import Section
from .assemble import Base, RankPart, SetLabel, assemble, rank_part
from .collect import LocalEvent, collect
from .lifecycle import start_thread
from .settings import Settings, group_of

# Seconds a stopping snapshot thread may take to finish the snapshot in progress.
STOP_TIMEOUT = 5.0
_NAP = (0.0005, 0.02)       # sleep-poll of MPI requests: first and longest nap (s)
_SIZE, _DATA = 11, 12       # message tags of a rank's part: its size, then its bytes
# This rank's share of a snapshot besides its fields: its ``mpi`` section
# (lines: positions in the events) and whole sections of a one-rank file.
Extras = Callable[[List[LocalEvent]], Tuple[Optional[Section], Sequence[Tuple[str, bytes]]]]


@dataclass(frozen=True)
class SnapshotStats:
    """What this rank's snapshots cost so far (benchmarks, the demo)."""

    taken: int          # snapshots written
    cpu: float          # CPU seconds spent in them


class _Stopped(Exception):
    """The session closed while a snapshot waited for other ranks."""


class Snapshotter:
    """This rank's snapshots for one session; see the module docstring.

    ``clock`` gives wall-clock seconds (tests inject one); ``take(k)`` writes
    this rank's file of snapshot ``k`` now (per rank), whatever the clock says.
    """

    def __init__(self, settings: Settings, stem: str, rank: int, size: int, start: float,
                 run: str, clock: Callable[[], float] = time.time,
                 extras: Extras = lambda events: (None, ()),
                 paused: Callable[[], ContextManager[None]] = contextlib.nullcontext,
                 meta: Callable[[], bytes] = bytes,
                 extended: Callable[[List[LocalEvent]], List[LocalEvent]] = lambda events: events
                 ) -> None:
        self.settings, self.stem, self.extras, self.paused = settings, stem, extras, paused
        self.meta = meta                    # the run's meta section (rank 0; b"" elsewhere)
        self.extended = extended            # the copy with the call sites and samples
        self.rank, self.size, self.start = rank, size, start
        self.run, self.clock = run, clock
        self.last = 0                       # newest snapshot number this rank took part in
        self.lock = threading.Lock()        # one snapshot at a time (``_one``)
        self.owner: Optional[int] = None    # the thread taking one
        self.stop = threading.Event()       # no MPI call any more
        self.halting = threading.Event()    # MPI_Finalize: one last aggregated snapshot
        self.agreed: Optional[int] = None   # ... after which all ranks number from here
        self.wake = threading.Event()       # a snapshot is wanted now (or stop)
        self.done = threading.Condition()   # notified when a snapshot ends
        self.cuts = self.ended = 0          # snapshots whose data was cut / that ended
        self.thread: Optional[threading.Thread] = None
        self.comm: Any = None               # aggregated: tinyprof's snapshot communicator
        self.ready: Any = None              # ... and the request that makes it
        self.keyval: Any = None             # ... and the MPI_Finalize hook that stops it
        self.mpi_lock = threading.Lock()    # held by the helper around each MPI call
        self.orphans: list = []             # requests left pending by a stop, and their buffers
        self.closed = False
        self.warned: set = set()
        self.taken, self.cpu = 0, 0.0       # snapshots written, CPU seconds spent in them
        # What this rank's fields held at snapshot `over`, which the next delta
        # builds on (None: the next is full), valid for the event map of `root`.
        self.base: Base = {}
        self.over: Optional[int] = None
        self.over_kind = ""                 # "rank" or "aggregated": who wrote snapshot `over`
        self.deltas = 0                     # deltas since the last full snapshot
        self.fulls = 0                      # full snapshots so far
        self.root: object = None
        self.fresh = False                  # the event map was reset since the last full one

    def due(self) -> int:
        """Number of the newest periodic snapshot due by now."""
        f = self.settings.frequency
        return int((self.clock() - self.start) // f) if f else self.last

    def _part(self, k: int, kind: str
              ) -> Tuple[bool, RankPart, Base, Sequence[Tuple[str, bytes]]]:
        """This rank's part of snapshot ``k``: whether it is full, the part
        (whole, or since ``over``), the base it leaves, and its whole sections."""
        impl = annotate.impl
        if impl.root() is not self.root:        # a reset: a new event map, nothing to build on
            self.root, self.base, self.fresh = impl.root(), {}, self.root is not None
        full = self._full(k, kind)
        events = self.extended(collect(self.root))
        executions = impl.executions()     # after collect: never fewer than the fields hold
        mpi, sections = self.extras(events)
        part, base = rank_part(events, self.rank, executions, self.settings.metrics,
                               {} if full else self.base, mpi)
        return full, part, base, sections

    def _full(self, k: int, kind: str) -> bool:
        """Whether snapshot ``k`` must be full: nothing to build on (or only a
        later number: ``take`` may go back; or files of other names: a per-rank
        file after aggregated ones, once MPI is finalized), or the chain is long enough.
        Aggregated, this depends only on what all ranks agreed, so that all
        decide alike; a reset rank then sends its fields whole (from an empty
        base: callpaths it lost still show in that delta) and asks everyone
        for a full snapshot next. Per rank, a reset means a full one at once."""
        return self.over is None or self.over >= k or self.over_kind != kind \
            or self.deltas >= self.chain_length() or (self.fresh and kind == "rank")

    def chain_length(self) -> int:
        """Deltas before the next full snapshot: ``chain`` after the first
        full one, twice as many after each later one. Full snapshots rewrite
        all the data, so spacing them geometrically bounds what all snapshots
        write to a few times the data however long the run; a fixed length
        would make it grow with data x snapshots / chain."""
        return self.settings.chain << min(max(self.fulls - 1, 0), 40)

    def _commit(self, k: int, base: Base, full: bool, kind: str) -> None:
        """Snapshot ``k`` is complete: the next delta builds on it."""
        self.base, self.over, self.over_kind = base, k, kind
        self.deltas = 0 if full else self.deltas + 1
        self.fulls += full
        self.fresh = self.fresh and not full
        self.taken += 1

    def stats(self) -> SnapshotStats:
        """The snapshots written so far and their cost."""
        return SnapshotStats(self.taken, self.cpu)

    def label(self, k: int) -> SetLabel:
        """The label of snapshot ``k``'s files."""
        s = self.settings
        return SetLabel(s.name, s.metrics, self.run, "snapshot", k, self.meta())

    def warn(self, key: str, message: str) -> None:
        if key not in self.warned:          # once per directory: not every period
            self.warned.add(key)
            warnings.warn(f"tinyprof: {message}", RuntimeWarning, stacklevel=3)

    # -- per rank --------------------------------------------------------------------

    @contextlib.contextmanager
    def _one(self) -> Iterator[bool]:
        """Whether this thread may take a snapshot now: never inside another
        one (a thread already taking one, e.g. from a signal handler, is
        told no at once), and after the one another thread takes (boundedly)."""
        me = threading.get_ident()
        if self.owner == me or not self.lock.acquire(timeout=STOP_TIMEOUT):
            yield False
            return
        self.owner = me
        try:
            yield True
        finally:
            self.owner = None
            self.lock.release()

    def take(self, k: int) -> bool:
        """Write this rank's file of snapshot ``k``; False (and a warning) if it
        cannot, or if a snapshot is in progress in this thread or will not end."""
        with self._one() as free:
            if not free:
                return False
            cpu = time.thread_time()
            with self.done:
                self.cuts += 1
            try:
                return self._write(k)
            finally:
                self.cpu += time.thread_time() - cpu
                self._ended()

    def _write(self, k: int) -> bool:
        """``take`` under the lock."""
        full, part, base, sections = self._part(k, "rank")
        label = self.label(k)
        header = label.header(self.size, self.rank, 1, self.rank, self.size)
        header.set_base = None if full else self.over
        data = assemble(header, [part], header.set_base is not None,
                        [*sections, *label.tail(self.rank)])
        del part
        outdir = self.settings.outdir
        problem = output_dir.write_set_file(output_dir.snapshot_dir(outdir, k), self.stem, self.rank,
                                            self.size, data)
        if problem:
            self.warn(outdir, f"cannot write snapshot file {problem}; "
                      "the data stays in memory for the next attempt")
            return False
        self._complete_skipped(k, data, header.set_base)
        self.last = max(self.last, k)
        self._commit(k, base, header.set_base is None, "rank")
        if self.settings.keep == "last" and self.rank == 0:
            output_dir.prune_snapshots(outdir, self.run)
        return True

    def _complete_skipped(self, k: int, data: bytes, base: Optional[int]) -> None:
        """Snapshots between this rank's previous one and ``k`` that other ranks
        started get this rank's data of ``k`` too, labelled as theirs: they
        complete, a little newer for this rank, instead of never (under load
        ranks skip numbers apart)."""
        if k <= self.last + 1:          # nothing skipped: no directory listing
            return
        outdir = self.settings.outdir
        for j in output_dir.snapshot_numbers(outdir):
            there = output_dir.snapshot_dir(outdir, j)
            if self.last < j < k and (base is None or base < j) and \
                    output_dir.holds_run(there, self.run):   # not an earlier run's
                output_dir.write_set_file(there, self.stem, self.rank, self.size,
                                          relabel(data, "snapshot", j, base))

    def forced(self) -> int:
        """Number of an unscheduled per-rank snapshot (SIGTERM, aborting exit):
        the next periodic one, which every rank signalled at about the same time
        names alike; after MPI_Finalize, the number all ranks agreed on then."""
        if self.agreed is not None:
            return max(self.agreed, self.last + 1)
        return max(self.due() + (1 if self.settings.frequency else 0), self.last + 1)

    def safe_take(self, k: int) -> None:
        try:
            self.take(k)
        except Exception as e:      # the profiler never takes the application down
            self.warn("error", f"snapshot failed: {type(e).__name__}: {e}")

    def run_periodic(self) -> None:
        """Start periodic per-rank snapshots, from a daemon thread."""
        self.thread = start_thread(self._loop, (), "tinyprof-snapshots")

    def _loop(self) -> None:
        f, cost = self.settings.frequency, 0.0
        while True:
            # at least as long as the last one took: never all of the time on snapshots
            self.wake.wait(max(self.start + (self.due() + 1) * f - self.clock(), cost))
            if self.stop.is_set():
                return
            self.wake.clear()
            began = time.monotonic()
            self.safe_take(max(self.due(), self.last + 1))
            cost = time.monotonic() - began

    # -- aggregated ------------------------------------------------------------------

    def run_aggregated(self, comm: Any) -> None:
        """Start periodic aggregated snapshots over a duplicate of ``comm``
        (collective: every rank calls it; the duplicate completes in the helper)."""
        from mpi4py import MPI
        with self.paused():
            self.comm, self.ready = comm.Idup()
        # MPI_Finalize deletes COMM_SELF's attributes first, while MPI still
        # works: the helpers take a last snapshot together there and stop,
        # never to call MPI after it (an application may finalize MPI itself,
        # long before exit, and record more afterwards).
        self.keyval = MPI.Comm.Create_keyval(delete_fn=lambda *args: self._halt(final=True))
        MPI.COMM_SELF.Set_attr(self.keyval, True)
        self.thread = start_thread(self._helper, (), "tinyprof-snapshots")

    def _helper(self) -> None:
        f = self.settings.frequency
        k = 1
        with self.paused():         # its MPI traffic is tinyprof's, never the application's
            try:
                self._exchange(lambda: [self.ready])
                # a first call on it, before any cut: with ucx=True, the capture
                # library learns that the traffic of its setting up was tinyprof's
                with self.mpi_lock:         # as every MPI call of the helper's (``_halt``)
                    if self.stop.is_set():
                        return
                    self.comm.Iprobe()
                while self.agreed is None:
                    if not self.halting.is_set():
                        self.wake.wait(max(self.start + k * f - self.clock(), 0))
                    if self.stop.is_set():
                        return
                    self.wake.clear()
                    k = self._aggregated(k)
            except _Stopped:
                return
            except Exception as e:  # the profiler never takes the application down
                self.warn("error", f"snapshots stopped: {type(e).__name__}: {e}")

    def _aggregated(self, k: int) -> int:
        """Take part in snapshot ``k``; the number of the next one, agreed by all ranks."""
        import numpy as np
        from mpi4py import MPI

        comm, settings = self.comm, self.settings
        cpu = time.thread_time()
        with self._one() as free:
            if not free:
                raise _Stopped()        # after a hung per-rank one (MPI is being finalized)
            with self.done:
                self.cuts += 1
            full, part, base, _ = self._part(k, "aggregated")
        blob = pickle.dumps(part, pickle.HIGHEST_PROTOCOL)
        del part
        naggs = settings.aggregator_count(self.size)
        index, first, count = group_of(self.rank, self.size, naggs)
        ok = 1
        try:
            if self.rank != first:
                size = np.array([len(blob)], np.int64)
                self._exchange(lambda: [comm.Isend(size, first, _SIZE),
                                        comm.Isend(blob, first, _DATA)])
            else:
                parts = self._receive(blob, first, count)
                label = self.label(k)
                header = label.header(self.size, first, count, index, naggs)
                header.set_base = None if full else self.over
                data = assemble(header, parts, not full, label.tail(index))
                del parts
                problem = output_dir.write_set_file(output_dir.snapshot_dir(settings.outdir, k),
                                                    self.stem, index, naggs, data)
                if problem:
                    ok = 0
                    self.warn(settings.outdir, f"cannot write snapshot file {problem}; "
                              "the next snapshot holds its data")
            f = settings.frequency
            wanted = max(k + 1, int((self.clock() - self.start) // f) + 1)
            # MIN: every file written, the latest next number, a full one next
            # if any reset, the last one if any rank is in MPI_Finalize
            agreed = np.array([ok, -wanted, -int(self.fresh), -int(self.halting.is_set())],
                              np.int64)
            self._exchange(lambda: [comm.Iallreduce(MPI.IN_PLACE, agreed, MPI.MIN)])
        finally:
            self.cpu += time.thread_time() - cpu
        self.last = k
        if agreed[0]:
            self._commit(k, base, full, "aggregated")
            if settings.keep == "last" and self.rank == 0:
                output_dir.prune_snapshots(settings.outdir, self.run)
        if agreed[2]:
            self.deltas = self.chain_length()
        if agreed[3]:           # every helper stops after this one; the ranks' own files go on
            self.agreed = int(-agreed[1])
        self._ended()
        return int(-agreed[1])

    def _receive(self, blob: bytes, first: int, count: int) -> List[RankPart]:
        """On an aggregator: the parts of its group's ranks, its own first."""
        import numpy as np
        comm = self.comm
        sizes = np.zeros(count, np.int64)
        self._exchange(lambda: [comm.Irecv(sizes[i:i + 1], first + i, _SIZE)
                                for i in range(1, count)])
        buffers = [bytearray(int(n)) for n in sizes[1:]]
        self._exchange(lambda: [comm.Irecv(b, first + i, _DATA)
                                for i, b in enumerate(buffers, 1)])
        return [pickle.loads(blob), *(pickle.loads(b) for b in buffers)]

    def _exchange(self, post: Callable[[], list]) -> None:
        """Post requests (``post()``) and sleep-poll them until done (no busy
        wait while other ranks are late). Each MPI call happens under
        ``mpi_lock`` and only while not stopped, so none follows ``_halt``;
        ``_Stopped`` then (the requests stay pending: cancelling a collective
        is erroneous). Pending requests and their buffers are kept for good:
        freed in this thread, they would call MPI_Request_free while
        MPI_Finalize goes on in another, and MPI may still write into them."""
        from mpi4py import MPI
        nap, requests = _NAP[0], None
        while True:
            with self.mpi_lock:
                if self.stop.is_set():
                    self.orphans.append((requests, post))
                    raise _Stopped()
                if requests is None:
                    requests = post()
                elif MPI.Request.Testall(requests):
                    return
            time.sleep(nap)
            nap = min(2 * nap, _NAP[1])

    def _halt(self, final: bool = False) -> None:
        """Stop the helper; with ``final`` (MPI_Finalize, on every rank), after
        a last snapshot that all ranks agree is the last (boundedly). Returns
        when the helper makes no MPI call any more, whatever the timing: it
        holds ``mpi_lock`` only around one nonblocking call, and checks
        ``stop`` under it before each."""
        thread = self.thread
        own = thread is threading.current_thread()
        if final and thread is not None and thread.is_alive() and not own:
            self.halting.set()
            self.wake.set()
            thread.join(STOP_TIMEOUT)
        self.stop.set()
        self.wake.set()
        with self.mpi_lock:                     # none in flight, none after
            pass
        if thread is not None and not own:
            thread.join(STOP_TIMEOUT)

    # -- both ------------------------------------------------------------------------

    def _ended(self) -> None:
        with self.done:
            self.ended += 1
            self.done.notify_all()

    def snapshot(self, timeout: float) -> bool:
        """A snapshot now: per rank, this rank's file of the next number; aggregated,
        a request to the helper, which takes the next snapshot at once (the others
        join it when they request one too or when it falls due). Waits at most
        ``timeout`` seconds for one that cut its data after this call to end;
        whether one did."""
        if self.comm is None or not self._helper_alive():    # per rank, or MPI finalized
            return not self.closed and self.take(self.forced())
        with self.done:
            target = self.cuts      # the helper counts a cut before it copies the data
        self.wake.set()
        end = time.monotonic() + timeout
        with self.done:
            while self.ended <= target:
                left = end - time.monotonic()
                if left <= 0 or self.stop.is_set() or not self._helper_alive():
                    return False
                self.done.wait(min(left, 0.05))
        return True

    def _helper_alive(self) -> bool:
        """Whether the helper thread runs (it never started if its set-up raised)."""
        return self.thread is not None and self.thread.is_alive()

    def free(self) -> None:
        """After ``close``, while MPI is live: remove the Finalize hook and free
        the snapshot communicator, unless the helper is still alive or its
        duplication never completed (MPI frees it at MPI_Finalize then)."""
        comm, self.comm = self.comm, None
        if comm is None:
            return
        from mpi4py import MPI
        MPI.COMM_SELF.Delete_attr(self.keyval)
        MPI.Comm.Free_keyval(self.keyval)
        if not self._helper_alive() and self.ready.Test():
            comm.Free()

    def close(self) -> None:
        """Stop snapshots (waits for one in progress, boundedly)."""
        self.closed = True
        self._halt()
