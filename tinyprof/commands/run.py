"""``tinyprof run -n N ./app [args]``: an unchanged MPI program profiled (docs/native.md)."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from . import options

# the package's directory, where pip builds the MPI libraries
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def register(commands: options.Commands) -> None:
    parser = commands.add_parser(
        "run", help="profile an unchanged MPI program (C, C++, Fortran) under mpiexec",
        description="Run PROGRAM on N ranks with tinyprof's MPI library preloaded: the whole "
                    "program is profiled under one region named after it, from MPI_Init to "
                    "MPI_Finalize, with its MPI calls. Runs `mpiexec [MPIEXEC_ARGS] -n N env "
                    "LD_PRELOAD=... PROGRAM ARGS` and exits with its status. See docs/native.md.")
    parser.add_argument("-n", dest="nranks", type=options.parse_count, required=True, metavar="N",
                        help="number of ranks")
    parser.add_argument("-o", "--outdir", metavar="DIR", help="output directory (default: NAME.tinyprof)")
    parser.add_argument("--name", help="profile name (default: the program's file name)")
    parser.add_argument("--site-depth", type=options.parse_count, default=0, metavar="K",
                        help="charge each MPI call to the K innermost frames of the program that "
                             "made it (call sites, at most 16; default 0: to the program's region); "
                             "read back as function (file:line) with addr2line when the binary is there")
    parser.add_argument("--mpiexec", metavar="PATH",
                        help="the MPI launcher (default: mpiexec beside this Python, else on PATH)")
    options.add_mpiexec_args(parser)
    parser.add_argument("program", metavar="PROGRAM", help="the program to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    lib = os.path.join(PACKAGE, "libtinyprof_mpi.so")
    missing = [p for p in (lib, os.path.join(PACKAGE, "libtinyprof_whole.so")) if not os.path.exists(p)]
    if missing:
        from ..runtime.capture import not_built
        reasons = "\n".join(not_built(p) for p in missing)
        print(f"tinyprof run: nothing would be profiled (docs/mpi.md):\n{reasons}", file=sys.stderr)
        return 1
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = args.mpiexec or (beside if os.access(beside, os.X_OK) else shutil.which("mpiexec") or "mpiexec")
    preload = ":".join(p for p in (lib, os.environ.get("LD_PRELOAD")) if p)
    settings = [f"LD_PRELOAD={preload}", f"TINYPROF_NAME={args.name or os.path.basename(args.program)}"]
    if args.outdir:
        settings.append(f"TINYPROF_OUTDIR={os.path.abspath(args.outdir)}")
    if args.site_depth:
        settings.append(f"TINYPROF_SITES={args.site_depth}")
    cmd = [mpiexec, *options.mpiexec_args(args.mpiexec_args), "-n", str(args.nranks), "env", *settings,
           args.program, *args.args]
    try:
        return subprocess.call(cmd)
    except OSError as e:
        print(f"tinyprof run: {mpiexec}: {e.strerror or e}", file=sys.stderr)
        return 127
