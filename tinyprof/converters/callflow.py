"""CallFlow: its ``caliper_json`` input, and CallFlow run with the fix it needs.

CallFlow reads a directory in which every ``*.json`` but ``config.json`` is
one run in Caliper json-split with an ``mpi.rank`` column: the file that
:mod:`.hatchet` writes, one row per (callpath, rank).

CallFlow 1.3.0 (the last release) cannot process any input with today's
hatchet, and its web app shows an empty Super Graph and CCT, and nothing at
all on a port other than 5000: :func:`run` applies the fixes of
:mod:`._callflow_fixes` in this process, then drives CallFlow's own command line.
"""
from __future__ import annotations

import os
import re
import sys
from typing import List, Optional

from ..analysis.profile import Profile
from ..analysis.values import aggregate
from . import _callflow_fixes
from .hatchet import write_aggregates


def write(profile: Profile, directory: str | os.PathLike[str], statistic: str = "sum") -> str:
    """Write ``profile`` as one CallFlow run into ``directory``, times in
    microseconds (CallFlow's views say "μs" whatever the data); returns the file written."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{run_name(profile)}.json")
    write_aggregates(profile, aggregate(profile, statistic), path, unit="us")
    return path


def run_name(profile: Profile) -> str:
    """The run's name in CallFlow, which cuts a file name at its first dot."""
    return re.sub(r"[^\w-]", "_", profile.name) or "profile"


def run(directory: str | os.PathLike[str], process_only: bool = False,
        host: Optional[str] = None, port: Optional[int] = None) -> None:
    """Process the runs in ``directory`` with CallFlow (results go to
    ``directory/.callflow``), then serve CallFlow's web app on ``host:port``
    (CallFlow's defaults: ``CALLFLOW_APP_HOST``/``CALLFLOW_APP_PORT`` or
    127.0.0.1:5000) unless ``process_only``. Needs the ``tinyprof[callflow]`` extra.
    """
    _callflow_fixes.apply()
    from server import main as app  # CallFlow's command line lives in package "server"

    if host is not None:
        app.CALLFLOW_APP_HOST = host
    if port is not None:
        app.CALLFLOW_APP_PORT = port
    args = ["callflow", "--data_path", os.fspath(directory), "--profile_format", "caliper_json"]
    _main(app, args + ["--process", "--reset"])
    if not process_only:
        _main(app, args)


def _main(app, argv: List[str]) -> None:
    saved = sys.argv
    sys.argv = argv                     # CallFlow parses sys.argv itself
    try:
        app.main()
    finally:
        sys.argv = saved
