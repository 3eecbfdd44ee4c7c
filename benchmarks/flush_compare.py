"""The flush at one P and one aggregator, side by side: this tree's Python
flush, another tree's (a baseline checkout with its own .venv) and the C++
one (benchmarks/flush_native.cpp, built from this tree's header).

    .venv/bin/python benchmarks/flush_compare.py --base /work/base [--ranks 16] [--runs 5]

Same workload as benchmarks/flush.py (200 callpaths x 100 iterations per
rank, every value kept). Each run launches the three one after the other
(order: base, this tree, C++); each launch times ``--repeats`` flushes
(slowest rank, median). Prints each run and the median over the runs, and
the ratios of the medians: alternating the launches run after run keeps a
noisy machine's load changes from favouring one side.
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

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
CALLPATHS, ITERATIONS = 200, 100

PYTHON_RUN = """
import json, sys
sys.path.insert(0, 'benchmarks')
import flush
run = flush.launch({ranks}, [{aggregators}], {repeats}, {iterations}, False)['runs'][0]
print(json.dumps({{'median': run['median'][0], 'range': run['range']}}))
"""


def python_flush(tree: str, args: argparse.Namespace) -> dict:
    """benchmarks/flush.py's launch in ``tree``, with that tree's .venv."""
    code = PYTHON_RUN.format(ranks=args.ranks, aggregators=args.aggregators,
                             repeats=args.repeats, iterations=args.iterations)
    out = subprocess.run([os.path.join(tree, ".venv", "bin", "python"), "-c", code], cwd=tree,
                         check=True, capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1")).stdout
    return json.loads(out.strip().splitlines()[-1])


def build_native() -> str:
    bin_dir = os.path.dirname(sys.executable)
    exe = os.path.join(TREE, "native", "build", "flush_native")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    subprocess.run([os.path.join(bin_dir, "mpicxx"), "-std=c++17", "-O2", "-Wall", "-Wextra",
                    "-Werror", "-I", os.path.join(TREE, "native", "include"),
                    os.path.join(HERE, "flush_native.cpp"), "-o", exe], check=True)
    return exe


def native_flush(exe: str, args: argparse.Namespace) -> dict:
    outdir = tempfile.mkdtemp(prefix="tinyprof-bench-")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    try:
        out = subprocess.run([mpiexec, "-n", str(args.ranks), exe, outdir, str(CALLPATHS),
                              str(args.iterations), str(args.aggregators), str(args.repeats)],
                             check=True, capture_output=True, text=True, timeout=900).stdout
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="baseline tree (with its own .venv)")
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--aggregators", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    args = parser.parse_args()
    exe = build_native()
    sides = {"base": lambda: python_flush(args.base, args),
             "python": lambda: python_flush(TREE, args),
             "c++": lambda: native_flush(exe, args)}
    medians = {name: [] for name in sides}
    print(f"P = {args.ranks}, A = {args.aggregators}, {CALLPATHS} callpaths x {args.iterations} "
          f"iterations per rank; per run: median of {args.repeats} flushes (slowest rank), s\n")
    print("| run | " + " | ".join(sides) + " |")
    print("| ---: " * (len(sides) + 1) + "|")
    for k in range(args.runs):
        for name, run in sides.items():
            medians[name].append(run()["median"])
        print(f"| {k + 1} | " + " | ".join(f"{m[-1]:.3f}" for m in medians.values()) + " |")
    overall = {name: statistics.median(m) for name, m in medians.items()}
    print("| median | " + " | ".join(f"{v:.3f}" for v in overall.values()) + " |")
    print(f"\npython / base = {overall['python'] / overall['base']:.2f}, "
          f"python / c++ = {overall['python'] / overall['c++']:.2f}")


if __name__ == "__main__":
    main()
