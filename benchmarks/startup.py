"""What ``python -m tinyprof`` adds to a run's start (issue 35), side by side
with plain ``python``, on one rank:

    .venv/bin/python benchmarks/startup.py [--runs 11] [--base /work/main]

Four ways, interleaved run by run, each a fresh process:

- ``serial``: ``python app.py`` against ``python -m tinyprof app.py`` with no
  launcher (no MPI capture), ``app.py`` doing nothing;
- ``mpi``: the same under ``mpiexec -n 1`` (tinyprof initialises MPI and
  captures it), ``app.py`` importing ``mpi4py.MPI`` as any MPI script does;
- ``binary``: an unchanged C program (``MPI_Init``, ``MPI_Finalize``) under
  ``mpiexec -n 1``, plain and with libtinyprof_mpi preloaded (the whole-program
  profile, docs/native.md), when the wheel's ``mpicc`` is there.

A line gives the median over the runs of: the time from spawning the process
to the script's line after its imports (the C program's after MPI_Init) (the start-up; under tinyprof MPI is
up by then, in a plain run the script's import starts it), and of the whole run (start to
exit: tinyprof's flush at exit included). ``--base`` also runs another tree's
tinyprof (its own package, this tree's interpreter) for a before/after.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
BIN = os.path.join(TREE, ".venv", "bin")
APP = """import time
{imports}
print(time.time_ns())
"""
C_APP = r"""
#include <mpi.h>
#include <stdio.h>
#include <time.h>
int main(int argc, char **argv) {
    struct timespec ts;
    MPI_Init(&argc, &argv);
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("%lld\n", (long long)ts.tv_sec * 1000000000 + ts.tv_nsec);
    MPI_Finalize();
    return 0;
}
"""


def once(cmd, env) -> tuple:
    """(seconds to the script's line after its imports, seconds of the whole run)."""
    t0 = time.time_ns()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    t1 = time.time_ns()
    first = int(out.split()[0])
    return (first - t0) / 1e9, (t1 - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--base", help="another tinyprof tree to compare with (before)")
    args = ap.parse_args()
    trees = {"this tree": TREE, **({"base": args.base} if args.base else {})}
    python = os.path.join(BIN, "python")
    with tempfile.TemporaryDirectory() as tmp:
        serial, mpi = os.path.join(tmp, "serial.py"), os.path.join(tmp, "mpi.py")
        with open(serial, "w") as f:
            f.write(APP.format(imports=""))
        with open(mpi, "w") as f:
            f.write(APP.format(imports="from mpi4py import MPI"))
        ways = {}
        for mode, app, launch in (("serial", serial, []),
                                  ("mpi", mpi, [os.path.join(BIN, "mpiexec"), "-n", "1"])):
            ways[(mode, "python")] = (launch + [python, app], TREE)
            for label, tree in trees.items():
                out = os.path.join(tmp, f"out-{mode}-{len(ways)}")
                ways[(mode, f"-m tinyprof ({label})")] = (
                    launch + [python, "-m", "tinyprof", "-o", out, app], tree)
        mpicc = os.path.join(BIN, "mpicc")
        if os.path.exists(mpicc):
            with open(os.path.join(tmp, "app.c"), "w") as f:
                f.write(C_APP)
            exe = os.path.join(tmp, "app")
            subprocess.run([mpicc, "-O2", os.path.join(tmp, "app.c"), "-o", exe], check=True)
            lib = os.path.join(TREE, "tinyprof", "libtinyprof_mpi.so")
            launch = [os.path.join(BIN, "mpiexec"), "-n", "1"]
            ways[("binary", "python")] = (launch + [exe], TREE)      # the plain run of its mode
            ways[("binary", "LD_PRELOAD")] = (launch + ["env", f"LD_PRELOAD={lib}",
                                                        f"TINYPROF_OUTDIR={os.path.join(tmp, 'c')}", exe], TREE)
        times: dict = {k: [] for k in ways}
        for run in range(args.runs + 1):
            for key, (cmd, tree) in ways.items():
                env = dict(os.environ, PYTHONPATH=tree)
                env.pop("TINYPROF_MPI", None)
                env.pop("PYTHONDONTWRITEBYTECODE", None)    # as installed: compiled once, then cached
                took = once(cmd, env)
                if run:                                     # the first run writes the .pyc files
                    times[key].append(took)
    print(f"median of {args.runs} runs, seconds; +: over the plain run of the same mode "
          "(python, or the binary without preload)")
    print(f"{'mode':7} {'command':28} {'start-up':>9} {'+':>7} {'whole run':>10} {'+':>7}")
    for (mode, label), runs in times.items():
        label = "./app" if (mode, label) == ("binary", "python") else label
        start = statistics.median(r[0] for r in runs)
        whole = statistics.median(r[1] for r in runs)
        plain = times[(mode, "python")]
        p0 = statistics.median(r[0] for r in plain)
        p1 = statistics.median(r[1] for r in plain)
        print(f"{mode:7} {label:28} {start:9.3f} {start - p0:+7.3f} {whole:10.3f} {whole - p1:+7.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
