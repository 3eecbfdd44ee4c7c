"""The ``tinyprof`` and ``tinyprof-convert`` command lines, one module per command.

``tinyprof show PROFILE`` prints a per-callpath summary across ranks;
``tinyprof report PROFILE -o report.html`` writes the HTML report;
``tinyprof mpi PROFILE`` prints its MPI calls as mpisee-through does;
``tinyprof pop PROFILE`` its POP efficiencies per callpath (docs/pop.md);
``tinyprof compare BASE NEW`` compares runs per callpath and, with
``--fail-above PCT``, gates regressions (exit 1);
``tinyprof run -n N ./app [args]`` profiles an unchanged MPI binary (docs/native.md);
``tinyprof critical-path PROFILE`` and ``tinyprof wait-states PROFILE``
analyse a traced run (docs/trace.md);
``tinyprof callflow PROFILE`` opens a profile in CallFlow;
``mpiexec -n P tinyprof tune`` recommends an aggregator count (``tune.py``);
``tinyprof-convert PROFILE --to FORMAT -o OUT`` converts a profile for
Hatchet, CallFlow, pandas, Perfetto or pprof (see docs/convert.md). Bad input ends with a
one-line message naming the file and exit status 2, never a traceback (``exit.py``).

Each module registers its command's arguments and imports what the command
runs inside its ``run``: building the parsers loads no layer, so ``tinyprof
--help`` loads no numpy (tests/test_imports.py).
"""
from __future__ import annotations

import argparse
from typing import List, Optional

from .._version import __version__
from . import callflow, compare, convert, exit, mpi, pop, report, run, show, trace, tune

# In the order of ``tinyprof --help``.
COMMANDS = (show, report, mpi, pop, compare, callflow, trace, run, tune)


def parser() -> argparse.ArgumentParser:
    """The parser of ``tinyprof``."""
    top = argparse.ArgumentParser(
        prog="tinyprof", description="Always-on, annotation-based profiling for MPI applications.")
    top.add_argument("--version", action="version", version=f"tinyprof {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(commands)
    return top


def convert_parser() -> argparse.ArgumentParser:
    """The parser of ``tinyprof-convert``."""
    top = argparse.ArgumentParser(
        prog="tinyprof-convert",
        description="Convert a tinyprof profile for Hatchet, CallFlow, pandas, Perfetto or pprof. "
                    "hatchet: a Caliper json-split file for hatchet's GraphFrame.from_caliper; "
                    "callflow: a directory for `callflow --data_path DIR --profile_format "
                    "caliper_json`; csv: one row per rank, execution and iteration; perfetto: the "
                    "timeline of a traced profile as Chrome trace-event JSON for ui.perfetto.dev; "
                    "pprof: a gzipped profile.proto for go tool pprof, Pyroscope or speedscope. "
                    "See docs/convert.md.")
    top.add_argument("--version", action="version", version=f"tinyprof {__version__}")
    convert.add_arguments(top)
    return top


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``tinyprof`` console script."""
    return exit.run("tinyprof", parser().parse_args(argv))


def convert_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``tinyprof-convert`` console script."""
    top = convert_parser()
    args = top.parse_args(argv)
    if args.table != "values" and args.target != "csv":
        top.error(f"--table {args.table} needs --to csv")
    return exit.run("tinyprof-convert", args)
