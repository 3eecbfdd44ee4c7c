"""The friendly front of a session: ``Profiler(...)`` and ``flush()`` (paper Fig. 1 (3))."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union


class Profiler:
    """Start profiling this process (every rank, under MPI) with these settings.

    ``name`` names the profile and its files, ``frequency`` is the snapshot
    interval in seconds (0: none), ``selfkeys`` declares custom metrics as
    ``"tag:0,mem:1"`` (0 consistent: one value per callpath; 1 inconsistent: a
    value per occurrence). ``outdir`` defaults to ``<name>.tinyprof``;
    ``aggregators`` sets the file count of an MPI flush (else
    ``TINYPROF_AGGREGATORS``, else ``max(1, P // 16)``; clamped to [1, P]);
    ``comm`` is the mpi4py communicator to profile over, by default
    ``COMM_WORLD`` when MPI is in use (or when an MPI launcher started this
    process: tinyprof then initialises MPI through mpi4py). ``keep`` is the
    snapshot keep policy: ``"last"`` (the newest complete snapshot only) or
    ``"all"`` (a time series). ``mpi=True`` (default: ``TINYPROF_MPI``) also
    records MPI communication per callpath, communicator, operation, message
    size and peer (docs/mpi.md); create the Profiler before the communicators
    you make, so that they get their stable names. ``ucx=True`` (default:
    ``TINYPROF_UCX``; implies ``mpi=True``) also records which UCX protocol
    and transport carried each callpath's MPI traffic (docs/mpi.md,
    "Transports"). ``trace=True`` (default:
    ``TINYPROF_TRACE``) also keeps the start of every occurrence on clocks
    aligned across ranks, written as the files' ``trace`` section
    (docs/trace.md); ``trace_limit`` (default ``TINYPROF_TRACE_LIMIT``, else
    2,000,000) caps the occurrences each rank keeps. ``chain`` (default
    ``TINYPROF_CHAIN``, else 32) is the number of delta snapshots after the
    first full one; each later full one is followed by twice as many as the
    one before (docs/api.md, "Continuous profiling"). ``metadata`` is a dict of
    run metadata (keys ``[A-Za-z_][A-Za-z0-9_.-]*``, values str, int or float)
    written with the profile, besides ``TINYPROF_METADATA`` (``key=value,...``,
    string values; this dict wins on a key both give) and the keys recorded
    automatically (docs/api.md, "Run metadata"); ``read(...).metadata`` gives
    them back. ``sites=True`` (or a frame count K, default 1 for True), with
    ``mpi``, attributes each recorded MPI call to the Python line that made
    it, a callpath element ``function (file:line)`` below the current event
    (K frames: K elements), frames of mpi4py, tinyprof and the standard
    library skipped (docs/mpi.md, "Call sites"). ``sample=HZ`` (``True``: 100) samples
    every thread's Python stack HZ times a second, as callpaths below each
    thread's innermost open event, valued by the time the samples stand for
    (docs/unannotated.md).

    Creating a Profiler closes the previous one. Under MPI it is collective
    (one ``Dup`` of the communicator, one broadcast of the run id and the
    snapshot clock, one gather of the host names): create it on every rank,
    after MPI is initialised.
    Invalid settings raise ``ValueError``/``TypeError`` here, at once.
    """

    def __init__(self, name: str = "profile", frequency: float = 0, selfkeys: str = "", *,
                 outdir: Optional[str] = None, aggregators: Optional[int] = None,
                 comm: Any = None, keep: str = "last", mpi: Optional[bool] = None,
                 trace: Optional[bool] = None, trace_limit: Optional[int] = None,
                 chain: Optional[int] = None, ucx: Optional[bool] = None,
                 metadata: Optional[dict] = None, sites: object = False,
                 sample: Optional[float] = None) -> None:
        from .settings import Settings  # loaded here: a light `import tinyprof`
        settings = Settings.create(name, frequency, selfkeys, outdir, aggregators, keep, mpi,
                                   trace, trace_limit, chain, ucx, metadata, sites, sample)
        if comm is not None and not hasattr(comm, "Allgather"):
            raise TypeError(f"tinyprof.Profiler: comm must be an mpi4py communicator, "
                            f"not {type(comm).__name__}")
        self.settings = settings
        from . import lifecycle
        with lifecycle.signals_blocked():   # threads that numpy's libraries start never take signals
            from . import session  # the flush machinery, numpy with it: not on import
        self.session = session.begin(settings, comm)

    name = property(lambda self: self.settings.name, doc="The profile's name.")
    frequency = property(lambda self: self.settings.frequency, doc="Snapshot interval (s).")
    outdir = property(lambda self: self.settings.outdir, doc="The output directory.")
    keep = property(lambda self: self.settings.keep, doc="Snapshot keep policy.")
    mpi = property(lambda self: self.settings.mpi, doc="Whether MPI communication is recorded.")
    ucx = property(lambda self: self.settings.ucx,
                   doc="Whether the UCX protocols and transports of MPI calls are recorded.")
    trace = property(lambda self: self.settings.trace, doc="Whether trace mode is on.")
    aggregators = property(lambda self: self.settings.aggregators,
                           doc="Wanted aggregator count, or None for the default.")

    @property
    def metrics(self) -> List[Tuple[str, bool]]:
        """Declared custom metrics as ``(key, consistent)``."""
        return list(self.settings.metrics)

    @property
    def metadata(self) -> Dict[str, Union[str, int, float]]:
        """The user's run metadata: ``TINYPROF_METADATA``'s, then this
        Profiler's ``metadata`` (the automatic keys come at the first write)."""
        return dict(self.settings.metadata)

    @property
    def run(self) -> str:
        """The run id written in every file of this session (16 hex digits)."""
        return self.session.run

    def flush(self) -> Optional[str]:
        """Same as :func:`tinyprof.flush`, for this profiler's session."""
        return self.session.flush()

    def snapshot(self, timeout: float = 10.0) -> bool:
        """Take a snapshot now, besides the periodic ones; returns whether one
        that holds everything this rank recorded before the call ended within
        ``timeout`` seconds. Never collective for the calling thread: with
        aggregated snapshots (MPI at ``MPI_THREAD_MULTIPLE``) it asks this
        rank's snapshot thread to start the next one at once, and the snapshot
        ends when every rank took part (when they call this too, or when it
        falls due on them). Else this rank writes its own file of the next
        snapshot (docs/api.md)."""
        snap = self.session.snapshotter
        return snap is not None and self.session.live and snap.snapshot(timeout)

    def close(self) -> None:
        """End profiling: stop snapshots, free tinyprof's communicators
        (collective under MPI). Nothing is written at exit afterwards."""
        self.session.close()

    def __repr__(self) -> str:
        s = self.settings
        return (f"tinyprof.Profiler({s.name!r}, frequency={s.frequency:g}, "
                f"selfkeys={s.selfkeys!r}, outdir={s.outdir!r}, keep={s.keep!r}, mpi={s.mpi}, "
                f"ucx={s.ucx}, trace={s.trace}, sites={s.sites}, sample={s.sample:g})")


def flush() -> Optional[str]:
    """Write the profile recorded so far and return the output directory.

    Collective over the profiler's communicator when MPI is in use: every rank
    must call it. It may be called anywhere, even inside open events (they are
    written as open). Recording goes on afterwards; a later flush (or the exit
    flush, if anything was recorded since) rewrites the profile with everything
    recorded until then. Returns None when profiling is off (``TINYPROF=0``).
    A file that cannot be written gives a warning; the data stays in memory.
    """
    from . import lifecycle
    with lifecycle.signals_blocked():
        from . import session
    return session.current().flush()
