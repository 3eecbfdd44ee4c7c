"""``mpiexec -n P tinyprof tune``: an aggregator count recommended for this
machine (the sweep is ``tinyprof/tune.py``, also ``python -m tinyprof.tune``)."""
from __future__ import annotations

import argparse

from . import options


def register(commands: options.Commands) -> None:
    # the sweep's options are its own, shared with python -m tinyprof.tune: tune.py
    # keeps its top light, so building this parser loads no layer
    from .. import tune

    parser = commands.add_parser(
        "tune", help="recommend an aggregator count for this machine (run under mpiexec)",
        description="Run the aggregator sweep (paper Fig. 6) on the ranks this is launched "
                    "on, print the flush time per aggregator count and recommend one for "
                    "TINYPROF_AGGREGATORS. Usage: mpiexec -n P tinyprof tune ...")
    tune.add_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import tune

    return tune.run(args)
