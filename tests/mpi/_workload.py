"""A deterministic annotated workload for the MPI tests, and the check that a
profile read back holds exactly what every rank recorded.

Shared by test_flush.py (under pytest --with-mpi) and check_large.py (run by
tests/runtime/test_mpi_large.py at 16 and 33 ranks).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import tinyprof
from tinyprof import annotate
from tinyprof.format.reader import parse_file
from tinyprof.runtime import collect as _collect
from tinyprof.runtime.collect import LocalEvent

impl = annotate.impl
Event = tinyprof.Event
SELFKEYS = "tag:0,mem:1,color:0"
ODD = "odd |<;+%\n név"        # a name with every separator of the format in it


class Clock:
    """A nanosecond clock moving by rank-dependent steps: exact, distinct values."""

    def __init__(self, rank: int) -> None:
        self.now, self.rank, self.calls = 0, rank, 0

    def __call__(self) -> int:
        self.calls += 1
        self.now += 7 + 13 * self.rank + self.calls % 11
        return self.now


def record(comm, executions: int = 2, wrong_hint: bool = False, swap_order: bool = False,
           loop_clash: bool = False) -> None:
    """Record the workload on this rank of ``comm`` into a fresh event map.

    Odd ranks run a non-common event (with a common-hinted child); the last
    rank runs another one in its last execution only; every third rank has an
    event of a name no other rank knows. ``wrong_hint``: one rank runs an
    event hinted common. ``swap_order``: odd ranks enter two common events in
    the other order. ``loop_clash``: ranks give one callpath different loop modes.
    """
    rank, nranks = comm.Get_rank(), comm.Get_size()
    tinyprof.Profiler("wl", selfkeys=SELFKEYS)       # declares the metrics
    impl.reset()
    impl.set_clock(Clock(rank))
    try:
        for x in range(executions):
            with Event("main", mem=1000 * rank + x):
                for i in range(3):
                    # mem is missing (NaN) on the middle iteration
                    with Event("compute", loop=1, **({} if i == 1 else {"mem": rank + i / 4})):
                        pass
                with Event("exchange"):
                    for j in range(2):
                        with Event("comm", loop=2, tag=2, mem=j + 0.5):
                            pass
                if rank % 2:    # tag from rank 1, color from rank 3
                    color = {"color": rank} if rank % 4 == 3 else {}
                    with Event(ODD, is_common=False, tag=rank, **color):
                        with Event("inner"):
                            pass
                if rank == nranks - 1 and x == executions - 1:
                    with Event("late", is_common=False, loop=2):
                        pass
                if rank % 3 == 0 and x == 0:
                    with Event(f"only{rank}", is_common=False):
                        pass
                if wrong_hint and rank == nranks // 2:
                    with Event("hinted"):
                        pass
                pair = ("right", "left") if swap_order and rank % 2 else ("left", "right")
                for name in pair:    # a consistent field of ",color" on even ranks
                    with Event(name, **({} if rank % 2 else {"color": rank + 0.5})):
                        pass
                for _ in range(2):      # loop_clash: modes 2, 1, 0, 0, ... by rank
                    with Event("clash", loop=max(2 - rank, 0) if loop_clash else 1):
                        pass
            with Event("post"):         # a second root event: starts no execution
                pass
    finally:
        impl.set_clock(None)


def snapshot() -> Tuple[List[LocalEvent], int]:
    """What this rank recorded, as the flush sees it."""
    return _collect.collect(impl.root()), impl.executions()


def expected_series(nexec: int, values: Optional[np.ndarray], execs: np.ndarray) -> List[List]:
    """Per execution, the ``values`` recorded (times or a metric column)."""
    out: List[List] = [[] for _ in range(nexec)]
    if values is None:
        return out
    pairs = execs.reshape(-1, 2).tolist() + [[None, len(values)]]
    for (e, first), (_, stop) in zip(pairs, pairs[1:]):
        out[e] = values[first:stop].tolist()
    return out


def _same(a: List[List[float]], b: List[List[float]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(u == v or (math.isnan(u) and math.isnan(v)) for u, v in zip(x, y))
        for x, y in zip(a, b))


def verify(comm, outdir, mine: Tuple[List[LocalEvent], int], naggs: int) -> List[str]:
    """Read the profile in ``outdir`` and list how it differs from what the
    ranks of ``comm`` recorded (``mine`` on this rank) and from ``naggs``
    files. Collective; a failing read is an error, not an exception, so that
    no rank is left waiting in a collective."""
    try:
        profile = tinyprof.read(outdir)
        errors = check_files(profile, naggs, comm.Get_size())
    except Exception as e:
        profile, errors = None, [f"read: {e!r}"]
    return errors + check(comm, profile, mine)


def check(comm, profile: Optional[tinyprof.Profile],
          mine: Tuple[List[LocalEvent], int]) -> List[str]:
    """Differences between ``profile`` and what the ranks of ``comm`` recorded
    (``mine`` on this rank). Collective: every rank checks its own values and
    the shared parts against all ranks' callpaths, loops and consistent values.
    """
    events, nexec = mine
    summary = [(e.path, e.loop, e.consistent) for e in events]
    ranks = comm.allgather(summary)                 # pickling is fine in tests
    rank = comm.Get_rank()
    errors: List[str] = []
    if profile is None:
        return errors
    if profile.nranks != comm.Get_size():
        errors.append(f"nranks {profile.nranks}, expected {comm.Get_size()}")
    loops: Dict[tuple, int] = {}
    consistent: Dict[tuple, Dict[str, float]] = {}
    for r in ranks:                                  # lowest rank first wins
        for path, loop, values in r:
            if loops.get(path, 2) == 2:              # ... but mode 2 gives way to 0 or 1
                loops[path] = loop
            merged = consistent.setdefault(path, {})
            for k, v in values.items():
                merged.setdefault(k, v)
    if sorted(profile.callpaths) != sorted(loops):
        errors.append(f"callpaths {sorted(profile.callpaths)} != recorded {sorted(loops)}")
        return errors
    seen = set()
    for path in profile.callpaths:
        if len(path) > 1 and path[:-1] not in seen:
            errors.append(f"{path} precedes its parent")
        seen.add(path)
        if profile.loop(path) != loops[path]:
            errors.append(f"{path}: loop {profile.loop(path)}, expected {loops[path]}")
        for key, is_consistent in profile.metrics:
            if is_consistent and profile.value(path, key) != consistent[path].get(key):
                errors.append(f"{path}: {key}={profile.value(path, key)}, "
                              f"expected {consistent[path].get(key)}")
    if profile.executions(rank) != nexec:
        errors.append(f"rank {rank}: {profile.executions(rank)} executions, expected {nexec}")
    by_path = {e.path: e for e in events}
    for path in profile.callpaths:
        e = by_path.get(path)
        execs = e.execs if e is not None else np.zeros(0, np.int64)
        want = expected_series(nexec, None if e is None else e.times / 1e9, execs)
        if not _same(profile.series(path, rank), want):
            errors.append(f"rank {rank} {path}: times {profile.series(path, rank)} != {want}")
        for key, is_consistent in profile.metrics:
            if is_consistent:
                continue
            column = None if e is None else e.metrics.get(key, np.full(len(e.times), np.nan))
            want, got = expected_series(nexec, column, execs), profile.series(path, rank, key)
            if not _same(got, want):
                errors.append(f"rank {rank} {path}: {key} {got} != {want}")
    return errors


def check_files(profile: tinyprof.Profile, naggs: int, nranks: int) -> List[str]:
    """The files are the ``naggs`` contiguous groups, sizes differing by at most one."""
    heads = [parse_file(p).header for p in profile.files]
    errors = []
    if len(heads) != naggs:
        errors.append(f"{len(heads)} files, expected {naggs}")
    sizes = [h.rank_count for h in heads]
    if sum(sizes) != nranks or max(sizes) - min(sizes) > 1:
        errors.append(f"group sizes {sizes} for {nranks} ranks")
    if [h.file_index for h in heads] != list(range(len(heads))):
        errors.append(f"file indices {[h.file_index for h in heads]}")
    return errors


def all_errors(comm, errors: Sequence[str]) -> List[str]:
    """Every rank's errors, on every rank: all ranks pass or fail together."""
    return [f"[rank {r}] {e}" for r, errs in enumerate(comm.allgather(list(errors))) for e in errs]

