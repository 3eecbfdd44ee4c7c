"""Flush cost over MPI: the aggregator sweep (paper Fig. 6), growth with P, memory.

    .venv/bin/python benchmarks/flush.py [--ranks 64] [--growth 4,8,16,32,64] [--repeats 5]

Every rank records the same synthetic workload: 200 callpaths (181 common, 19
under a ``variant<rank % 4>`` event marked ``is_common=False``) x 100 loop
iterations, with the real clock. Then, in one mpiexec launch per P:

- each flush is timed on every rank after a barrier; a flush's time is the
  maximum over ranks, and so is each part's: encode (copy and encode the
  event map), then the phases sync, gather and write;
- "own CPU" is the CPU time of a rank in the flush minus its CPU time inside
  MPI calls (measured through a forwarding communicator): tinyprof's own work,
  free of the busy-waiting of ranks that share the cores;
- every figure is the median over ``--repeats`` flushes;
- sweep: A = P, P/2, ..., 1 at P = ``--ranks``;
- growth: the default A = max(1, P // 16) at each P of ``--growth``, same data
  per rank;
- memory: after the timed flushes of the sweep, one more flush per A with
  tracemalloc on rank 0 (an aggregator for every A): peak traced memory
  above the level before the flush, over the bytes of the file it wrote.

Prints Markdown tables (the ones in docs/performance.md, section "Flush").
The workload and the timed sweep are tinyprof._sweep's, shared with
``tinyprof tune``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List

from tinyprof._sweep import halvings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # numpy's idle BLAS threads off our cores

CALLPATHS, ITERATIONS = 200, 100


def worker(args: argparse.Namespace) -> None:
    """Runs on every rank of one launch; rank 0 prints one JSON line."""
    from mpi4py import MPI

    import tinyprof
    from tinyprof import _sweep

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    _sweep.record(rank, CALLPATHS, args.iterations)
    counts = [int(a) for a in args.aggregators.split(",")]
    result = {"runs": _sweep.sweep(comm, args.outdir, counts, args.repeats, "bench"),
              "memory": []}
    if args.memory:
        for naggs in counts:
            tinyprof.Profiler("bench", outdir=args.outdir, aggregators=naggs)
            if rank == 0:
                result["memory"].append(_traced_flush(args.outdir))
            else:
                tinyprof.flush()
    if rank == 0:
        print(json.dumps(result))


def _traced_flush(outdir: str) -> Dict[str, float]:
    import gc
    import tracemalloc

    import tinyprof
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tinyprof.flush()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    first = sorted(f for f in os.listdir(outdir) if f.endswith(".tp"))[0]
    return {"peak_extra": peak - before, "written": os.path.getsize(os.path.join(outdir, first))}


def launch(nranks: int, aggregators: List[int], repeats: int, iterations: int,
           memory: bool) -> dict:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    outdir = tempfile.mkdtemp(prefix="tinyprof-bench-")
    cmd = [mpiexec, "-n", str(nranks), sys.executable, os.path.abspath(__file__), "--worker",
           "--outdir", outdir, "--repeats", str(repeats), "--iterations", str(iterations),
           "--aggregators", ",".join(map(str, aggregators))] + (["--memory"] if memory else [])
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900).stdout
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    return json.loads(out.strip().splitlines()[-1])


def _ms(run: dict) -> str:
    """Table cells: total, encode, sync, gather, write (maximum over ranks),
    own CPU mean and maximum over ranks, all in ms."""
    total, *parts, own_max, own_mean = run["median"]
    return " | ".join(f"{1e3 * t:.1f}" for t in (total, *parts, own_mean, own_max))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64, help="P of the aggregator sweep")
    parser.add_argument("--growth", default="4,8,16,32,64", help="P values of the growth table")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--outdir", help=argparse.SUPPRESS)
    parser.add_argument("--aggregators", default="", help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    columns = "total | encode | sync | gather | write | own CPU mean | own CPU max"

    sweep = launch(args.ranks, halvings(args.ranks), args.repeats, args.iterations, memory=True)
    print(f"Sweep at P = {args.ranks}, {CALLPATHS} callpaths x {args.iterations} iterations "
          f"per rank, median of {args.repeats} flushes, times in ms.\n")
    print(f"| A (files) | {columns} | bytes written | rank 0: peak extra memory / its file |")
    print("| ---: " * 10 + "|")
    for run, mem in zip(sweep["runs"], sweep["memory"]):
        print(f"| {run['A']} | {_ms(run)} | {run['bytes']:,} | "
              f"{mem['peak_extra'] / mem['written']:.2f} "
              f"({mem['peak_extra'] / 2**20:.2f} / {mem['written'] / 2**20:.2f} MiB) |")
    best = min(sweep["runs"], key=lambda r: r["median"][0])
    print(f"\nMinimum total at A = {best['A']} (P/{args.ranks // best['A']}).\n")

    print(f"Growth with P at fixed data per rank, default A = max(1, P // 16), "
          f"median of {args.repeats} flushes, times in ms.\n")
    print(f"| P | A | bytes written | {columns} | total / P |")
    print("| ---: " * 11 + "|")
    for nranks in map(int, args.growth.split(",")):
        run = launch(nranks, [max(1, nranks // 16)], args.repeats, args.iterations,
                     memory=False)["runs"][0]
        print(f"| {nranks} | {run['A']} | {run['bytes']:,} | {_ms(run)} | "
              f"{1e3 * run['median'][0] / nranks:.2f} |")


if __name__ == "__main__":
    main()
