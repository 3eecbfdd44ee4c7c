"""Cost of deep nesting: record, flush and read back one chain of N nested events.

    python benchmarks/nesting.py [N ...]        (default: 1000 5000 20000)

Recording is linear in the depth; the flush and the reader handle callpaths
as tuples of names, so their (C-speed) hashing and copying grow with the sum
of the depths: quadratic for one deep chain. Prints seconds per step.
"""
from __future__ import annotations

import sys
import tempfile
import time

import tinyprof
from tinyprof import annotate


def run(depth: int, outdir: str) -> None:
    annotate.impl.reset()
    tinyprof.Profiler("deep", outdir=outdir)
    events = [tinyprof.Event(f"f{i % 7}") for i in range(depth)]
    t0 = time.perf_counter()
    for e in events:
        e.__enter__()
    for e in reversed(events):
        e.__exit__(None, None, None)
    t1 = time.perf_counter()
    tinyprof.flush()
    t2 = time.perf_counter()
    profile = tinyprof.read(outdir)
    t3 = time.perf_counter()
    assert len(profile.callpaths) == depth
    print(f"| {depth} | {t1 - t0:.3f} | {t2 - t1:.2f} | {t3 - t2:.2f} |", flush=True)


def main() -> None:
    depths = [int(a) for a in sys.argv[1:]] or [1000, 5000, 20000]
    print("| depth | record (s) | flush (s) | read (s) |\n| ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as work:
        for depth in depths:
            run(depth, f"{work}/{depth}")


if __name__ == "__main__":
    main()
