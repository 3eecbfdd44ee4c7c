"""Where the tests find their tools, and what a missing one does: a skip on a
developer's machine, a failure under ``CI=1`` (.ci/run installs every tool,
so there a missing one is a broken set-up, not a reason to pass)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Union

import pytest

from tinyprof.runtime import sites

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# The environment's bin: mpiexec, mpicc and mpicxx of the mpich wheel, and tinyprof's console scripts.
BIN = Path(sys.executable).parent


def require(path: Optional[Union[str, Path]], what: str, install: str) -> str:
    """``path`` if it is an executable; otherwise skip the test (``install``
    says how to get ``what``), or fail it under ``CI=1``."""
    if path is not None and os.access(path, os.X_OK):
        return str(path)
    message = f"no {what} ({install})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: under CI=1 a missing tool fails the test")
    pytest.skip(message)


def script(name: str) -> str:
    """The path of one of tinyprof's console scripts (``tinyprof``, ``tinyprof-convert``)."""
    return str(BIN / name)


# Call sites read CPython 3.11-3.13's frames (docs/unannotated.md): elsewhere they are off, with a warning.
needs_sites = pytest.mark.skipif(sites.sites_unavailable() is not None,
                                 reason=str(sites.sites_unavailable()))
