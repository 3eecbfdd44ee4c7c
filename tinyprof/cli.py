"""The ``tinyprof`` and ``tinyprof-convert`` command lines.

``tinyprof show PROFILE`` prints a per-callpath summary across ranks;
``tinyprof callflow PROFILE`` opens a profile in CallFlow;
``mpiexec -n P tinyprof tune`` recommends an aggregator count (``tune.py``);
``tinyprof-convert PROFILE --to FORMAT -o OUT`` converts a profile for
Hatchet, CallFlow or pandas (see docs/convert.md). Bad input ends with a
one-line message naming the file and exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import _command, tune
from ._version import __version__
from .converters import TARGETS
from .converters._values import STATISTICS


def _show(args: argparse.Namespace) -> int:
    from ._profile import read
    from ._summary import summary

    print(summary(read(args.profile)))
    return 0


def _callflow(args: argparse.Namespace) -> int:
    from ._profile import read
    from .converters import callflow

    profile = read(args.profile)
    directory = args.output or f"{callflow.run_name(profile)}.callflow"
    _echo(f"tinyprof: wrote {callflow.write(profile, directory, args.statistic)}")
    callflow.run(directory, process_only=args.process_only, host=args.host, port=args.port)
    return 0


def _convert(args: argparse.Namespace) -> int:
    from ._profile import read
    from .converters import convert

    _echo(convert(read(args.profile), args.target, args.output, args.statistic))
    return 0


def _echo(text: str) -> None:
    """Print ``text``, which names paths the user gave: a path of non-UTF-8 bytes
    holds lone surrogates, which a strict stdout cannot encode: those print as ``\\udcff``."""
    try:
        print(text, flush=True)
    except UnicodeEncodeError:
        print(text.encode("utf-8", "backslashreplace").decode("utf-8"), flush=True)


def _add_statistic(parser: argparse.ArgumentParser, scope: str = "") -> None:
    parser.add_argument("--statistic", choices=STATISTICS, default="sum",
                        help="how the values of all executions and iterations of a callpath "
                             f"on a rank are aggregated{scope} (default: sum)")


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
    flow = commands.add_parser(
        "callflow", help="open a profile in CallFlow (needs tinyprof[callflow])",
        description="Convert a profile to CallFlow's input, process it with CallFlow "
                    "(with the compatibility fix CallFlow 1.3.0 needs) and serve CallFlow's "
                    "web app. See docs/convert.md.")
    flow.add_argument("profile", metavar="PROFILE",
                      help="a profile's output directory, or any one file of it")
    flow.add_argument("-o", "--output", metavar="DIR",
                      help="CallFlow's data directory (default: NAME.callflow)")
    _add_statistic(flow)
    flow.add_argument("--process-only", action="store_true",
                      help="process the data, then exit instead of serving the app")
    flow.add_argument("--host", help="address to serve on (default: CALLFLOW_APP_HOST or 127.0.0.1)")
    flow.add_argument("--port", type=int, help="port to serve on (default: CALLFLOW_APP_PORT or 5000)")
    flow.set_defaults(run=_callflow)
    tuner = commands.add_parser(
        "tune", help="recommend an aggregator count for this machine (run under mpiexec)",
        description="Run the aggregator sweep (paper Fig. 6) on the ranks this is launched "
                    "on, print the flush time per aggregator count and recommend one for "
                    "TINYPROF_AGGREGATORS. Usage: mpiexec -n P tinyprof tune ...")
    tune.add_arguments(tuner)
    tuner.set_defaults(run=tune.run)
    return parser


def _convert_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyprof-convert",
        description="Convert a tinyprof profile for Hatchet, CallFlow or pandas. "
                    "hatchet: a Caliper json-split file for hatchet's GraphFrame.from_caliper; "
                    "callflow: a directory for `callflow --data_path DIR --profile_format "
                    "caliper_json`; csv: one row per rank, execution and iteration. "
                    "See docs/convert.md.")
    parser.add_argument("--version", action="version", version=f"tinyprof {__version__}")
    parser.add_argument("profile", metavar="PROFILE",
                        help="a profile's output directory, or any one file of it")
    parser.add_argument("--to", dest="target", required=True, choices=TARGETS, metavar="FORMAT",
                        help=f"output format: {', '.join(TARGETS)}")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output file (a directory for callflow)")
    _add_statistic(parser, " for hatchet and callflow; csv keeps every value")
    parser.set_defaults(run=_convert)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``tinyprof`` console script."""
    return _command.run("tinyprof", _parser().parse_args(argv))


def convert_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``tinyprof-convert`` console script."""
    return _command.run("tinyprof-convert", _convert_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
