"""The cost of MPI call sites (``sites=K``) and of sampled stacks (``sample=HZ``).

    .venv/bin/python benchmarks/stacks.py sites [--repeats 5] [--blocks 100] [--calls 2000]
    .venv/bin/python benchmarks/stacks.py sample [--seconds 20] [--block 1] [--hz 100] [--python]

``sites``: one rank (mpiexec -n 1) with ``Profiler(mpi=True, sites=K)``
times blocks of ``--calls`` ``Allreduce`` of one double on ``COMM_SELF``,
made 10 frames deep inside an Event, switching libtinyprof_mpi's node
source between the C core's (what ``sites`` off runs: the same path as
before sites existed) and the site reader, block by block, ``--blocks``
pairs; per pair (on - off) / calls. Printed: the median off ns per call and
the median added ns per call, per K in (1, 3), median over ``--repeats``
processes.

``sample``: a pure-Python workload 10 frames deep (the sampler's cost grows
with the stack) runs ``--seconds`` sampled at ``--hz`` and as long not, in
blocks of ``--block`` seconds taken in turns (on, off; then off, on...) in
one process, so that the machine's load drifts over both alike; ``--python``
counts the samples with the pure-Python ``PySamples`` instead of the C
table. Printed: wall, process CPU time (all threads, the sampler's
included) and the main thread's CPU time (the program's, samples taken in
it included) on / off, over the whole run and the median of the pairs; the
samples taken per second; the sampler thread's CPU (its wake-ups included)
per sample and over the sampled wall time: the CPU share sampling takes,
whatever the load, where the ratios carry the load's noise; the share of
the samples the main thread took itself (asked while it ran Python) and
its time in each.

Prints Markdown tables (docs/performance.md, "Call sites and samples").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from continuous import MPIEXEC


def deep(n: int, fn, *args):
    """``fn(*args)`` called ``n`` frames down."""
    return fn(*args) if n == 0 else deep(n - 1, fn, *args)


def sites_worker(blocks: int, calls: int) -> None:
    import numpy as np
    from mpi4py import MPI

    import tinyprof
    from tinyprof.runtime import sites
    out = {}
    for depth in (1, 3):
        prof = tinyprof.Profiler("bench", outdir=tempfile.mkdtemp(), mpi=True, sites=depth)
        capture = prof.session.capture
        lib, core = capture.lib, capture.source
        site = sites.site_source(capture.source, depth)
        x, y = np.ones(1), np.ones(1)

        def block(source: int) -> float:
            lib.tinyprof_mpi_set_source(source)
            t = time.perf_counter_ns()
            for _ in range(calls):
                MPI.COMM_SELF.Allreduce(x, y)
            return (time.perf_counter_ns() - t) / calls

        offs, added = [], []
        with tinyprof.Event("bench"):
            for i in range(blocks):
                if i % 2:
                    off = deep(10, block, core)
                    on = deep(10, block, site)
                else:
                    on = deep(10, block, site)
                    off = deep(10, block, core)
                offs.append(off)
                added.append(on - off)
        out[depth] = (statistics.median(offs), statistics.median(added))
        lib.tinyprof_mpi_set_source(core)
        prof.close()
    print(json.dumps(out))


def sites(args: argparse.Namespace) -> None:
    runs = []
    for _ in range(args.repeats):
        proc = subprocess.run([MPIEXEC, "-n", "1", sys.executable, __file__, "sites-worker",
                               str(args.blocks), str(args.calls)], capture_output=True, text=True,
                              check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"MPI call sites: Allreduce of 1 double on COMM_SELF, 10 frames deep, {args.blocks} pairs "
          f"of {args.calls} calls, median of {args.repeats} processes\n")
    print("| K (--site-depth) | ns per call, sites off | ns added per call, sites on |")
    print("|---|---|---|")
    for depth in ("1", "3"):
        off = statistics.median(r[depth][0] for r in runs)
        on = statistics.median(r[depth][1] for r in runs)
        print(f"| {depth} | {off:.0f} | {on:+.0f} |")


def fixed_work(loops: int) -> int:
    s = 0
    for _ in range(loops):
        for i in range(20_000):
            s += i * i
    return s


def sample(args: argparse.Namespace) -> None:
    from tinyprof.runtime.sampler import PySamples, Sampler
    t0 = time.perf_counter()
    loops = 0
    while time.perf_counter() - t0 < 1.0:
        fixed_work(10)
        loops += 10
    loops = max(1, int(loops * args.block))     # about --block seconds of work
    pairs = max(1, round(args.seconds / args.block))
    times: dict = {True: [], False: []}         # (wall, process CPU, main thread's CPU) per block
    taken, thread_cpu, by_main, main_ns = 0, 0.0, 0, 0
    table = [PySamples] if args.python else []     # none given: also runs on older trees
    for i in range(pairs):
        for on in ((False, True) if i % 2 else (True, False)):
            sampler = Sampler(round(1e9 / args.hz), *table) if on else None
            if sampler is not None:
                sampler.start()
            w, c, m = time.perf_counter(), time.process_time(), time.thread_time()
            deep(10, fixed_work, loops)
            times[on].append((time.perf_counter() - w, time.process_time() - c, time.thread_time() - m))
            if sampler is not None:
                thread_cpu += time.clock_gettime(time.pthread_getcpuclockid(sampler.thread.ident))
                sampler.stop()
                sampler.thread.join()
                taken += sampler.taken
                by_main += getattr(sampler, "by_main", 0)        # older trees: none
                main_ns += getattr(sampler, "main_ns", 0)
    whole = [sum(t[j] for t in times[True]) / sum(t[j] for t in times[False]) for j in range(3)]
    pair = [statistics.median(a[j] / b[j] for a, b in zip(times[True], times[False])) for j in range(3)]
    wall_on, wall_off = (sum(t[0] for t in times[k]) for k in (True, False))
    print(f"Sampled stacks at {args.hz:g} Hz ({'PySamples' if args.python else 'the default table'}): "
          f"{wall_on:.1f} s of pure-Python work 10 frames deep sampled and {wall_off:.1f} s not, "
          f"in {pairs} pairs of {args.block:g} s blocks taken in turns\n")
    print("| | wall on/off | CPU on/off (all threads) | main thread's CPU on/off |")
    print("|---|---|---|---|")
    print("| whole run | " + " | ".join(f"{r:.4f}" for r in whole) + " |")
    print("| median pair | " + " | ".join(f"{r:.4f}" for r in pair) + " |\n")
    print("| samples per second | sampler thread's CPU per sample (us) | sampler thread's CPU / wall "
          "| taken by the main thread | its time per sample (us) |")
    print("|---|---|---|---|---|")
    print(f"| {taken / wall_on:.1f} | {thread_cpu / max(taken, 1) * 1e6:.1f} | "
          f"{100 * thread_cpu / wall_on:.3f}% | {100 * by_main / max(taken, 1):.0f}% | "
          f"{main_ns / max(by_main, 1) / 1e3:.1f} |")


def main() -> None:
    if sys.argv[1:2] == ["sites-worker"]:
        sites_worker(int(sys.argv[2]), int(sys.argv[3]))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sites")
    s.add_argument("--repeats", type=int, default=5)
    s.add_argument("--blocks", type=int, default=100)
    s.add_argument("--calls", type=int, default=2000)
    s.set_defaults(run=sites)
    s = sub.add_parser("sample")
    s.add_argument("--seconds", type=float, default=20)
    s.add_argument("--block", type=float, default=1)
    s.add_argument("--hz", type=float, default=100)
    s.add_argument("--python", action="store_true", help="count with PySamples, not the C table")
    s.set_defaults(run=sample)
    args = p.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
