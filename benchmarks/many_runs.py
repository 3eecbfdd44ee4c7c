"""Many runs read and compared: ``read_many`` on one thread and on all, and
``compare`` of the first half against the second.

    .venv/bin/python benchmarks/many_runs.py [--runs 1000] [--ranks 8] [--callpaths 200] [--repeats 3]

Each run is one file of RANKS ranks, CALLPATHS callpaths (a tree 3 deep)
of 10 iterations each, written by the flush's own assembler, with run
metadata (``start``: an hour apart, ``git``: a commit per 10 runs); with
``--mpi``, an MPI section too (an Allreduce per callpath and rank). Prints the
median time of each (docs/performance.md, "Many runs").
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import tinyprof
from tinyprof.format import meta_section, mpi_section
from tinyprof.format.encoding import Header
from tinyprof.format.output_dir import file_name, write_atomic
from tinyprof.runtime import assemble
from tinyprof.runtime.collect import LocalEvent


def callpaths(n: int):
    """n callpaths, parents first: main, main<r0..., main<ri<sj..."""
    paths = [("main",)]
    i = 0
    while len(paths) < n:
        paths.append(("main", f"r{i}"))
        paths.extend(("main", f"r{i}", f"s{j}") for j in range(min(9, n - len(paths))))
        i += 1
    return paths[:n]


def write_runs(where: str, runs: int, ranks: int, ncallpaths: int, mpi: bool = False) -> list:
    rng = np.random.default_rng(0)
    paths = callpaths(ncallpaths)
    world = [mpi_section.Communicator("COMM_WORLD", ranks, tuple(range(ranks)), mpi_section.NONE)]
    out = []
    for k in range(runs):
        events = [[LocalEvent(p, 1, True, rng.integers(10**5, 10**6, 10), np.array([0, 0]), {}, {})
                   for p in paths] for _ in range(ranks)]
        header = Header(name="run", nranks=ranks, first_rank=0, rank_count=ranks, file_index=0,
                        file_count=1, metrics=[])
        meta = meta_section.encode({"start": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1.7e9 + 3600 * k)),
                                    "nranks": ranks, "git": f"{k // 10:040x}"})
        sections = [("meta", meta)]
        if mpi:             # on each line (callpath, the ranks' order), in less time than the region's
            sections.append(("mpi", mpi_section.encode(world, [
                (r, line, 0, "Allreduce", mpi_section.bucket(8), calls, 8 * calls, t)
                for r in range(ranks) for line, (calls, t) in enumerate(zip(
                    rng.integers(1, 100, len(paths)).tolist(), rng.integers(10**4, 10**5, len(paths)).tolist()))], [])))
        directory = os.path.join(where, f"run{k}")
        os.makedirs(directory)
        write_atomic(os.path.join(directory, file_name("run", 0, 1)),
                     assemble.build_file(header, events, [1] * ranks, sections))
        out.append(directory)
    return out


def median_s(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def parser_of(doc: str) -> argparse.ArgumentParser:
    """The runs' shape and the repeats, shared with benchmarks/history.py."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--callpaths", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mpi", action="store_true", help="with an MPI section in each run")
    return parser


def main() -> None:
    args = parser_of(__doc__).parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        paths = write_runs(scratch, args.runs, args.ranks, args.callpaths, args.mpi)
        profiles = tinyprof.read_many(paths)            # imports and caches warm
        one = median_s(lambda: tinyprof.read_many(paths, threads=1), args.repeats)
        every = median_s(lambda: tinyprof.read_many(paths), args.repeats)
        half = len(profiles) // 2
        compared = median_s(lambda: tinyprof.compare(profiles[:half], profiles[half:]), args.repeats)
    print(f"{args.runs} runs of {args.ranks} ranks, {args.callpaths} callpaths, 10 values each; "
          f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores")
    print("| read_many, 1 thread | read_many, all cores | compare (half vs half, read) |")
    print("| ---: | ---: | ---: |")
    print(f"| {one:.2f} s | {every:.2f} s | {compared:.2f} s |")


if __name__ == "__main__":
    main()
