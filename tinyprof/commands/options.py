"""What the parsers need, kept light: building ``tinyprof --help`` loads no layer.

The constants are the parser's copies of those the layers define and check
(``tests/test_imports.py`` asserts that they agree): the choices, defaults and
help texts of the options."""
from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, List

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
