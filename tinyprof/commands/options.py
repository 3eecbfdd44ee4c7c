"""What the parsers need, kept light: building ``tinyprof --help`` loads no layer.

The constants are the parser's copies of those the layers define and check
(``tests/test_imports.py`` asserts that they agree): the choices, defaults and
help texts of the options."""
from __future__ import annotations

import argparse
import math
import os
import shlex
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:
    # what add_subparsers returns: each command module adds its parser to it
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

THRESHOLD, FLOOR = 0.05, 0.01                           # analysis.compare
STATISTICS = ("sum", "mean", "min", "max")              # analysis.values
KEYS = ("callpath", "comm", "op", "bucket", "rank", "transport")   # analysis.mpi_tables
DEFAULT_BY = ("callpath", "comm", "op", "bucket")       # analysis.mpi_tables
SORTS = ("time", "bytes", "calls")                     # views.mpi_text
TARGETS = ("hatchet", "callflow", "csv", "perfetto", "pprof")      # converters


def parse_percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (0, 5, 12.5, ...)")
    return value


def parse_count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0, 1, 2, ...)")
    return int(text)


def parse_by_keys(text: str) -> List[str]:
    keys = text.split(",")
    for key in keys:
        if key not in KEYS:
            raise argparse.ArgumentTypeError(f"{key!r} is not one of {','.join(KEYS)}")
    return keys


def add_profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", metavar="PROFILE",
                        help="a profile's output directory, or any one file of it")


def add_statistic(parser: argparse.ArgumentParser, scope: str = "") -> None:
    parser.add_argument("--statistic", choices=STATISTICS, default="sum",
                        help="how the values of all executions and iterations of a callpath "
                             f"on a rank are aggregated{scope} (default: sum)")


# Options for the MPI launcher (`tinyprof run`, `python -m tinyprof.demo --run`): --mpiexec-args,
# else this variable, so that a site sets e.g. --oversubscribe once for every launch.
MPIEXEC_ARGS = "TINYPROF_MPIEXEC_ARGS"
MPIEXEC_ARGS_HELP = ("options for the MPI launcher, split as a shell would, e.g. "
                     f"--mpiexec-args='--oversubscribe --bind-to none' (default: ${MPIEXEC_ARGS})")


def add_mpiexec_args(parser: argparse.ArgumentParser) -> None:
    # written with '=' when it starts with a dash: argparse takes a lone '--oversubscribe' as an option
    parser.add_argument("--mpiexec-args", metavar="ARGS", help=MPIEXEC_ARGS_HELP)


def mpiexec_args(given: Optional[str]) -> List[str]:
    """The launcher's options: ``given`` (--mpiexec-args), else $TINYPROF_MPIEXEC_ARGS, split
    as a shell would; an unbalanced quote ends the command with a message."""
    text = os.environ.get(MPIEXEC_ARGS, "") if given is None else given
    try:
        return shlex.split(text)
    except ValueError as e:
        where = "--mpiexec-args" if given is not None else MPIEXEC_ARGS
        raise SystemExit(f"tinyprof: {where}={text!r}: {e}") from None
