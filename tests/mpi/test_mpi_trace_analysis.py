"""The critical path and the wait states of real traced runs with injected
imbalance (``Profiler(trace=True, mpi=True)``, docs/trace.md).

The imbalance is injected with ``time.sleep``, but nothing here depends on
how long a sleep lasted or which rank arrived first: on a loaded machine any
rank may be late. The analysis is checked against the run's own records
(tests/helpers/trace_checks.py); the exact values on made-up records are in
tests/analysis/test_trace_analysis.py.

Errors are gathered to all ranks before any assert (see _workload.all_errors).
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from _workload import all_errors
from helpers import trace_checks
from mpi4py import MPI

import tinyprof
from tinyprof import Event

pytestmark = [pytest.mark.mpi]


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


def test_the_path_crosses_to_the_last_rank_at_each_collective(world, mpi_tmp_path):
    """Rank `slow` sleeps 10x as long in `solve`; everyone then meets in an
    Allreduce. The others wait at the collective for the last to arrive, and
    the path runs through that rank's solve."""
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
        errors = trace_checks.check(profile)
        # at each Allreduce, the path crosses to the rank that arrived last and
        # goes back through its solve, whichever rank that was
        lasts = trace_checks.last_arrivals(profile.trace)
        solves = trace_checks.ranks_on_path(profile, ("main", "solve"))
        if len(lasts) != steps or solves != lasts:
            errors.append(f"solve on the path on ranks {solves}, last arrivals {lasts}")
    assert all_errors(world, errors) == []


def test_a_token_pipeline_is_a_path_through_every_rank_in_order(world, mpi_tmp_path):
    """Rank r waits for the token from r-1, works, passes it on: the path
    visits the ranks' work in rank order, and a rank that posted its receive
    before the token was sent waits as a late sender."""
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
        errors = trace_checks.check(profile)
        # rank r works after r-1 has: whichever ranks' work the path visits,
        # it visits them in rank order
        work = trace_checks.ranks_on_path(profile, ("main", "work"))
        if not work or work != sorted(set(work)):
            errors.append(f"work on the path on ranks {work}")
        msgs = profile.trace.msgs
        pairs = sorted(zip(msgs["src"].tolist(), msgs["dst"].tolist(), msgs["tag"].tolist()))
        if pairs != [(r, r + 1, 7) for r in range(size - 1)]:
            errors.append(f"messages matched: {pairs}")
    assert all_errors(world, errors) == []
