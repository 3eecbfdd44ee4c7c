"""Continuous profiling: the overhead of profiling and of periodic snapshots.

    .venv/bin/python benchmarks/continuous.py [--ranks 4] [--steps 2000] [--frequency 1] [--repeats 5]

Overhead: the demo (tinyprof/demo.py) run 10x longer than its default (2000
steps instead of 200) on 4 ranks, in three modes launched interleaved, one
mpiexec each: profiling off (``TINYPROF=0``), profiling on without
snapshots, and snapshots every ``--frequency`` s. A run's time is the demo's
own figure: from ``Profiler()`` to the end of the flush, slowest rank (so
MPI start-up is left out). Overhead is the median of ``--repeats`` runs of a
mode over the median with profiling off; also the fastest run of each mode,
the one least disturbed on a shared machine. The demo also reports the CPU time
its snapshots took (thread CPU time, largest over ranks): their direct cost,
free of the noise of the other ranks and processes sharing the cores.

Snapshot cost: one rank's snapshot (copy, encode, atomic write with fsync)
timed in this process, wall and CPU time, after recording the demo's events
per step (4 events, 2 metrics) for a growing number of steps: the first
snapshot encodes everything, the next ones (each after 1% more steps) only
the new values, but still copy and write the whole file.

Prints Markdown tables (the ones in docs/performance.md, "Continuous profiling").
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # numpy's idle BLAS threads off our cores

import tinyprof                                     # noqa: E402
from tinyprof import _annotate, _layout, _session   # noqa: E402

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
MODES = {"off": ({"TINYPROF": "0"}, 0.0), "on": ({}, 0.0), "snapshots": ({}, None)}


def run_demo(ranks: int, steps: int, frequency: float, env: Dict[str, str],
             outdir: str) -> Tuple[float, int, float]:
    """(run time, snapshots, CPU s in snapshots) of one demo run, as it prints them."""
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "tinyprof.demo", outdir,
           "--steps", str(steps), "--frequency", str(frequency)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **env))
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    m = re.search(r"; ([0-9.]+) s; (\d+) snapshots, ([0-9.]+) ms CPU", proc.stdout)
    return float(m.group(1)), int(m.group(2)), float(m.group(3)) / 1e3


def overhead(args: argparse.Namespace) -> None:
    times: Dict[str, List[float]] = {mode: [] for mode in MODES}
    snapshots: List[int] = []
    shares: List[float] = []             # CPU in snapshots / run time, slowest rank
    work = tempfile.mkdtemp(prefix="tinyprof-continuous-")
    try:
        for _ in range(args.repeats):
            for mode, (env, frequency) in MODES.items():
                outdir = os.path.join(work, mode)
                shutil.rmtree(outdir, ignore_errors=True)
                elapsed, taken, cpu = run_demo(args.ranks, args.steps, args.frequency
                                               if frequency is None else frequency, env, outdir)
                times[mode].append(elapsed)
                if mode == "snapshots":
                    snapshots.append(taken)
                    shares.append(cpu / elapsed)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(times["off"])
    print(f"Demo, {args.ranks} ranks, {args.steps} steps, median of {args.repeats} "
          f"(interleaved runs):\n")
    fastest = min(times["off"])
    print("| mode | median (s) | overhead | fastest (s) | overhead | runs (s) |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for mode in MODES:
        med, low = statistics.median(times[mode]), min(times[mode])
        label = f"snapshots every {args.frequency:g} s" if mode == "snapshots" else f"profiling {mode}"
        runs = ", ".join(f"{t:.3f}" for t in times[mode])
        costs = ["-", "-"] if mode == "off" else [
            f"{100 * (med - base) / base:+.1f} %", f"{100 * (low - fastest) / fastest:+.1f} %"]
        print(f"| {label} | {med:.3f} | {costs[0]} | {low:.3f} | {costs[1]} | {runs} |")
    print(f"\nWith snapshots on: {statistics.median(snapshots):g} snapshots per run, their CPU "
          f"time {100 * statistics.median(shares):.2f} % of the run time (medians; largest "
          "over ranks).\n")


def _record_demo_steps(steps: int) -> None:
    """The demo's events and metrics per step, empty bodies."""
    with tinyprof.Event("main"):
        for step in range(steps):
            for name in ("halo", "boundary", "stencil"):
                with tinyprof.Event(name, loop=1, kind=1, bytes=4096):
                    pass
            if step % 10 == 9:
                with tinyprof.Event("residual", loop=2, kind=2):
                    pass


def snapshot_cost(args: argparse.Namespace) -> None:
    impl = _annotate.impl
    work = tempfile.mkdtemp(prefix="tinyprof-snapshot-")
    print("One rank's snapshot after recording the demo's events for N steps: the first "
          "(everything to encode), then the next ones, each after 1% more steps "
          f"(median of {args.repeats}):\n")
    print("| steps | values | file (KiB) | first: wall (ms) | CPU (ms) "
          "| next: wall (ms) | CPU (ms) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        for steps in (200, 2000, 20000, 200000):
            impl.reset()
            tinyprof.Profiler("bench", frequency=3600, selfkeys="kind:0,bytes:1",
                              outdir=os.path.join(work, str(steps)))
            _record_demo_steps(steps)
            snap = _session.current().snapshotter
            t0, c0 = time.perf_counter(), snap.cpu
            snap.take(1)
            first, first_cpu = time.perf_counter() - t0, snap.cpu - c0
            size = os.path.getsize(os.path.join(_layout.snapshot_dir(snap.settings.outdir, 1),
                                                "bench.0-of-1.tp"))
            spent, cpu = [], []
            for k in range(2, args.repeats + 2):
                _record_demo_steps(steps // 100)
                t0, c0 = time.perf_counter(), snap.cpu
                snap.take(k)
                spent.append(time.perf_counter() - t0)
                cpu.append(snap.cpu - c0)
            values = 3 * steps + steps // 10
            print(f"| {steps} | {values} | {size / 1024:.0f} | "
                  f"{1e3 * first:.2f} | {1e3 * first_cpu:.2f} | "
                  f"{1e3 * statistics.median(spent):.2f} | {1e3 * statistics.median(cpu):.2f} |")
    finally:
        tinyprof.Profiler("bench")          # stops the snapshotter
        impl.reset()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=2000, help="demo steps (default 2000: 10x the demo)")
    p.add_argument("--frequency", type=float, default=1.0, help="snapshot interval, s")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    overhead(args)
    snapshot_cost(args)


if __name__ == "__main__":
    main()
