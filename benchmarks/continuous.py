"""Continuous profiling: what profiling and aggregated snapshots cost, and what they write.

    .venv/bin/python benchmarks/continuous.py [--ranks 2 4] [--seconds 20] [--repeats 7]
    .venv/bin/python benchmarks/continuous.py --quick     # smoke run: 2 s runs, 3 repeats

1. **App overhead.** The demo (tinyprof/demo.py), its steps calibrated so
   that a run lasts ``--seconds`` with profiling off, on each rank count in
   three modes launched interleaved, one mpiexec each: profiling off
   (``TINYPROF=0``), on, and on with snapshots every ``--frequency`` s
   (``keep="all"``, the flush's aggregators: A = 1 here). A run's time is the
   demo's own figure (from ``Profiler()`` to the end of the flush, slowest
   rank). Medians of ``--repeats``; also the snapshot thread's CPU time over
   the run time (largest over ranks).
2. **What the snapshots wrote** in those runs: files per snapshot (against
   A), bytes per snapshot against the occurrences recorded in its interval,
   and all the snapshots' bytes over the final profile's.
3. **Fixed cost.** ``Profiler()`` plus the final flush at P = 4, timed in the
   ranks (slowest rank) after numpy, mpi4py and ``tinyprof`` are imported
   (an MPI application has them; what ``Profiler()`` imports counts), median
   of ``--repeats`` fresh runs.
4. **One rank's snapshot** (this process) after recording the demo's events
   for N steps: the first one (full), then the next ones, each after 1 % more
   steps (deltas).

Every run has bytecode caching on: the machines here set
``PYTHONDONTWRITEBYTECODE=1``, and recompiling tinyprof's modules in every
process would count as start-up. Prints Markdown tables (docs/performance.md,
"Continuous profiling").
"""
from __future__ import annotations

import argparse
import importlib
import json
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
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import tinyprof

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
MODES = {"off": {"TINYPROF": "0"}, "on": {}, "snapshots": {}}
GOALS = {"overhead": 1.0, "fixed_ms": 20.0, "growth": 1.2}


def run_demo(ranks: int, steps: int, frequency: float, env: Dict[str, str],
             outdir: str, cols: int) -> Tuple[float, int, float]:
    """(run time s, snapshots, CPU s in snapshots) of one demo run, as it prints them."""
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "tinyprof.demo", outdir,
           "--steps", str(steps), "--frequency", str(frequency), "--keep", "all",
           "--cols", str(cols)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, **env))
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    m = re.search(r"; ([0-9.]+) s; (\d+) snapshots, ([0-9.]+) ms CPU", proc.stdout)
    return float(m.group(1)), int(m.group(2)), float(m.group(3)) / 1e3


def written(outdir: str) -> Dict[str, List[float]]:
    """Per complete snapshot: files, bytes, occurrences held; and the final profile's bytes."""
    from tinyprof.format import output_dir, snapshot_chain
    out: Dict[str, List[float]] = {"files": [], "bytes": [], "values": [], "full": []}
    for k in tinyprof.snapshots(outdir):
        paths = output_dir.profile_files(output_dir.snapshot_dir(outdir, k))
        out["files"].append(len(paths))
        out["bytes"].append(sum(os.path.getsize(p) for p in paths))
        out["values"].append(sum(len(snapshot_chain.parse(p).values.times) for p in paths))
        out["full"].append(b" over " not in open(paths[0], "rb").read(300).split(b"\n")[3])
    out["final"] = [sum(os.path.getsize(p) for p in output_dir.profile_files(outdir))]
    return out


def calibrate(ranks: int, seconds: float, work: str, cols: int) -> int:
    """Demo steps for a run of about ``seconds`` with profiling off."""
    steps = 500
    elapsed, _, _ = run_demo(ranks, steps, 0, MODES["off"], os.path.join(work, "calibrate"), cols)
    return max(steps, int(steps * seconds / elapsed))


def overhead(args: argparse.Namespace, ranks: int, work: str) -> None:
    steps = calibrate(ranks, args.seconds, work, args.cols)
    times: Dict[str, List[float]] = {mode: [] for mode in MODES}
    shares: List[float] = []
    taken: List[int] = []
    snaps: List[Dict[str, List[float]]] = []
    for _ in range(args.repeats):
        for mode, env in MODES.items():
            outdir = os.path.join(work, mode)
            shutil.rmtree(outdir, ignore_errors=True)
            frequency = args.frequency if mode == "snapshots" else 0
            elapsed, count, cpu = run_demo(ranks, steps, frequency, env, outdir, args.cols)
            times[mode].append(elapsed)
            if mode == "snapshots":
                taken.append(count)
                shares.append(cpu / elapsed)
                snaps.append(written(outdir))
    base = statistics.median(times["off"])
    print(f"### {ranks} ranks, {steps} demo steps of {args.cols} columns, median of "
          f"{args.repeats} interleaved runs\n")
    print("| mode | median (s) | overhead | runs (s) |")
    print("| --- | ---: | ---: | --- |")
    for mode in MODES:
        med = statistics.median(times[mode])
        label = f"snapshots every {args.frequency:g} s" if mode == "snapshots" else f"profiling {mode}"
        cost = "-" if mode == "off" else f"{100 * (med - base) / base:+.2f} %"
        print(f"| {label} | {med:.3f} | {cost} | {', '.join(f'{t:.2f}' for t in times[mode])} |")
    over = 100 * (statistics.median(times["snapshots"]) - base) / base
    print(f"\nGoal: at most {GOALS['overhead']:g} % with snapshots: "
          f"{'met' if over <= GOALS['overhead'] else 'missed'} ({over:+.2f} %). "
          f"{statistics.median(taken):g} snapshots per run; the snapshot thread's CPU time is "
          f"{100 * statistics.median(shares):.3f} % of the run time (medians, largest over ranks).\n")
    report_written(snaps)


def report_written(runs: List[Dict[str, List[float]]]) -> None:
    """What the snapshot runs wrote (per run, snapshot after snapshot)."""
    ratios, deltas, fulls, files = [], [], [], []
    for s in runs:
        ratios.append(sum(s["bytes"]) / s["final"][0])
        files += s["files"]
        previous = 0
        for nbytes, values, full in zip(s["bytes"], s["values"], s["full"]):
            (fulls if full else deltas).append((nbytes, values - previous))
            previous = values
    print("| snapshots | files per snapshot | bytes per snapshot (median) | "
          "new occurrences per snapshot (median) | bytes per new occurrence |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, rows in (("full", fulls), ("delta", deltas)):
        if rows:
            b, v = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
            print(f"| {label} ({len(rows)}) | {max(files):g} | {b:,.0f} | {v:,.0f} | "
                  f"{sum(r[0] for r in rows) / max(1, sum(r[1] for r in rows)):.2f} |")
    ratio = statistics.median(ratios)
    print(f"\nAll the snapshots of a run hold {ratio:.3f}x the final profile's bytes (median over "
          f"runs); goal at most {GOALS['growth']:g}x: {'met' if ratio <= GOALS['growth'] else 'missed'}. "
          f"Files per snapshot at most {max(files):g}, A = 1: "
          f"{'met' if max(files) <= 1 else 'missed'}.\n")


def fixed_child(outdir: str) -> None:
    """Under mpiexec: time Profiler() and the final flush in each rank."""
    importlib.import_module("numpy")        # an MPI application has it loaded
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    t0 = time.perf_counter()
    tinyprof.Profiler("fixed", outdir=outdir, selfkeys="kind:0,bytes:1")
    t1 = time.perf_counter()
    with tinyprof.Event("main"):
        for _ in range(1000):
            with tinyprof.Event("step", loop=1, kind=1, bytes=8):
                pass
    comm.Barrier()
    t2 = time.perf_counter()
    tinyprof.flush()
    t3 = time.perf_counter()
    got = comm.gather((t1 - t0, t3 - t2), root=0)
    if comm.Get_rank() == 0:
        print(json.dumps([max(g[0] for g in got), max(g[1] for g in got)]))


def fixed_cost(args: argparse.Namespace, work: str) -> None:
    starts, flushes = [], []
    cmd = [MPIEXEC, "-n", "4", sys.executable, os.path.abspath(__file__), "--fixed-child"]
    for i in range(args.repeats + 1):               # the first one writes the bytecode caches
        outdir = os.path.join(work, f"fixed{i}")
        proc = subprocess.run(cmd + [outdir], capture_output=True, text=True, timeout=600)
        if proc.returncode:
            sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        if i:
            start, flush = json.loads(proc.stdout.strip().splitlines()[-1])
            starts.append(start)
            flushes.append(flush)
    start, flush = statistics.median(starts) * 1e3, statistics.median(flushes) * 1e3
    total = statistics.median(s + f for s, f in zip(starts, flushes)) * 1e3
    print(f"### Fixed cost at P = 4 (slowest rank, median of {args.repeats} fresh runs)\n")
    print("| `Profiler()` (ms) | final flush (ms) | sum (ms) |")
    print("| ---: | ---: | ---: |")
    print(f"| {start:.1f} | {flush:.1f} | {total:.1f} |")
    print(f"\nGoal: at most {GOALS['fixed_ms']:g} ms: "
          f"{'met' if total <= GOALS['fixed_ms'] else 'missed'}.\n")


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


def snapshot_cost(args: argparse.Namespace, work: str) -> None:
    from tinyprof import annotate
    from tinyprof.format import output_dir
    from tinyprof.runtime import session
    impl = annotate.impl
    print("### One rank's snapshot after the demo's events for N steps: the first (full), "
          f"then the next ones (deltas), each after 1 % more steps (median of {args.repeats})\n")
    print("| steps | values | full file (KiB) | full: wall (ms) | CPU (ms) | delta file (KiB) "
          "| delta: wall (ms) | CPU (ms) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        for steps in (200, 2000, 20000, 200000):
            impl.reset()
            outdir = os.path.join(work, f"one{steps}")
            tinyprof.Profiler("bench", frequency=3600, selfkeys="kind:0,bytes:1", outdir=outdir,
                              keep="all", chain=10**6)
            _record_demo_steps(steps)
            snap = session.current().snapshotter
            t0, c0 = time.perf_counter(), snap.cpu
            snap.take(1)
            first, first_cpu = time.perf_counter() - t0, snap.cpu - c0
            spent, cpu = [], []
            for k in range(2, args.repeats + 2):
                _record_demo_steps(steps // 100)
                t0, c0 = time.perf_counter(), snap.cpu
                snap.take(k)
                spent.append(time.perf_counter() - t0)
                cpu.append(snap.cpu - c0)

            def size(k):
                return os.path.getsize(os.path.join(output_dir.snapshot_dir(outdir, k), "bench.0-of-1.tp"))
            print(f"| {steps} | {3 * steps + steps // 10} | {size(1) / 1024:.0f} | "
                  f"{1e3 * first:.2f} | {1e3 * first_cpu:.2f} | {size(2) / 1024:.1f} | "
                  f"{1e3 * statistics.median(spent):.2f} | {1e3 * statistics.median(cpu):.2f} |")
    finally:
        tinyprof.Profiler("bench")          # stops the snapshotter
        impl.reset()


def main() -> None:
    if sys.argv[1:2] == ["--fixed-child"]:
        fixed_child(sys.argv[2])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--seconds", type=float, default=20.0, help="length of a demo run (default 20)")
    p.add_argument("--frequency", type=float, default=1.0, help="snapshot interval, s")
    p.add_argument("--cols", type=int, default=2048,
                   help="demo columns (default 2048: steps that compute, not only exchange)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="2 s runs, 3 repeats: a smoke run")
    args = p.parse_args()
    if args.quick:
        args.seconds, args.repeats = 2.0, 3
    work = tempfile.mkdtemp(prefix="tinyprof-continuous-")
    try:
        for ranks in args.ranks:
            overhead(args, ranks, work)
        fixed_cost(args, work)
        snapshot_cost(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
