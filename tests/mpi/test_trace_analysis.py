"""The critical path and the wait states of real traced runs with injected,
known imbalance (``Profiler(trace=True, mpi=True)``, docs/trace.md).

The imbalance is injected with ``time.sleep``, which never returns early: each
lower bound below is firm, and each upper bound leaves the stated slack for
a loaded machine (a late wake-up, MPICH's busy-polling ranks sharing cores).

Errors are gathered to all ranks before any assert (see _workload.all_errors).
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from _workload import all_errors
from mpi4py import MPI

import tinyprof
from tinyprof import Event

pytestmark = [pytest.mark.mpi]
SLACK = 0.25        # seconds a loaded machine may add to a step, at most


def _start(name: str, outdir) -> None:
    tinyprof.annotate.impl.reset()
    prof = tinyprof.Profiler(name, outdir=str(outdir), mpi=True, trace=True)
    assert prof.session.capture is not None, "MPI capture did not start"
    prof.session.capture.reset()


def _finish(world, outdir):
    tinyprof.flush()
    world.Barrier()
    profile = tinyprof.read(str(outdir))
    tinyprof.Profiler("after", outdir=str(outdir) + "-after")      # trace and capture off
    return profile


def test_one_rank_ten_times_slower_is_the_critical_path(world, mpi_tmp_path):
    """Rank `slow` sleeps 10x as long in `solve`; everyone then meets in an
    Allreduce. The path runs through the slow rank's solve; the others wait
    at the collective for the difference."""
    size, steps, base = world.Get_size(), 3, 0.02
    if size < 2:
        pytest.skip("imbalance needs two ranks")
    slow = size - 1
    _start("imbalance", mpi_tmp_path)
    with Event("main"):
        for _ in range(steps):
            with Event("solve"):
                time.sleep(base * (10 if world.rank == slow else 1))
            with Event("exchange"):
                world.Allreduce(MPI.IN_PLACE, np.ones(4))
    profile = _finish(world, mpi_tmp_path)
    errors = []
    if world.rank == 0:
        summary = profile.critical_path_summary()
        top = summary.iloc[0]
        if (top["rank"], top["callpath"]) != (slow, ("main", "solve")):
            errors.append(f"the path's largest part is {top['callpath']} on rank {top['rank']}")
        solve = steps * 10 * base                       # the slow rank's solve, at least
        if not solve <= top["time"] <= solve + steps * SLACK:
            errors.append(f"slow solve on the path: {top['time']:.3f} s, expected {solve} s")
        path = profile.critical_path()
        length, wall = path["duration"].sum(), profile.trace.wall_time * 1e-9
        if not wall - SLACK <= length <= wall * (1 + 1e-9):     # less the start skew
            errors.append(f"path {length:.4f} s, wall time {wall:.4f} s")
        # keyed in Python: pandas 1.5 reads a tuple label inside a .loc key as levels
        waits = {(w.callpath, w.rank): w for w in profile.wait_states().itertuples()}
        for r in range(size):
            if r == slow:
                continue
            key = (("main", "exchange"), r)
            got = waits[key].wait_collective if key in waits else 0.0
            least = steps * (10 * base - base) - steps * SLACK
            if not max(least, 0.01) <= got <= steps * 10 * base + steps * SLACK:
                errors.append(f"rank {r} waited {got:.3f} s at the Allreduce, "
                              f"expected about {steps * 9 * base:.2f} s")
        key = (("main", "exchange"), slow)
        if key in waits and waits[key].total > steps * SLACK:
            errors.append("the slow rank waited at the collective")
    assert all_errors(world, errors) == []


def test_a_token_pipeline_is_a_path_through_every_rank_in_order(world, mpi_tmp_path):
    """Rank r waits for the token from r-1, works `base` s, passes it on: the
    path visits the ranks' work in rank order, and rank r waits about r*base
    for a late sender."""
    size, base = world.Get_size(), 0.05
    _start("pipeline", mpi_tmp_path)
    token = np.zeros(1)
    with Event("main"):
        if world.rank > 0:
            with Event("receive"):
                world.Recv(token, source=world.rank - 1, tag=7)
        with Event("work"):
            time.sleep(base)
        if world.rank < size - 1:
            with Event("pass"):
                world.Send(token, dest=world.rank + 1, tag=7)
    profile = _finish(world, mpi_tmp_path)
    errors = []
    if world.rank == 0:
        path = profile.critical_path()
        work = path[path["callpath"].map(("main", "work").__eq__)]
        if work["rank"].tolist() != list(range(size)):
            errors.append(f"work on the path on ranks {work['rank'].tolist()}")
        # No bound on a segment's length: the path may enter a rank's work a
        # little after it began when the clocks' alignment is off by a few ms.
        if not all(d > 0 for d in work["duration"]):
            errors.append(f"work segments {work['duration'].tolist()}")
        waits = {(w.callpath, w.rank): w for w in profile.wait_states().itertuples()}
        waited = []
        for r in range(1, size):
            key = (("main", "receive"), r)
            got = waits[key].late_sender if key in waits else 0.0
            # No lower bound per rank: on an oversubscribed machine a rank can post
            # its receive late and wait less (once 0.038 s for 0.05 s at 7 ranks on 2 cores).
            if not got <= r * (base + SLACK):
                errors.append(f"rank {r} waited {got:.3f} s for the token, expected "
                              f"about {r * base:.2f} s")
            waited.append(got)
        if waited and not any(waited):
            errors.append("no rank waited for the token")
        msgs = profile.trace.msgs
        pairs = sorted(zip(msgs["src"].tolist(), msgs["dst"].tolist(), msgs["tag"].tolist()))
        if pairs != [(r, r + 1, 7) for r in range(size - 1)]:
            errors.append(f"messages matched: {pairs}")
    assert all_errors(world, errors) == []
