"""``tinyprof compare BASE NEW``: runs compared per callpath; with
``--fail-above PCT``, a regression gate (exit 1)."""
from __future__ import annotations

import argparse
import sys

from . import options
from .exit import echo


def register(commands: options.Commands) -> None:
    parser = commands.add_parser(
        "compare", help="compare runs per callpath; with --fail-above, a regression gate for CI",
        description="Compare the NEW run(s) against the BASE run(s) per callpath: time per rank "
                    "(exclusive by default), its change, a t-test's p-value, and the MPI time "
                    "and bytes when both sides recorded them; flagged regressions first. "
                    "With --fail-above PCT, exit status 1 when a callpath regressed by more than "
                    "PCT percent (naming it on stderr), else 0; bad input: status 2. "
                    "See docs/guide.md#comparing-runs-and-gating-regressions.")
    parser.add_argument("runs", nargs="*", metavar="BASE NEW",
                        help="one base and one new profile (output directory or any file of it)")
    parser.add_argument("--base", nargs="+", default=[], metavar="PROFILE",
                        help="several base runs (with --new instead of BASE NEW)")
    parser.add_argument("--new", nargs="+", default=[], metavar="PROFILE", help="several new runs")
    parser.add_argument("--fail-above", type=options.parse_percent, metavar="PCT",
                        help="exit 1 when a flagged regression exceeds PCT percent (a PCT below "
                             "--threshold lowers it)")
    parser.add_argument("--metric", default="time",
                        help="time (default) or a custom per-occurrence metric, summed per rank")
    parser.add_argument("--inclusive", action="store_true",
                        help="compare inclusive time instead of exclusive time")
    parser.add_argument("--threshold", type=options.parse_percent, default=options.THRESHOLD * 100,
                        metavar="PCT",
                        help=f"flag only changes beyond PCT percent (default {options.THRESHOLD * 100:g})")
    parser.add_argument("--floor", type=options.parse_percent, default=options.FLOOR * 100, metavar="PCT",
                        help=f"flag only changes of at least PCT percent of the base run's time "
                             f"(default {options.FLOOR * 100:g})")
    parser.add_argument("--limit", type=options.parse_count, default=0, metavar="N",
                        help="print at most N rows (default 0: all)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.compare import ONE_A_SIDE, compare
    from ..errors import FormatError
    from ..views import compare_text as compare_text

    pair = len(args.runs) == 2 and not (args.base or args.new)
    if not (pair or (not args.runs and args.base and args.new)):
        print("tinyprof compare: give BASE NEW, or --base PROFILE... --new PROFILE...", file=sys.stderr)
        return 2
    base, new = (args.runs[:1], args.runs[1:]) if args.runs else (args.base, args.new)
    threshold = args.threshold if args.fail_above is None else min(args.threshold, args.fail_above)
    try:
        frame = compare(base, new, metric=args.metric, inclusive=args.inclusive,
                        threshold=threshold / 100, floor=args.floor / 100)
    except FormatError:                   # a bad file: status 2, as in every command
        raise
    except ValueError as e:               # a metric the profiles do not hold, a bad threshold
        print(f"tinyprof compare: {e}", file=sys.stderr)
        return 2
    echo(compare_text.table(frame, args.limit or None))
    if args.fail_above is None:
        return 0
    if frame.attrs["runs"] == (1, 1):
        print(f"tinyprof compare: not gated: {ONE_A_SIDE}", file=sys.stderr)
    failed = compare_text.regressions(frame, args.fail_above)
    for line in failed:
        print(f"tinyprof compare: regressed by more than {args.fail_above:g}%: {line}", file=sys.stderr)
    return 1 if failed else 0
