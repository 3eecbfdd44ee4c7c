"""The ``tinyprof`` command line.

``tinyprof show PROFILE`` prints a per-callpath summary across ranks. Bad
input ends with a one-line message naming the file and exit status 2, never a
traceback.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ._format import FormatError
from ._version import __version__


def _show(args: argparse.Namespace) -> int:
    from ._profile import read
    from ._summary import summary

    print(summary(read(args.profile)))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyprof", description="Always-on, annotation-based profiling for MPI applications.")
    parser.add_argument("--version", action="version", version=f"tinyprof {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    show = commands.add_parser("show", help="print a per-callpath summary across ranks",
                               description="Print min, mean and max across ranks of each "
                                           "callpath's time, and its slowest rank.")
    show.add_argument("profile", metavar="PROFILE",
                      help="a profile's output directory, or any one file of it")
    show.set_defaults(run=_show)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``tinyprof`` console script."""
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except FormatError as e:
        print(f"tinyprof: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:         # `tinyprof show ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
