"""Efficiency over time on real ranks: a ``loop=2`` region and ``main``,
open across every kept snapshot, appear in every interval with the time the
program measured in it (``tinyprof.pop_history``).

Snapshots come from explicit triggers (``Profiler.snapshot()`` on every
rank; the period is an hour). Rank r computes (1 + r/3) units per interval
(sleeping: a loaded machine stretches nothing the ranks wait for), then
meets the others in a barrier, all in ``main<step`` (loop=2: one summed
value per execution, which grows at every snapshot)."""
from __future__ import annotations

import time

import pytest
from _workload import all_errors

import tinyprof

pytestmark = [pytest.mark.mpi]
INTERVALS = 4
UNIT = 0.05                     # s
PARTS = 3                       # occurrences of main<step per interval


def test_main_and_a_loop2_region_in_every_interval(world, mpi_tmp_path):
    rank, size = world.Get_rank(), world.Get_size()
    out = world.bcast(str(mpi_tmp_path / "over"))
    prof = tinyprof.Profiler("ot", frequency=3600, outdir=out, keep="all", mpi=True)
    errors = []
    step, main, useful = [], [], []     # what this rank measured, per interval (ns)
    with tinyprof.Event("main"):
        for _ in range(INTERVALS):
            begin, spent, computed = time.perf_counter_ns(), 0, 0
            for _ in range(PARTS):
                t0 = time.perf_counter_ns()
                with tinyprof.Event("step", loop=2):
                    t1 = time.perf_counter_ns()
                    time.sleep(UNIT * (1 + rank / 3) / PARTS)
                    computed += time.perf_counter_ns() - t1
                    world.Barrier()
                spent += time.perf_counter_ns() - t0
            main.append(time.perf_counter_ns() - begin)
            step.append(spent)
            useful.append(computed)
            if not prof.snapshot(timeout=60):
                errors.append("a snapshot did not end")
    measured = world.gather((step, main, useful))
    world.Barrier()
    if rank == 0:
        frame = tinyprof.pop_history(out, numbers=range(1, INTERVALS + 1))
        for path, truth in ((("main", "step"), 0), (("main",), 1)):
            rows = frame[[p == path for p in frame["callpath"]]]
            if list(rows["snapshot"]) != list(range(1, INTERVALS + 1)) or \
                    list(rows["ranks"]) != [size] * INTERVALS:
                errors.append(f"{path}: intervals {list(rows['snapshot'])}, ranks {list(rows['ranks'])}")
                continue
            for k, row in enumerate(rows.itertuples()):
                longest = max(m[truth][k] for m in measured) / 1e9
                most = max(m[2][k] for m in measured) / 1e9
                mean = sum(m[2][k] for m in measured) / size / 1e9
                if abs(row.runtime - longest) > 0.1 * longest:
                    errors.append(f"{path} interval {k + 1}: runtime {row.runtime}, measured {longest}")
                if abs(row.useful_max - most) > 0.1 * most or abs(row.useful_mean - mean) > 0.1 * mean:
                    errors.append(f"{path} interval {k + 1}: useful {row.useful_mean}/"
                                  f"{row.useful_max}, measured {mean}/{most}")
    prof.close()
    assert all_errors(world, errors) == []
