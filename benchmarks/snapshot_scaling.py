"""Aggregated snapshots as P grows: the per-phase costs docs/scaling.md projects from.

    .venv/bin/python benchmarks/snapshot_scaling.py [--growth 8,16,32,64] [--repeats 5]

One mpiexec launch per P. Every rank records the flush benchmark's workload
(tinyprof._sweep: 200 callpaths x 100 loop iterations), then takes snapshots
by explicit triggers (``Profiler.snapshot()`` on every rank after a barrier;
the period is an hour; default A = max(1, P // 16), ``keep="all"``): one
full snapshot (everything), then ``--repeats`` deltas, each after 10 more
iterations (10 % new data). Per snapshot, the snapshot thread's CPU time
(thread CPU: copying the event map, encoding, pickling, and on an aggregator
receiving, assembling and writing; its sleep-polling while others are late
costs nearly nothing) as the mean over the ranks that are not aggregators
and the maximum over the aggregators, the bytes of its files, and the wall
time from the trigger to the end on the slowest rank. Delta figures are
medians over the deltas. 64 ranks share 2 cores here: read the CPU columns.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # numpy's idle BLAS threads off our cores
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)     # no recompiling in every rank

CALLPATHS, ITERATIONS, MORE = 200, 100, 10


def worker(outdir: str, repeats: int) -> None:
    """Runs on every rank; rank 0 prints one JSON line."""
    from mpi4py import MPI

    import tinyprof
    from tinyprof import _sweep
    from tinyprof.format import output_dir
    from tinyprof.runtime.settings import group_of

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    _sweep.record(rank, CALLPATHS, ITERATIONS)
    prof = tinyprof.Profiler("snap", frequency=3600, outdir=outdir, keep="all")
    snap = prof.session.snapshotter
    naggs = prof.settings.aggregator_count(size)
    aggregator = group_of(rank, size, naggs)[1] == rank

    def one():
        comm.Barrier()
        cpu, start = snap.cpu, time.perf_counter()
        ended = prof.snapshot(timeout=600)
        return snap.cpu - cpu, time.perf_counter() - start, ended

    runs = [one()]
    for _ in range(repeats):
        _sweep.record(rank, CALLPATHS, MORE)
        runs.append(one())
    got = comm.gather((aggregator, runs), root=0)
    if rank == 0:
        snaps = []
        for k in tinyprof.snapshots(outdir):
            paths = output_dir.profile_files(output_dir.snapshot_dir(outdir, k))
            snaps.append({"files": len(paths), "bytes": sum(map(os.path.getsize, paths))})
        print(json.dumps({"A": naggs, "ranks": got, "snapshots": snaps}))
    prof.close()


def launch(nranks: int, repeats: int) -> dict:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    outdir = tempfile.mkdtemp(prefix="tinyprof-snapscale-")
    cmd = [mpiexec, "-n", str(nranks), sys.executable, os.path.abspath(__file__), "--worker",
           outdir, str(repeats)]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800).stdout
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    return json.loads(out.strip().splitlines()[-1])


def figures(result: dict, which: slice) -> dict:
    """CPU (ms: rank mean, aggregator max), wall (ms, slowest), bytes and files of
    the snapshots ``which`` (medians over them)."""
    ranks, snaps = result["ranks"], result["snapshots"][which]
    n = len(ranks[0][1][which])
    rank_cpu, agg_cpu, wall = [], [], []
    for i in range(n):
        others = [runs[which][i][0] for agg, runs in ranks if not agg]
        rank_cpu.append(statistics.mean(others) if others else float("nan"))
        agg_cpu.append(max(runs[which][i][0] for agg, runs in ranks if agg))
        wall.append(max(runs[which][i][1] for _, runs in ranks))
    return {"rank": 1e3 * statistics.median(rank_cpu), "agg": 1e3 * statistics.median(agg_cpu),
            "wall": 1e3 * statistics.median(wall),
            "bytes": statistics.median(s["bytes"] for s in snaps),
            "files": max(s["files"] for s in snaps),
            "ended": all(r[2] for _, runs in ranks for r in runs[which])}


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], int(sys.argv[3]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--growth", default="8,16,32,64", help="P values")
    p.add_argument("--repeats", type=int, default=5, help="delta snapshots per P")
    args = p.parse_args()
    print(f"{CALLPATHS} callpaths x {ITERATIONS} iterations per rank, then {MORE} more before "
          f"each of {args.repeats} deltas; default A; CPU and wall in ms, bytes per snapshot.\n")
    print("| P | A | files | full: bytes | rank CPU | aggregator CPU | wall "
          "| delta: bytes | rank CPU | aggregator CPU | wall |")
    print("| ---: " * 11 + "|")
    for nranks in map(int, args.growth.split(",")):
        r = launch(nranks, args.repeats)
        full, delta = figures(r, slice(0, 1)), figures(r, slice(1, None))
        if not (full["ended"] and delta["ended"]):
            sys.exit(f"P = {nranks}: a snapshot did not end")
        print(f"| {nranks} | {r['A']} | {max(full['files'], delta['files'])} | "
              f"{full['bytes']:,.0f} | {full['rank']:.2f} | {full['agg']:.2f} | {full['wall']:.1f} | "
              f"{delta['bytes']:,.0f} | {delta['rank']:.2f} | {delta['agg']:.2f} | "
              f"{delta['wall']:.1f} |")


if __name__ == "__main__":
    main()
