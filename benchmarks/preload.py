"""What the preloaded whole-program profile (docs/native.md, "Unchanged
binaries") adds per MPI call, with and without call sites:

    .venv/bin/python benchmarks/preload.py [--runs 5] [--calls 200000]

An unchanged C program, built with the wheel's mpicc (-O2 -rdynamic), makes
``--calls`` MPI_Allreduce of one int on MPI_COMM_SELF (no communication: the
wrapper's cost shows) from a function two frames below main, on one rank, and
prints the nanoseconds per call of its own loop. Four ways, interleaved run
by run: plain, preloaded, preloaded with --site-depth 1 and 4. A line gives
the median over the runs and its difference to the plain run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
BIN = os.path.join(TREE, ".venv", "bin")
LIB = os.path.join(TREE, "tinyprof", "libtinyprof_mpi.so")
APP = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) void reduce(int *x) { MPI_Allreduce(MPI_IN_PLACE, x, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF); }
__attribute__((noinline)) void step(int *x) { reduce(x); *x += 1; }

int main(int argc, char **argv) {
    long n = atol(argv[1]);
    int x = 0;
    struct timespec a, b;
    MPI_Init(&argc, &argv);
    for (long i = 0; i < 1000; i++) step(&x);      /* warm: the sites are made */
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) step(&x);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    MPI_Finalize();
    return 0;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "app.c"), "w") as f:
            f.write(APP)
        exe = os.path.join(tmp, "app")
        subprocess.run([os.path.join(BIN, "mpicc"), "-O2", "-rdynamic", os.path.join(tmp, "app.c"), "-o", exe],
                       check=True)
        launch = [os.path.join(BIN, "mpiexec"), "-n", "1", "env", f"TINYPROF_OUTDIR={os.path.join(tmp, 'p')}"]
        ways = {"plain": launch + [exe],
                "preloaded": launch + [f"LD_PRELOAD={LIB}", exe],
                "preloaded, --site-depth 1": launch + [f"LD_PRELOAD={LIB}", "TINYPROF_SITES=1", exe],
                "preloaded, --site-depth 4": launch + [f"LD_PRELOAD={LIB}", "TINYPROF_SITES=4", exe]}
        ns: dict = {k: [] for k in ways}
        for _ in range(args.runs):
            for key, cmd in ways.items():
                out = subprocess.run(cmd + [str(args.calls)], capture_output=True, text=True, check=True)
                ns[key].append(float(out.stdout.split()[0]))
    plain = statistics.median(ns["plain"])
    print(f"median of {args.runs} runs of {args.calls} MPI_Allreduce on MPI_COMM_SELF, ns per call")
    for key, values in ns.items():
        value = statistics.median(values)
        print(f"{key:28} {value:9.1f} {value - plain:+9.1f}")


if __name__ == "__main__":
    main()
