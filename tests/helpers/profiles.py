"""The converters' profile (tests/converters/test_convert.py and the tests of
other layers that read it): four ranks recorded one after the other through
the annotation API with a deterministic clock, written by the flush's own
``build_file`` as two files, and the values every conversion must hold."""
from __future__ import annotations

import math
import os
from typing import Dict, List, Tuple

import pytest

import tinyprof
from tinyprof import annotate
from tinyprof.format import encoding as _format
from tinyprof.format import output_dir
from tinyprof.runtime import assemble
from tinyprof.runtime import collect as _collect

impl = annotate.impl
Event = tinyprof.Event
NRANKS = 4
Callpath = Tuple[str, ...]


def _record_rank(rank: int, clock) -> List[_collect.LocalEvent]:
    """One rank's run; returns its event map as the flush copies it."""
    for ex in range(2 + rank % 2):
        with Event("main"):
            clock.tick(7 + rank)
            for it in range(3 + rank):
                mem = {"mem": 100.0 * rank + it} if it % 2 == 0 else {}    # missing on odd
                with Event("compute", loop=1, **mem):
                    clock.tick(1000 * (rank + 1) + 10 * it + ex)
            with Event("halo, exchange", loop=2, tag=7):
                for it in range(4):
                    with Event("comm", loop=2, mem=0.5 * (rank + 1)):
                        clock.tick(300 + 17 * rank + it)
                    clock.tick(3)
            if rank % 2:
                with Event('update <x> "q"', is_common=False, tag=2.5):
                    clock.tick(50 + ex)
            if rank == 2 and ex == 1:
                with Event("données", is_common=False, mem=-1e300):
                    clock.tick(9)
    tail = Event("tail")                 # still open at the snapshot: no values of its own
    tail.__enter__()
    with Event("inner"):
        clock.tick(5)
    events = _collect.collect(impl.root())
    tail.__exit__(None, None, None)
    return events


def make_profile(outdir, clock, selfkeys: str = "tag:0,mem:1", name: str = "conv") -> str:
    """Record NRANKS ranks serially and write them as a two-file profile in ``outdir``."""
    prof = tinyprof.Profiler(name, selfkeys=selfkeys, outdir=outdir)
    ranks, executions = record_ranks(NRANKS, _record_rank, clock)
    half = NRANKS // 2
    return write_profile(outdir, name, prof.metrics, ranks, executions, [(0, half), (half, NRANKS)])


def record_ranks(nranks: int, record_rank, clock):
    """``record_rank(rank, clock)`` on a fresh event map for each rank, serially:
    each rank's events and executions."""
    ranks, executions = [], []
    for rank in range(nranks):
        impl.reset()
        ranks.append(record_rank(rank, clock))
        executions.append(impl.executions())
    impl.reset()
    return ranks, executions


def write_profile(outdir, name: str, metrics, ranks, executions, bounds,
                  sections=lambda index, lo, hi: ()) -> str:
    """Write the ranks' events as one file per ``(lo, hi)`` rank range of ``bounds``;
    ``sections(index, lo, hi)`` gives each file's sections."""
    os.makedirs(outdir, exist_ok=True)
    for index, (lo, hi) in enumerate(bounds):
        header = _format.Header(name=name, nranks=len(ranks), first_rank=lo, rank_count=hi - lo,
                                file_index=index, file_count=len(bounds), metrics=list(metrics))
        data = assemble.build_file(header, ranks[lo:hi], executions[lo:hi],
                                    sections=sections(index, lo, hi))
        output_dir.write_atomic(os.path.join(outdir, output_dir.file_name(name, index, len(bounds))), data)
    return str(outdir)


def flat(series: List[List[float]]) -> List[float]:
    return [v for execution in series for v in execution]


def statistic_of(values: List[float], statistic: str, empty: float) -> float:
    if not values:
        return empty
    return {"sum": sum, "min": min, "max": max,
            "mean": lambda v: sum(v) / len(v)}[statistic](values)


def expected(profile: tinyprof.Profile, statistic: str) -> Dict[Tuple[Callpath, int], Dict[str, float]]:
    """Per (callpath, rank): count, time (inc), time and every custom metric."""
    out = {}
    for path in profile.callpaths:
        for rank in range(profile.nranks):
            times = flat(profile.series(path, rank))
            row = {"count": len(times),
                   "time (inc)": statistic_of(times, statistic, 0.0 if statistic == "sum" else math.nan)}
            for key, consistent in profile.metrics:
                if consistent:
                    value = profile.value(path, key)
                    row[key] = math.nan if value is None else value
                else:
                    given = [v for v in flat(profile.series(path, rank, key)) if not math.isnan(v)]
                    row[key] = statistic_of(given, statistic, math.nan)
            out[path, rank] = row
    for (path, rank), row in out.items():
        children = [out[p, rank]["time (inc)"] for p in profile.callpaths
                    if len(p) == len(path) + 1 and p[:-1] == path]
        row["time"] = row["time (inc)"] - sum(0.0 if math.isnan(c) else c for c in children)
    return out


def assert_same(got: float, want: float, what: str) -> None:
    if math.isnan(want):
        assert math.isnan(got), what
    else:
        assert got == pytest.approx(want, rel=1e-12, abs=1e-18), what


def callpaths(graph) -> Dict[int, Callpath]:
    """{id(node): callpath} of a hatchet graph, walked down from its roots
    (llnl-hatchet's ``from_caliper`` links children only: its nodes have no parents)."""
    found: Dict[int, Callpath] = {}
    todo = [(root, ()) for root in graph.roots]
    while todo:
        node, above = todo.pop()
        path = found[id(node)] = above + (node.frame["name"],)
        todo += [(child, path) for child in node.children]
    return found


