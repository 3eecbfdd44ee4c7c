"""``tinyprof callflow PROFILE``: a profile opened in CallFlow, in an environment of its own."""
from __future__ import annotations

import argparse

from . import options
from .exit import echo


def register(commands: options.Commands) -> None:
    parser = commands.add_parser(
        "callflow", help="open a profile in CallFlow (in an environment of its own)",
        description="Convert a profile to CallFlow's input, process it with CallFlow "
                    "(with the fixes CallFlow 1.3.0 needs) and serve CallFlow's "
                    "web app. CallFlow runs in a virtual environment of its own, made on "
                    "first use (TINYPROF_CALLFLOW_ENV, else ~/.cache/tinyprof/callflow-1.3.0). "
                    "See docs/convert.md.")
    parser.add_argument("profile", metavar="PROFILE", nargs="?",
                        help="a profile's output directory, or any one file of it")
    parser.add_argument("--setup", action="store_true",
                        help="only make CallFlow's environment (if missing), then exit")
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="CallFlow's data directory (default: NAME.callflow)")
    options.add_statistic(parser)
    parser.add_argument("--process-only", action="store_true",
                        help="process the data, then exit instead of serving the app")
    parser.add_argument("--host", help="address to serve on (default: CALLFLOW_APP_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to serve on (default: CALLFLOW_APP_PORT or 5000)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.profile import read
    from ..converters import callflow
    from ..errors import ConvertError

    if args.setup:
        echo(f"tinyprof: CallFlow's environment is ready: {callflow.environment()}")
        return 0
    if args.profile is None:
        raise ConvertError("callflow: give a PROFILE (or --setup)")
    profile = read(args.profile)
    directory = args.output or f"{callflow.run_name(profile)}.callflow"
    echo(f"tinyprof: wrote {callflow.write(profile, directory, args.statistic)}")
    callflow.run(directory, process_only=args.process_only, host=args.host, port=args.port)
    return 0
