"""The cost of MPI call sites (``sites=K``) and of sampled stacks (``sample=HZ``).

    .venv/bin/python benchmarks/stacks.py sites [--repeats 5] [--blocks 100] [--calls 2000]
    .venv/bin/python benchmarks/stacks.py sample [--repeats 3] [--seconds 20] [--hz 100]

``sites``: one rank (mpiexec -n 1) with ``Profiler(mpi=True, sites=K)``
times blocks of ``--calls`` ``Allreduce`` of one double on ``COMM_SELF``,
made 10 frames deep inside an Event, switching libtinyprof_mpi's node
source between the C core's (what ``sites`` off runs: the same path as
before sites existed) and the site reader, block by block, ``--blocks``
pairs; per pair (on - off) / calls. Printed: the median off ns per call and
the median added ns per call, per K in (1, 3), median over ``--repeats``
processes.

``sample``: a pure-Python workload 10 frames deep (the sampler's cost grows
with the stack) runs for ``--seconds`` twice per repeat, sampled at ``--hz``
and not, in turns, in one process; printed: the medians over ``--repeats``
of the wall time ratio (on / off) and of the process CPU time ratio (all
threads, the sampler's included), the samples taken per second, and the
sampler thread's own CPU time per sample (``take``; that x HZ) and in
all (its wake-ups too) over the run's wall time: the CPU share sampling
takes whatever the machine's load, where the ratios carry its noise.

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
    from tinyprof.runtime import stacks
    out = {}
    for depth in (1, 3):
        prof = tinyprof.Profiler("bench", outdir=tempfile.mkdtemp(), mpi=True, sites=depth)
        capture = prof.session.capture
        lib, core = capture.lib, capture.source
        site = stacks.site_source(capture.source, depth)
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
    from tinyprof.runtime import stacks
    t0 = time.perf_counter()
    loops = 0
    while time.perf_counter() - t0 < 1.0:
        fixed_work(10)
        loops += 10
    loops = int(loops * args.seconds)       # about --seconds of work
    walls, cpus, rates, costs, shares = [], [], [], [], []
    for r in range(args.repeats):
        times = {}
        for on in ((False, True) if r % 2 else (True, False)):
            sampler = stacks.Sampler(round(1e9 / args.hz)) if on else None
            spent = [0]
            if sampler is not None:
                take = sampler.take

                def timed(take=take, spent=spent):
                    t = time.thread_time_ns()
                    take()
                    spent[0] += time.thread_time_ns() - t
                sampler.take = timed        # type: ignore[method-assign]
                sampler.start()
            w, c = time.perf_counter(), time.process_time()
            deep(10, fixed_work, loops)
            times[on] = (time.perf_counter() - w, time.process_time() - c)
            if sampler is not None:
                clock = time.pthread_getcpuclockid(sampler.thread.ident)
                thread_cpu = time.clock_gettime(clock)
                sampler.stop()
                rates.append(sampler.taken / times[on][0])
                costs.append(spent[0] / max(sampler.taken, 1) / 1e3)
                shares.append(thread_cpu / times[on][0])
        walls.append(times[True][0] / times[False][0])
        cpus.append(times[True][1] / times[False][1])
    print(f"Sampled stacks at {args.hz:g} Hz: {args.seconds:g} s of pure-Python work 10 frames deep, "
          f"sampled and not, in turns, median of {args.repeats}\n")
    print("| wall on/off | CPU on/off (all threads) | samples per second | CPU per sample (us) | "
          "CPU per sample x HZ | sampler thread's CPU / wall |")
    print("|---|---|---|---|---|---|")
    cost = statistics.median(costs)
    print(f"| {statistics.median(walls):.4f} | {statistics.median(cpus):.4f} | "
          f"{statistics.median(rates):.1f} | {cost:.1f} | {cost * args.hz / 1e4:.3f}% | "
          f"{100 * statistics.median(shares):.3f}% |")


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
    s.add_argument("--repeats", type=int, default=3)
    s.add_argument("--seconds", type=float, default=20)
    s.add_argument("--hz", type=float, default=100)
    s.set_defaults(run=sample)
    args = p.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
