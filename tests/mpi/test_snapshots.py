"""Aggregated, incremental snapshots on real MPI ranks (mpi4py's default
MPI_THREAD_MULTIPLE): a helper thread per rank, A files per snapshot.

Snapshots are driven by explicit triggers (``Profiler.snapshot()`` on every
rank; the period is an hour), so a loaded machine cannot change what they
hold. Failures are gathered to all ranks before any assert.
"""
from __future__ import annotations

import os
import time

import pytest
from _workload import all_errors
from mpi4py import MPI

import tinyprof
from tinyprof.format import output_dir

pytestmark = [pytest.mark.mpi]
STEP = ("main", "step")
AGGREGATORS = 2                 # does not divide the odd sizes the suite runs at


def _steps(n: int, first: int) -> None:
    with tinyprof.Event("main"):
        for i in range(first, first + n):
            with tinyprof.Event("step", loop=1, it=i):
                pass


def _series(profile, rank):
    """Per execution, the ``it`` values of ``main<step`` on ``rank``."""
    if STEP not in profile.callpaths:
        return []
    return profile.series(STEP, rank, "it")


def test_each_snapshot_holds_what_every_rank_had_recorded(world, mpi_tmp_path):
    """Ranks record different amounts between triggers; snapshot k holds,
    for every rank, exactly what it recorded before its k-th trigger, through
    full snapshots and chains of deltas (chain=2: full, delta, delta, full, ...)."""
    rank, size = world.Get_rank(), world.Get_size()
    prof = tinyprof.Profiler("sn", frequency=3600, selfkeys="it:1", outdir=mpi_tmp_path,
                             aggregators=AGGREGATORS, keep="all", chain=2)
    errors, counted = [], 0
    for k in range(1, 7):
        n = (k * (rank + 1)) % 4          # 0 to 3 steps: some ranks record nothing some rounds
        _steps(n, counted)
        counted += n
        if not prof.snapshot(timeout=60):
            errors.append(f"snapshot {k} did not end")
    world.Barrier()
    done = tinyprof.snapshots(mpi_tmp_path)
    files = min(AGGREGATORS, size)
    if done != list(range(1, 7)):
        errors.append(f"complete snapshots {done}, expected 1..6")
    for k in done:
        directory = output_dir.snapshot_dir(str(mpi_tmp_path), k)
        names = sorted(os.listdir(directory))
        if names != [output_dir.file_name("sn", i, files) for i in range(files)]:
            errors.append(f"snapshot {k}: files {names}")
        head = open(os.path.join(directory, names[0]), "rb").read(400).split(b"\n")[3]
        want = b"set snapshot %d" % k + (b"" if k in (1, 4) else b" over %d" % (k - 1))
        if head != want:
            errors.append(f"snapshot {k}: {head!r}, expected {want!r}")
        profile = tinyprof.read(mpi_tmp_path, snapshot=k)
        for r in range(size):
            got = _series(profile, r)
            if got != _expected(r, k):
                errors.append(f"snapshot {k}, rank {r}: {got} != {_expected(r, k)}")
    assert not all_errors(world, errors)
    prof.close()


def _executions(rank, k):
    """(first step, steps) of each execution of ``main`` on ``rank`` up to round ``k``."""
    out, counted = [], 0
    for j in range(1, k + 1):
        n = (j * (rank + 1)) % 4
        out.append((counted, n))
        counted += n
    return out


def _expected(rank, k):
    """What ``_series`` gives for ``rank`` in snapshot ``k``: one list per execution."""
    return [[float(i) for i in range(c, c + n)] for c, n in _executions(rank, k)]


@pytest.mark.skipif(MPI.COMM_WORLD.Get_size() < 2, reason="needs a second rank")
@pytest.mark.parametrize("stuck", ["mpi", "compute"])
def test_a_stuck_rank_delays_nobody(world, mpi_tmp_path, stuck):
    """Rank 0's application thread is stuck (in a blocking MPI receive, or in
    a compute loop) until the others see a snapshot complete: its helper
    thread takes part meanwhile, and the other ranks' application threads go
    on (their own trigger returns, unfinished, after its timeout)."""
    rank = world.Get_rank()
    prof = tinyprof.Profiler("st", frequency=3600, selfkeys="it:1", outdir=mpi_tmp_path,
                             aggregators=AGGREGATORS)
    _steps(2, 0)
    flag = os.path.join(str(mpi_tmp_path), "seen")
    errors = []
    if rank == 0:
        prof.snapshot(timeout=0)        # ask, and go on at once
        if stuck == "mpi":
            world.recv(source=1, tag=7)
        else:
            deadline = time.monotonic() + 120        # a hang guard
            while not os.path.exists(flag) and time.monotonic() < deadline:
                sum(range(1000))
    else:
        prof.snapshot(timeout=0)
        deadline = time.monotonic() + 120            # a hang guard, not a timing assumption
        while not tinyprof.snapshots(mpi_tmp_path) and time.monotonic() < deadline:
            _steps(1, 2)                # the application goes on meanwhile
            time.sleep(0.01)
        if not tinyprof.snapshots(mpi_tmp_path):
            errors.append("no snapshot completed while rank 0 was stuck")
        if rank == 1:
            open(flag, "w").close()
            if stuck == "mpi":
                world.send("done", dest=0, tag=7)
    world.Barrier()
    profile = tinyprof.read(mpi_tmp_path, snapshot=1)
    if _series(profile, 0) != [[0.0, 1.0]]:
        errors.append(f"rank 0 in snapshot 1: {_series(profile, 0)}")
    assert not all_errors(world, errors)
    prof.close()
