"""CallFlow: its ``caliper_json`` input, and CallFlow run with the fix it needs.

CallFlow reads a directory in which every ``*.json`` but ``config.json`` is
one run in Caliper json-split with an ``mpi.rank`` column: the file that
:mod:`.hatchet` writes, one row per (callpath, rank).

CallFlow 1.3.0 (the last release) needs hatchet 1.4.1, pandas < 2 and numpy
< 2, which llnl-hatchet and today's pandas and numpy replace: it runs in a
virtual environment of its own (:func:`environment`, created on first use
under the user's cache directory), so that nothing else is downgraded.
There :func:`run` applies the fixes of :mod:`._callflow_fixes` (it cannot
process any input with today's hatchet, shows an empty Super Graph and CCT,
and nothing at all on a port other than 5000), then drives CallFlow's own
command line. Writing the input needs neither CallFlow nor hatchet.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from typing import Optional

from ..analysis.profile import Profile
from ..analysis.values import aggregate
from ..errors import ConvertError
from .hatchet import write_aggregates

VERSION = "1.3.0"
# What CallFlow 1.3.0 works with (docs/convert.md): hatchet 1.4.1 breaks under pandas >= 2
# and numpy >= 2, and CallFlow itself under pandas >= 2.
REQUIREMENTS = (f"callflow=={VERSION}", "flask_socketio", "hatchet==1.4.1", "pandas>=1.5.3,<2", "numpy<2")
_NEWEST_PYTHON = (3, 11)            # pandas < 2 has no wheels for a newer Python
_FIXES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_callflow_fixes.py")
_READY = ".tinyprof-ready"          # written last: holds the requirements installed


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


def environment_path() -> str:
    """Where CallFlow's environment lives: ``TINYPROF_CALLFLOW_ENV``, else
    ``$XDG_CACHE_HOME/tinyprof/callflow-<version>`` (``~/.cache`` without XDG_CACHE_HOME)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("TINYPROF_CALLFLOW_ENV") or os.path.join(cache, "tinyprof", f"callflow-{VERSION}")


def environment() -> str:
    """The Python of CallFlow's own virtual environment (:func:`environment_path`),
    created on first use with ``python -m venv`` and ``pip install`` of
    :data:`REQUIREMENTS`, one line on stderr saying so. Several processes may
    ask at once: one installs, the others wait. Raises ConvertError, naming
    the directory and the step, when it cannot be made."""
    path = environment_path()
    python = os.path.join(path, "bin", "python")
    if _ready(path):
        return python
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _ready(path):
                _create(path, python)
    except OSError as e:                # a directory we cannot write, a Python that is not there
        where = f"{e.filename}: " if e.filename else ""
        raise ConvertError(f"cannot set up CallFlow's environment in {path}: {where}{e.strerror or e}") \
            from None
    return python


def _ready(path: str) -> bool:
    try:
        with open(os.path.join(path, _READY), encoding="utf-8") as f:
            return f.read() == " ".join(REQUIREMENTS)
    except OSError:
        return False


def _create(path: str, python: str) -> None:
    print(f"tinyprof: installing CallFlow {VERSION} with hatchet 1.4.1, pandas<2 and numpy<2 into "
          f"{path} (once; a few minutes)", file=sys.stderr, flush=True)
    shutil.rmtree(path, ignore_errors=True)           # a half-made one from an interrupted install
    for argv in ([_base_python(), "-I", "-m", "venv", path],
                 [python, "-I", "-m", "pip", "install", "-q", "--disable-pip-version-check", *REQUIREMENTS]):
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode:
            lines = [line for line in done.stdout.splitlines() if line.strip()] or ["no output"]
            raise ConvertError(f"cannot set up CallFlow's environment in {path}: "
                               f"{' '.join(argv[2:5])} failed: {lines[-1].strip()}")
    with open(os.path.join(path, _READY), "w", encoding="utf-8") as f:
        f.write(" ".join(REQUIREMENTS))


def _base_python() -> str:
    """The interpreter of CallFlow's environment: this one if old enough, else a python3.11."""
    chosen = os.environ.get("TINYPROF_CALLFLOW_PYTHON")
    if chosen:
        return chosen
    if sys.version_info[:2] <= _NEWEST_PYTHON:
        return sys.executable
    found = shutil.which("python3.11")
    if found is None:
        raise ConvertError(f"CallFlow {VERSION} needs Python 3.11 or older (its pandas < 2 has no wheels "
                           "for a newer one): install python3.11 or set TINYPROF_CALLFLOW_PYTHON to one")
    return found


def run(directory: str | os.PathLike[str], process_only: bool = False,
        host: Optional[str] = None, port: Optional[int] = None) -> None:
    """Process the runs in ``directory`` with CallFlow (results go to
    ``directory/.callflow``), then serve CallFlow's web app on ``host:port``
    (CallFlow's defaults: ``CALLFLOW_APP_HOST``/``CALLFLOW_APP_PORT`` or
    127.0.0.1:5000) unless ``process_only``. CallFlow runs in its own
    environment (:func:`environment`); to serve, this process becomes
    CallFlow's server (``os.execv``), so that Ctrl-C or a signal stops it.
    """
    python = environment()
    # -I: neither PYTHONPATH nor the script's own directory (tinyprof/converters, which
    # holds a callflow.py) comes before CallFlow's environment.
    argv = [python, "-I", _FIXES, os.fspath(directory)]
    if host is not None:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    try:
        if process_only:
            if subprocess.run(argv + ["--process-only"]).returncode:
                raise ConvertError(f"CallFlow could not process {os.fspath(directory)} (its output above)")
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(python, argv)
    except OSError as e:                # its Python went away (a removed base interpreter)
        raise ConvertError(f"cannot run CallFlow's environment {environment_path()}: {e.strerror or e} "
                           "(remove it: the next command makes it anew)") from None
