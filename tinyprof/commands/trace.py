"""``tinyprof critical-path PROFILE`` and ``tinyprof wait-states PROFILE``:
a traced run analysed (docs/trace.md)."""
from __future__ import annotations

import argparse
import sys

from . import options
from .exit import echo

COMMANDS = (
    ("critical-path", "print the critical path of a traced run (trace=True)",
     "Print the critical path through a run recorded with trace mode: its length "
     "against the wall time, and its time per rank and callpath, largest first. "
     "See docs/trace.md."),
    ("wait-states", "print the time ranks waited in MPI calls (trace=True)",
     "Print, per callpath and rank, the time spent waiting for a late sender, a late "
     "receiver, or the last arrival at a collective or barrier. See docs/trace.md."))


def register(commands: options.Commands) -> None:
    for name, text, description in COMMANDS:
        parser = commands.add_parser(name, help=text, description=description)
        options.add_profile(parser)
        parser.add_argument("--limit", type=options.parse_count, default=20, metavar="N",
                            help="print at most N rows (default 20; 0: all)")
        if name == "critical-path":
            parser.add_argument("--segments", action="store_true",
                                help="print the path's segments in time order instead")
        parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.profile import read
    from ..views import trace_text

    profile = read(args.profile)
    limit = args.limit or None          # 0: all, as in every command
    try:
        if args.command == "critical-path":
            text = trace_text.critical_path(profile, limit, args.segments)
        else:
            text = trace_text.wait_states(profile, limit)
    except ValueError as e:           # recorded without trace=True
        print(f"tinyprof: {e}", file=sys.stderr)
        return 1
    echo(text)
    return 0
