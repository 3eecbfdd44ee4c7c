"""What ``python -m tinyprof`` adds to a run's start (issue 35), side by side
with plain ``python``, on one rank:

    .venv/bin/python benchmarks/startup.py [--runs 11] [--base /work/main]

Four ways, interleaved run by run, each a fresh process:

- ``serial``: ``python app.py`` against ``python -m tinyprof app.py`` with no
  launcher (no MPI capture), ``app.py`` doing nothing;
- ``mpi``: the same under ``mpiexec -n 1`` (tinyprof initialises MPI and
  captures it), ``app.py`` importing ``mpi4py.MPI`` as any MPI script does.

A line gives the median over the runs of: the time from spawning the process
to the script's line after its imports (the start-up; under tinyprof MPI is
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
        times: dict = {k: [] for k in ways}
        for run in range(args.runs + 1):
            for key, (cmd, tree) in ways.items():
                env = dict(os.environ, PYTHONPATH=tree)
                env.pop("TINYPROF_MPI", None)
                env.pop("PYTHONDONTWRITEBYTECODE", None)    # as installed: compiled once, then cached
                took = once(cmd, env)
                if run:                                     # the first run writes the .pyc files
                    times[key].append(took)
    print(f"median of {args.runs} runs, seconds; +: over plain python of the same mode")
    print(f"{'mode':7} {'command':28} {'start-up':>9} {'+':>7} {'whole run':>10} {'+':>7}")
    for (mode, label), runs in times.items():
        start = statistics.median(r[0] for r in runs)
        whole = statistics.median(r[1] for r in runs)
        plain = times[(mode, "python")]
        p0 = statistics.median(r[0] for r in plain)
        p1 = statistics.median(r[1] for r in plain)
        print(f"{mode:7} {label:28} {start:9.3f} {start - p0:+7.3f} {whole:10.3f} {whole - p1:+7.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
