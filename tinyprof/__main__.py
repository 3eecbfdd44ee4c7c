"""Zero-code runs: ``python -m tinyprof [-o DIR] [--frequency N] app.py [args]``.

Runs ``app.py`` as ``python app.py [args]`` would (the same ``sys.argv``,
``__main__`` and exit status) under one root region named after the script,
with MPI communication recorded (``mpi=True``) and the profile flushed at
exit. Under an MPI launcher it initialises MPI (mpi4py) before the script
runs, so that the communicators the script makes get their stable names.
"""
from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys
from typing import List, Optional

from .annotate import Event
from .runtime.profiler import Profiler
from .runtime.world import launched_rank


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tinyprof",
        description="Profile an unannotated Python script: one region named after it, "
                    "plus its MPI communication per communicator, operation, size and peer.")
    p.add_argument("-o", "--outdir", help="output directory (default: <script name>.tinyprof)")
    p.add_argument("--name", help="profile name (default: the script's file name without .py)")
    p.add_argument("--frequency", type=float, default=0,
                   help="snapshot interval in seconds (default: 0, none)")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return p


def main(argv: Optional[List[str]] = None) -> None:
    opts = _parser().parse_args(argv)
    script = opts.script
    if not os.path.isfile(script):
        sys.exit(f"python -m tinyprof: no such script: {script}")
    region = os.path.basename(script)
    name = opts.name or os.path.splitext(region)[0]
    if launched_rank() is not None:
        try:
            importlib.import_module("mpi4py.MPI")   # MPI up before the profiler and the script
        except ImportError:
            pass                    # the profiler warns that it records no MPI data
    Profiler(name, opts.frequency, outdir=opts.outdir, mpi=True)
    sys.argv = [script, *opts.args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    with Event(region):
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
