"""Trace mode: the cost of an event with trace on and off, and bytes per traced occurrence.

    .venv/bin/python benchmarks/trace.py [--repeats 7] [--iterations 200000]

Trace off and on run alternately in one process, so machine noise hits both
alike; each figure is the median over the repeats of the time per
``with Event("x"): pass``. The event map is reset before every run. The
bytes per occurrence are those of the trace section of a one-process flush
of a two-level loop, divided by its occurrences.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from time import perf_counter_ns

import tinyprof
from tinyprof import _annotate
from tinyprof._format import parse_file


def event_loop(n: int) -> None:
    event = tinyprof.Event
    for _ in range(n):
        with event("x"):
            pass


def per_event_ns(limit: int, n: int) -> float:
    impl = _annotate.impl
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=200_000)
    args = ap.parse_args()
    off, on = [], []
    for _ in range(args.repeats):
        off.append(per_event_ns(0, args.iterations))
        on.append(per_event_ns(10 * args.iterations, args.iterations))
    a, b = statistics.median(off), statistics.median(on)
    print(f"hot path: {_annotate.impl.__name__}, {args.repeats} repeats of "
          f"{args.iterations} events\n")
    print("| case | ns per event (median) |\n| --- | ---: |")
    print(f"| trace off | {a:.0f} |\n| trace on | {b:.0f} |\n| ratio on/off | {b / a:.2f} |")
    print(f"\nbytes per traced occurrence: {bytes_per_occurrence(args.iterations // 4):.1f}")


if __name__ == "__main__":
    main()
