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
to the script's line after its imports (the C program's after MPI_Init) (the
start-up; under tinyprof MPI is up by then, in a plain run the script's import
starts it), and of the whole run (start to exit: tinyprof's flush at exit
included); in wall time, and in CPU time (the rank's own to that line, the
process tree's for the whole run), which a busy machine inflates less.
``--base`` also runs another tree's tinyprof (its own package, this tree's
interpreter) for a before/after.
"""
from __future__ import annotations

import argparse
import os
import resource
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
print(time.time_ns(), time.process_time())
"""
C_APP = r"""
#include <mpi.h>
#include <stdio.h>
#include <time.h>
int main(int argc, char **argv) {
    struct timespec ts;
    MPI_Init(&argc, &argv);
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("%lld %f\n", (long long)ts.tv_sec * 1000000000 + ts.tv_nsec, (double)clock() / CLOCKS_PER_SEC);
    MPI_Finalize();
    return 0;
}
"""


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def once(cmd, env, cwd) -> tuple:
    """Seconds to the script's line after its imports, of the whole run, and
    the CPU seconds of both: the rank's own to that line, the whole process
    tree's (launcher included), which a loaded machine does not inflate."""
    t0, c0 = time.time_ns(), cpu()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=cwd).stdout
    t1, c1 = time.time_ns(), cpu()
    first, first_cpu = out.split()[:2]
    return (int(first) - t0) / 1e9, (t1 - t0) / 1e9, float(first_cpu), c1 - c0


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
                took = once(cmd, env, tmp)      # not in a tree: python -m finds the cwd's package first
                if run:                                     # the first run writes the .pyc files
                    times[key].append(took)
    print(f"median of {args.runs} runs, seconds; +: over the plain run of the same mode "
          "(python, or the binary without preload)")
    print(f"{'':36} {'wall':^34} {'CPU':^34}")
    print(f"{'mode':7} {'command':28}" + f" {'start-up':>9} {'+':>7} {'whole run':>10} {'+':>6}" * 2)
    for (mode, label), runs in times.items():
        plain = times[(mode, "python")]
        label = "./app" if (mode, label) == ("binary", "python") else label
        cells = ""
        for i in range(4):
            value = statistics.median(r[i] for r in runs)
            over = value - statistics.median(r[i] for r in plain)
            cells += f" {value:{9 + i % 2}.3f} {over:+{7 - i % 2}.3f}"
        print(f"{mode:7} {label:28}{cells}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
