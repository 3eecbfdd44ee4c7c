"""The profiling session: the one owner of a run's mutable state.

A :class:`Session` holds the settings, the communicators, the run id, the
flush count, the snapshotter and what the last flush wrote. ``start()``
makes it live (collective under MPI), ``close()`` ends it; lifecycle events
(exit, SIGTERM, fork: ``lifecycle.py``) call its methods. The hot path
(``annotate``) knows nothing of it: the session reads the event map when it
writes. ``Profiler(...)`` (``profiler.py``) is the friendly front.
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple

from .. import annotate
from ..annotate import metrics
from ..format import meta_section, output_dir
from ..format.encoding import NO_RUN, env_run_id
from ..format.mpi_section import Section
from . import assemble, lifecycle, unannotated
from .collect import LocalEvent, collect, node_lines
from .settings import Settings
from .snapshots import SnapshotStats, Snapshotter
from .world import launched_rank, live_mpi, wait, world_comm

if TYPE_CHECKING:       # both import what only a flush needs (mpi4py, numpy)
    from .mpi_flush import FlushStats
    from .trace_block import Records

_VOTE, _DECISION = 1, 2            # message tags of the exit agreement


def _run_id() -> str:
    """A new run id: 16 hex digits, or ``TINYPROF_RUN_ID`` (reproducible files)."""
    return env_run_id() or os.urandom(8).hex()


def fingerprint(root: Any, executions: int) -> Tuple[int, int, int, int]:
    """A summary of the event map that changes whenever anything is recorded:
    executions, nodes, stored values, and the newest value of every loop-2
    node (a loop-2 record adds to a value instead of storing one)."""
    nodes = total = 0
    lasts: List[bytes] = []
    stack = [root]
    while stack:
        node = stack.pop()
        nodes += 1
        total += node.count
        if node.loop == 2 and node.count:
            lasts.append(node.data()[0][-8:])
        stack.extend(list(node.children.values()))
    return executions, nodes, total, hash(b"".join(lasts))


class Session:
    """One profiling session; see the module docstring."""

    def __init__(self, settings: Settings, comm: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.user_comm = comm           # as given to Profiler(comm=...)
        self.clock = clock
        self.private: Any = None        # tinyprof's own Dup of the communicator
        self.rank, self.size = 0, 1
        self.run = NO_RUN
        self.stem = settings.name       # file names: <stem>.<i>-of-<n>.tp
        self.flushes = 0                # number of the next flush set
        self.flushed: Optional[tuple] = None   # fingerprint of what the last flush wrote
        self.last_flush: Optional[FlushStats] = None     # of the last MPI flush
        self.snapshotter: Optional[Snapshotter] = None
        self.capture: Any = None        # capture.Capture when MPI is recorded
        self.capture_missing: Optional[str] = None  # why not, when asked for (the meta's mpi_capture)
        self.added: Optional[unannotated.Unannotated] = None   # call sites and samples, when asked
        self.syncs: List[Tuple[int, int, int]] = []    # trace clock: first and latest sync
        self.live = False
        self.start_time = 0.0           # rank 0's clock at start, as broadcast
        self.hosts: List[str] = []      # rank 0: every rank's host name, in rank order
        self.mpi_library: Optional[str] = None     # MPI_Get_library_version, under MPI
        self._meta: Optional[bytes] = None     # rank 0: the meta section, built at the first write
        self._pending: list = []        # buffers of exit-vote requests never completed
        self._warned: set = set()

    # -- start and close -------------------------------------------------------------

    def start(self) -> Session:
        """Make the session live: agree on the run id and the snapshot clock
        (collective over the communicator), attach to the lifecycle events,
        start periodic snapshots. Nothing when profiling is off."""
        if not annotate.enabled():
            return self
        if lifecycle.take_inherited():     # a fork child profiling itself: from scratch
            annotate.impl.reset()
        settings = self.settings
        metrics.configure(settings.metrics)
        run, start = _run_id(), self.clock()
        comm = world_comm(self.user_comm)
        if settings.mpi:
            self._start_capture(comm)
        if settings.sites or settings.sample:
            self.added = unannotated.Unannotated(settings.sites if self.capture is not None else 0,
                                                 settings.sample)
            if settings.sites and self.capture is not None:
                problem = self.added.start_sites(self.capture.lib, self.capture.source or 0)
                if problem:
                    self.added.depth = 0
                    self.warn("sites", f"sites: MPI calls are not attributed to Python lines: {problem}")
        if settings.trace:
            annotate.impl.trace(settings.trace_limit)
            if self.capture is not None:
                self.capture.trace(settings.trace_limit)
        if comm is not None:
            self.rank, self.size = comm.Get_rank(), comm.Get_size()
            from mpi4py import MPI
            with self.paused():
                self.private = comm.Dup()   # its collectives never match the application's
                run, start = self.private.bcast((run, start), root=0)
                self.hosts = self.private.gather(MPI.Get_processor_name(), root=0) or []
            self.mpi_library = MPI.Get_library_version()    # taken now: no MPI call at a write
        else:
            self.hosts = [socket.gethostname()]
            launch = launched_rank()
            if launch is not None and launch[1] > 1 and not lifecycle.forked_child():
                self.stem = f"{settings.name}.rank{launch[0]}"
                self.warn("no-mpi", f"rank {launch[0]} of {launch[1]} started by an MPI "
                          "launcher, but mpi4py cannot initialise MPI: each rank writes "
                          f"its own profile, {self.stem}.*")
        self._sync_clock()
        self.run, self.start_time = run, start
        if self.rank == 0:      # a reader can tell that this run left nothing yet (format.md)
            output_dir.mark_run(settings.outdir, self.stem, run)
        snap = self.snapshotter = Snapshotter(settings, self.stem, self.rank, self.size, start,
                                              run, self.clock, self._snapshot_extras, self.paused,
                                              self.metadata, self._extended)
        self.live = True
        lifecycle.attach(self)
        if settings.frequency:
            self._start_snapshots(snap)
        if self.added is not None and settings.sample:
            self.added.start_sampler()
        return self

    def _start_snapshots(self, snap: Snapshotter) -> None:
        """Periodic snapshots: aggregated from a helper thread when MPI allows
        a second thread to call it, else per rank from a helper thread that
        makes no MPI call (docs/api.md)."""
        if self.private is not None:
            from mpi4py import MPI
            if MPI.Query_thread() == MPI.THREAD_MULTIPLE:
                snap.run_aggregated(self.private)
                return
            self.warn("thread-level", "MPI thread level is below MPI_THREAD_MULTIPLE: each "
                      "rank writes its own snapshot file (P files per snapshot, no MPI call)")
        snap.run_periodic()

    def _start_capture(self, comm: Any) -> None:
        """Record MPI calls (``mpi=True``), or warn why not and go on without."""
        if comm is None:
            self.capture_missing = "MPI is not running (mpi4py)"
            self.warn("mpi", "mpi=True, but MPI is not running (mpi4py): no MPI data is recorded")
            return
        from . import capture
        try:
            self.capture = capture.Capture.start()
        except Exception as e:      # Unavailable, or an unexpected loader failure
            self.capture_missing = str(e)
            self.warn("mpi", f"MPI communication is not recorded: {e}")
            return
        if self.settings.ucx:
            problem = self.capture.start_ucx()
            if problem:
                self.warn("ucx", f"ucx=True: {problem}")
        if not self.capture.attributes:
            self.warn("mpi-pure", "the pure-Python core cannot tell the MPI library the "
                      "current callpath: all MPI calls are charged to no event")

    def _sync_clock(self) -> None:
        """Trace mode: align this rank's clock to rank 0's (collective under MPI),
        keeping the first and the latest alignment."""
        if not self.settings.trace:
            return
        if self.private is not None:
            from . import clocksync
            with self.paused():
                sync = clocksync.sync(self.private)
        else:
            sync = (time.perf_counter_ns(), 0, 0)
        self.syncs = [self.syncs[0], sync] if self.syncs else [sync]

    def paused(self) -> ContextManager[None]:
        """tinyprof's own MPI traffic in this thread: not counted as the application's."""
        return self.capture.paused() if self.capture is not None else contextlib.nullcontext()

    def close(self) -> None:
        """Stop snapshots and free the communicators (collective under MPI)."""
        if not self.live:
            return
        self.live = False
        lifecycle.detach(self)
        snap = self.snapshotter
        if snap is not None:
            snap.close()
        if self.added is not None:
            self.added.stop()
        if self.private is not None and live_mpi() is not None:
            with self.paused():
                self.private.Free()
                if snap is not None:
                    snap.free()
        if self.capture is not None:
            self.capture.trace(0)
            self.capture.stop()
        if self.settings.trace:
            annotate.impl.trace(0)
        self.private = None

    def forked(self) -> None:
        """In a fork child: this session is the parent's; it writes nothing more."""
        self.live = False
        if self.snapshotter is not None:
            self.snapshotter.stop.set()
        self.private = None     # the parent's MPI: never used, never freed

    # -- writing ---------------------------------------------------------------------

    def label(self, kind: str, number: int) -> assemble.SetLabel:
        """The label of the files of set ``kind`` (flush or snapshot) ``number``."""
        return assemble.SetLabel(self.settings.name, self.settings.metrics, self.run, kind,
                                 number, self.metadata())

    def metadata(self) -> bytes:
        """The ``meta`` section that rank 0 writes in file 0 of each set (b"" on
        other ranks), built at the first write: the automatic keys, then
        ``TINYPROF_METADATA``'s, then ``Profiler(metadata=...)``'s."""
        if self.rank != 0:
            return b""
        if self._meta is None:
            entries: Dict[str, meta_section.Value] = {}
            if self.settings.auto_metadata:
                try:
                    from . import metadata
                    entries = metadata.automatic(self.start_time, self.hosts, self.mpi_library)
                except Exception as e:      # the profiler never takes the application down
                    self.warn("metadata", f"run metadata left out: {type(e).__name__}: {e}")
            if self.capture_missing is not None:     # for `tinyprof mpi` to say why
                entries["mpi_capture"] = self.capture_missing
            entries.update(self.settings.metadata)
            self._meta = meta_section.encode(entries)
        return self._meta

    def snapshot_stats(self) -> SnapshotStats:
        """The snapshots this rank wrote so far, and their CPU time."""
        snap = self.snapshotter
        return snap.stats() if snap is not None else SnapshotStats(0, 0.0)

    def flush(self) -> Optional[str]:
        """Write everything recorded so far as flush set ``self.flushes``;
        collective over the communicator. Returns the output directory.

        The flush walks down: this method reads what the rank holds and
        hands it, as data, to the MPI flush (``mpi_flush``) or the assembler
        (``assemble``), which call nothing back (docs/flush.md)."""
        if not self.live:
            return None
        impl = annotate.impl
        mpi = self.private is not None and live_mpi() is not None
        if mpi and self.settings.trace:
            self._sync_clock()
        # Before the copy: every node the trace records name then has a line,
        # and whatever another thread records meanwhile changes the
        # fingerprint, so the exit flush writes it.
        trace = self._trace_records() if self.settings.trace else None
        state = self._state()
        events = self._extended(collect(impl.root()))
        executions = impl.executions()      # after collect: never fewer than the fields hold
        label = self.label("flush", self.flushes)
        self.flushes += 1                   # every attempt takes a number, on all ranks alike
        section = self._mpi_section(events)
        if mpi:
            from . import mpi_flush  # imports mpi4py, which is running already
            with self.paused():
                self.last_flush = mpi_flush.flush(self.private, self.settings, self.stem, label,
                                                  events, executions, section, trace)
            written = self.last_flush.written
        else:
            written = self._flush_alone(label, events, executions, section, trace)
        if written:
            self.flushed = state
        return self.settings.outdir

    def _state(self) -> tuple:
        """What a flush would write, in brief: unchanged, the exit flush is not needed."""
        impl = annotate.impl
        return (fingerprint(impl.root(), impl.executions()),
                self.added.state() if self.added is not None else 0)

    def _extended(self, events: List[LocalEvent]) -> List[LocalEvent]:
        """The event map's copy with the call sites and samples below it."""
        if self.added is None:
            return events
        events = self.added.extend(events)
        if self.added.full:
            self.warn("sites-full", "sites: too many distinct MPI call sites; the calls of "
                      "later ones are charged to their event")
        return events

    def _trace_records(self) -> Records:
        """What this rank traced so far (read before the event map is copied)."""
        from . import trace_block
        core = annotate.impl.trace_records()
        calls = self.capture.trace_calls() if self.capture is not None else None
        return trace_block.Records(self.rank, trace_block.clock_of(self.syncs), core, calls)

    def _mpi_section(self, events: Sequence[LocalEvent]) -> Optional[Section]:
        """This rank's ``mpi`` section, its lines positions in ``events``; None
        when MPI is not recorded."""
        if self.capture is None:
            return None
        return self.capture.section(self.rank, node_lines(events))

    def _snapshot_extras(self, events: Sequence[LocalEvent]
                         ) -> Tuple[Optional[Section], List[Tuple[str, bytes]]]:
        """This rank's ``mpi`` section for a snapshot (its lines: positions in
        ``events``) and the whole sections of its one-rank file. The trace goes
        only into unscheduled snapshots (an aborting exit, SIGTERM) of runs
        without periodic ones: a whole trace per period would cost its size
        each time (docs/trace.md)."""
        mpi = self._mpi_section(events)
        if self.settings.trace and not self.settings.frequency:
            return mpi, [("trace", _trace_block(self._trace_records(), events))]
        return mpi, []

    def _flush_alone(self, label: assemble.SetLabel, events: List[LocalEvent],
                     executions: int, mpi: Optional[Section],
                     trace: Optional[Records]) -> bool:
        outdir = self.settings.outdir
        sections = [("trace", _trace_block(trace, events))] if trace is not None else []
        sections += label.tail(0)
        data = assemble.build_file(label.header(1, 0, 1, 0, 1), [events], [executions],
                                   sections, [mpi])
        problem = output_dir.write_set_file(outdir, self.stem, 0, 1, data)
        if problem:
            self.warn(outdir, f"cannot write profile file {problem}; "
                      "the data stays in memory for the next flush")
            return False
        for stale in output_dir.stale_sets(outdir, self.stem, 1):
            output_dir.remove(stale)
        return True

    def warn(self, key: str, message: str) -> None:
        """Warn once per ``key``."""
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"tinyprof: {message}", RuntimeWarning, stacklevel=3)

    # -- lifecycle events ------------------------------------------------------------

    def at_exit(self, aborting: bool) -> None:
        """Flush what the last flush did not write: collective while MPI is
        still alive (atexit runs before mpi4py's MPI_Finalize) if every rank
        exits normally, else a last snapshot, which waits for no rank that
        will not come (per rank; or aggregated, boundedly). Events still open
        are written as open (no value yet)."""
        snap = self.snapshotter
        if not self.live or snap is None:
            return
        if self.added is not None:      # the exit work is tinyprof's, not the program's
            self.added.stop()
        impl = annotate.impl
        need = bool(impl.root().children) and self._state() != self.flushed
        try:
            with self.paused():
                normal, needed = self._agree_at_exit(need, aborting)
            if normal and needed:
                snap.close()
                self.flush()
            elif need and not normal:
                snap.snapshot(lifecycle.TERM_TIMEOUT)
        except Exception as e:      # the profiler never takes the application down
            self.warn("exit", f"exit flush failed: {type(e).__name__}: {e}")
        finally:
            snap.close()

    def _agree_at_exit(self, need: bool, aborting: bool) -> Tuple[bool, bool]:
        """(every rank exits normally, some rank needs a flush), agreed over the
        private communicator, so that no rank enters a collective flush that an
        aborting rank will never join. Without MPI, a lone process flushes even
        when aborting (its flush has no collective); ranks whose MPI is gone cannot.

        Point-to-point, not a collective: an aborting rank posts its small
        (eager) message and goes on to MPI_Abort or MPI_Finalize without waiting
        for, or progressing, anyone. Rank 0 gathers the votes and sends the
        decision; if rank 0 itself aborts, it sends "abort" at once.
        """
        comm = self.private
        if comm is None or live_mpi() is None:
            return comm is None, need
        import numpy as np  # at exit, never at start: python -m tinyprof starts fast

        mine = np.array([0 if aborting else 1, int(need)], np.int64)
        self._pending.append(mine)
        timeout = lifecycle.TERM_TIMEOUT
        if comm.Get_rank() != 0:
            sent = comm.Isend(mine, dest=0, tag=_VOTE)
            if aborting:
                wait([sent], timeout)
                return False, need
            decision = np.empty(2, np.int64)
            self._pending.append(decision)
            wait([sent, comm.Irecv(decision, source=0, tag=_DECISION)])
            return bool(decision[0]), bool(decision[1])
        if not aborting:
            votes = np.empty((comm.Get_size() - 1, 2), np.int64)
            wait([comm.Irecv(votes[r - 1], source=r, tag=_VOTE) for r in range(1, comm.Get_size())])
            mine[0] &= int(votes[:, 0].all())
            mine[1] |= int(votes[:, 1].any())
        wait([comm.Isend(mine, dest=r, tag=_DECISION) for r in range(1, comm.Get_size())],
              timeout if aborting else None)
        return bool(mine[0]), bool(mine[1])

    def on_sigterm(self) -> None:
        """A last snapshot, bounded in time: aggregated, every rank's helper
        takes the next one at once (mpiexec signals every rank); per rank, this
        rank's file, then wait until every rank's is there (the first rank to
        die makes mpiexec kill the rest)."""
        snap = self.snapshotter
        if not self.live or snap is None or not annotate.impl.root().children:
            return
        timeout = lifecycle.TERM_TIMEOUT
        if snap.comm is not None:
            snap.snapshot(timeout)
            return
        end = time.monotonic() + timeout
        k = snap.forced()
        # A helper thread bounds the attempt: a hung file system cannot hold the exit.
        lifecycle.start_thread(snap.safe_take, (k,), "tinyprof-sigterm-snapshot").join(timeout)
        outdir = self.settings.outdir
        while self.size > 1 and time.monotonic() < end and \
                not output_dir.snapshot_is_complete(outdir, k):
            time.sleep(0.01)


def _trace_block(records: Records, events: Sequence[LocalEvent]) -> bytes:
    """The trace block of a one-rank file, whose lines are the positions in ``events``."""
    from . import trace_block
    return trace_block.block(records, node_lines(events))


_active: Optional[Session] = None


def begin(settings: Settings, comm: Any = None) -> Session:
    """Close the current session (if any) and start a new one."""
    global _active
    if _active is not None:
        _active.close()
    _active = Session(settings, comm)
    return _active.start()


def current() -> Session:
    """The session of this process, started with default settings on first need
    (or anew in a fork child, whose inherited session is the parent's)."""
    if _active is None or (not _active.live and lifecycle.forked_child()):
        return begin(Settings.create())
    return _active
