"""``tinyprof show PROFILE``: a per-callpath summary across ranks."""
from __future__ import annotations

import argparse

from . import options


def register(commands: options.Commands) -> None:
    parser = commands.add_parser("show", help="print a per-callpath summary across ranks",
                                 description="Print min, mean and max across ranks of each "
                                             "callpath's time, and its slowest rank.")
    options.add_profile(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.profile import read
    from ..views.show import summary

    print(summary(read(args.profile), args.profile))
    return 0
