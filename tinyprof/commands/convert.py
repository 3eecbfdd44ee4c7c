"""``tinyprof-convert PROFILE --to FORMAT -o OUT``: a profile for Hatchet,
CallFlow, pandas, Perfetto or pprof (docs/convert.md)."""
from __future__ import annotations

import argparse

from . import options
from .exit import echo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_profile(parser)
    parser.add_argument("--to", dest="target", required=True, choices=options.TARGETS, metavar="FORMAT",
                        help=f"output format: {', '.join(options.TARGETS)}")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output file (a directory for callflow)")
    options.add_statistic(parser, " for hatchet and callflow; csv keeps every value, pprof sums")
    parser.add_argument("--table", choices=("values", "mpi"), default="values",
                        help="for csv: every value (default), or the MPI calls (profiles "
                             "recorded with MPI capture)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.profile import read
    from ..converters import convert

    echo(convert(read(args.profile), args.target, args.output, args.statistic, args.table))
    return 0
