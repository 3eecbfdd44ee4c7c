"""Trace mode: the cost of an event with trace on and off, bytes per traced
occurrence, and the analysis rate.

    .venv/bin/python benchmarks/trace.py [--repeats 7] [--iterations 200000]

Trace off and on run alternately in one process, so machine noise hits both
alike; each figure is the median over the repeats of the time per
``with Event("x"): pass``. The event map is reset before every run. The
bytes per occurrence are those of the trace section of a one-process flush
of a two-level loop, divided by its occurrences.

The analysis rate: the critical path, the wait states and the ideal
network replay (``Profile.pop(trace=True)``) of a synthetic
trace of a bulk-synchronous run (``--ranks`` 64, ``--records`` 10^6 traced
occurrences and MPI calls: per step and rank an enclosing event, a compute
event of random length, a ring Sendrecv and an Allreduce), built in memory,
median of the repeats.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from time import perf_counter_ns

import numpy as np

import tinyprof
from tinyprof import annotate
from tinyprof.analysis import trace as _trace
from tinyprof.format.reader import parse_file


def event_loop(n: int) -> None:
    event = tinyprof.Event
    for _ in range(n):
        with event("x"):
            pass


def per_event_ns(limit: int, n: int) -> float:
    impl = annotate.impl
    impl.reset()
    impl.trace(limit)
    t0 = perf_counter_ns()
    event_loop(n)
    elapsed = perf_counter_ns() - t0
    impl.trace(0)
    impl.reset()
    return elapsed / n


def bytes_per_occurrence(n: int) -> float:
    with tempfile.TemporaryDirectory() as outdir:
        tinyprof.Profiler("bench", outdir=outdir, trace=True, trace_limit=4 * n)
        for _ in range(n):
            with tinyprof.Event("step"):
                with tinyprof.Event("compute"):
                    pass
        tinyprof.flush()
        tinyprof.Profiler("after", outdir=outdir).close()
        f = parse_file(os.path.join(outdir, "bench.0-of-1.tp"))
        return len(f.sections["trace"]) / (2 * n)


def bsp_trace(nranks: int, records: int, seed: int = 1) -> _trace.Trace:
    """A bulk-synchronous run: steps of compute, a ring Sendrecv, an Allreduce."""
    rng = np.random.default_rng(seed)
    steps = max(1, records // (4 * nranks))
    work = rng.integers(50_000, 150_000, (steps, nranks))
    ev, calls, eps = [], [], []
    now = np.zeros(nranks, np.int64)
    ranks = np.arange(nranks)
    for s in range(steps):
        end_work = now + work[s]
        left = (ranks - 1) % nranks
        end_sr = np.maximum(end_work, end_work[left]) + 2_000      # waits for its left neighbour
        done = end_sr.max() + 5_000
        ev += [np.column_stack([ranks, ranks * 0, ranks * 0, now, done + ranks * 0]),
               np.column_stack([ranks, ranks * 0, ranks * 0 + 1, now, end_work])]
        calls += [np.column_stack([ranks, ranks * 0, ranks * 0, end_work, end_sr, ranks * 0,
                                   ranks * 0, ranks * 0 + 64, ranks * 0 - 1]),
                  np.column_stack([ranks, ranks * 0, ranks * 0, end_sr, done + ranks * 0,
                                   ranks * 0 + 1, ranks * 0, ranks * 0 + 8, ranks * 0 - 1])]
        now[:] = done
    ev_a = np.concatenate(ev)
    ev_a = ev_a[np.lexsort((ev_a[:, 3], ev_a[:, 0]))]
    call_a = np.concatenate(calls)
    order = np.lexsort((call_a[:, 3], call_a[:, 0]))
    call_a = call_a[order]
    # endpoints of the Sendrecvs: row i of step s, rank r sends to r+1 with tag s
    sr = np.flatnonzero(call_a[:, 5] == 0)
    rank = call_a[sr, 0]
    step = np.arange(len(sr)) - np.searchsorted(rank, rank)        # k-th Sendrecv of its rank
    zero = rank * 0
    eps = np.concatenate([np.column_stack([sr, zero, (rank + 1) % nranks, step, zero + 64, zero,
                                           rank]),
                          np.column_stack([sr, zero + 1, (rank - 1) % nranks, step, zero + 64,
                                           zero, rank])])
    trace = _trace.Trace(nranks, "ns", [("step",), ("step", "compute")], ["Sendrecv", "Allreduce"],
                         ["COMM_WORLD"], 0, dict(zip(_trace.EV_COLUMNS, ev_a.T.copy())),
                         dict(zip(_trace.CALL_COLUMNS, call_a.T.copy())), {},
                         np.zeros((nranks, 2), np.int64))
    trace.msgs = _trace.match(trace, eps)
    return trace


def analysis_rate(nranks: int, records: int, repeats: int) -> None:
    trace = bsp_trace(nranks, records)
    n = len(trace.ev["rank"]) + len(trace.calls["rank"])
    cp, ws, ideal = [], [], []
    for _ in range(repeats):
        t0 = perf_counter_ns()
        path = _trace.critical_path(trace)
        t1 = perf_counter_ns()
        _trace.wait_states(trace)
        t2 = perf_counter_ns()
        _trace.ideal_inclusive(trace)
        cp.append((t1 - t0) / 1e9)
        ws.append((t2 - t1) / 1e9)
        ideal.append((perf_counter_ns() - t2) / 1e9)
    length, wall = path["duration"].sum(), trace.wall_time * 1e-9
    a, b, c = statistics.median(cp), statistics.median(ws), statistics.median(ideal)
    print(f"\nanalysis of {nranks} ranks, {n} records ({len(trace.msgs['send'])} messages), "
          f"median of {repeats}:\n")
    print("| analysis | seconds | records per second |\n| --- | ---: | ---: |")
    print(f"| critical path | {a:.2f} | {n / a / 1e6:.2f} M |")
    print(f"| wait states | {b:.2f} | {n / b / 1e6:.2f} M |")
    print(f"| ideal network replay (POP split) | {c:.2f} | {n / c / 1e6:.2f} M |")
    print(f"\npath length / wall time: {length / wall:.6f} ({len(path)} segments)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=200_000)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    off, on = [], []
    for _ in range(args.repeats):
        off.append(per_event_ns(0, args.iterations))
        on.append(per_event_ns(10 * args.iterations, args.iterations))
    a, b = statistics.median(off), statistics.median(on)
    print(f"hot path: {annotate.impl.__name__}, {args.repeats} repeats of "
          f"{args.iterations} events\n")
    print("| case | ns per event (median) |\n| --- | ---: |")
    print(f"| trace off | {a:.0f} |\n| trace on | {b:.0f} |\n| ratio on/off | {b / a:.2f} |")
    print(f"\nbytes per traced occurrence: {bytes_per_occurrence(args.iterations // 4):.1f}")
    analysis_rate(args.ranks, args.records, args.repeats)


if __name__ == "__main__":
    main()
