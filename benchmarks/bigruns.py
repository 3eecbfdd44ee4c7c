"""Big runs: the flush's peak memory and time, and the request-loop file size.

    .venv/bin/python benchmarks/bigruns.py [--scale 1.0] [--repeats 3] [--case NAME]
                                           [--tree DIR ...]

Each case runs in its own process (no MPI, ``TINYPROF_MPI=0``): it records
through the public API, then times one ``Profiler.flush()``. The flush's peak
is ``ru_maxrss`` after the flush minus ``ru_maxrss`` just before it (the
recording's own memory is not counted), given per value written and over the
bytes of the file written. Cases, at ``--scale 1``:

- ``values``: one ``loop=1`` event with 10^7 values (under ``main``);
- ``callpaths``: 300,000 callpaths, one value each;
- ``trace``: 3*10^6 traced occurrences of one event (trace mode);
- ``requests``: 10,000 executions of the root event ``request``, each adding
  a new callpath under it (a request loop): the file's size.

The flush's CPU time is given beside its wall time: on a busy machine it is
the steadier figure. With ``--tree`` (repeatable), each case runs with each
source tree in turn (``PYTHONPATH``; e.g. an export of ``main``, built), one
process each, alternating, so that both see the same load. Every figure is
the median over ``--repeats`` processes. Prints a Markdown table
(docs/performance.md, section "Big runs").
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

CASES = {"values": 10**7, "callpaths": 300_000, "trace": 3 * 10**6, "requests": 10_000}


def maxrss() -> int:
    """This process's peak resident size in bytes (Linux gives KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(case: str, n: int, outdir: str) -> None:
    """Record ``case`` with ``n`` items, flush once, print one JSON line."""
    import tinyprof
    from tinyprof import Event

    prof = tinyprof.Profiler("big", outdir=outdir, mpi=False, trace=case == "trace",
                             trace_limit=n + 10 if case == "trace" else None)
    if case in ("values", "trace"):
        with Event("main"):
            for _ in range(n):
                with Event("kernel", loop=1):
                    pass
    elif case == "callpaths":
        with Event("main"):
            for i in range(n):
                with Event(f"k{i}"):
                    pass
    else:
        for i in range(n):
            with Event("request"):
                with Event("parse"):
                    pass
                with Event(f"handler{i}"):
                    pass
    before = maxrss()
    start, cpu = time.perf_counter(), time.process_time()
    prof.flush()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = maxrss() - before
    size = sum(os.path.getsize(os.path.join(outdir, f)) for f in os.listdir(outdir)
               if f.endswith(".tp"))
    print(json.dumps({"seconds": seconds, "cpu": cpu, "peak": peak, "bytes": size, "n": n}))


def run(case: str, n: int, tree: str) -> dict:
    outdir = tempfile.mkdtemp(prefix="tp-bigruns-")
    try:
        env = dict(os.environ, TINYPROF_MPI="0")
        if tree:
            env["PYTHONPATH"] = tree
        out = subprocess.run([sys.executable, __file__, "--worker", case, str(n), outdir],
                             check=True, capture_output=True, text=True, env=env).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(outdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every case's size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", action="append", choices=list(CASES))
    parser.add_argument("--tree", action="append", help="a source tree to run (PYTHONPATH)")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.worker[2])
        return
    trees = args.tree or [""]
    print("| case | n | tree | flush (s) | CPU (s) | peak (MB) | peak / value (B) | file (MB) "
          "| peak / file |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case in args.case or list(CASES):
        n = max(1, int(CASES[case] * args.scale))
        runs: dict = {tree: [] for tree in trees}
        for _ in range(args.repeats):
            for tree in trees:
                runs[tree].append(run(case, n, tree))
        for tree in trees:
            med = {k: statistics.median(r[k] for r in runs[tree])
                   for k in ("seconds", "cpu", "peak", "bytes")}
            print(f"| {case} | {n:,} | {tree or 'this'} | {med['seconds']:.2f} | {med['cpu']:.2f} | "
                  f"{med['peak'] / 1e6:.1f} | {med['peak'] / n:.1f} | {med['bytes'] / 1e6:.2f} | "
                  f"{med['peak'] / max(med['bytes'], 1):.2f} |", flush=True)


if __name__ == "__main__":
    main()
