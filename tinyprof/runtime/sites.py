"""MPI call sites (``Profiler(sites=K)``, docs/mpi.md#call-sites): libtinyprof_mpi
asks ``_frames``'s source function, instead of the core's, for the node of
each MPI call; it returns a site id for (current node, K innermost frames of
the program). ``unannotated.Unannotated`` names the site's callpath
``function (file:line)`` of the calling line, below that node.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from typing import List, Optional, Tuple

try:
    from . import _frames
except ImportError:         # not built: no sites, samples below the root
    _frames = None  # type: ignore[assignment]  # a module or None, which mypy cannot type

_TINYPROF = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def skipped_prefixes() -> Tuple[str, ...]:
    """Paths whose frames are never a site's nor a sample's: tinyprof's, mpi4py's."""
    spec = importlib.util.find_spec("mpi4py")
    mpi4py = [os.path.dirname(spec.origin) + os.sep] if spec is not None and spec.origin else []
    return (_TINYPROF, *mpi4py)


def sites_unavailable() -> Optional[str]:
    """Why MPI call sites cannot be read here, or None."""
    if not _frames:         # None: not built
        return "tinyprof's _frames extension was not built"
    if not _frames.sites_supported():
        return ("reading call sites needs CPython 3.11, 3.12 or 3.13 with the GIL "
                f"(this is {sys.version.split()[0]})")
    return None


def site_rules() -> Tuple[Tuple[str, bool], ...]:
    """(path prefix, skipped?) in order, the first that a file starts with
    deciding: a site is the program's line, not tinyprof's, mpi4py's nor
    the standard library's (threading's, when a pool's thread calls MPI),
    but may be an installed package's."""
    packages = [p + os.sep for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}]
    stdlib = [p + os.sep for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}]
    return (*((p, True) for p in skipped_prefixes()), *((p, False) for p in packages),
            *((p, True) for p in stdlib))


def site_source(core_source: int, depth: int) -> int:
    """A fresh site table for ``depth`` frames above the C core's source
    function (an address); the address of the source function that reads sites."""
    return _frames.sites_start(core_source, depth, site_rules())


def below(node: int) -> None:
    """Sites of threads with no open event go below event node ``node``."""
    _frames.sites_below(node)


def read() -> Tuple[List[Tuple[int, int, Tuple[str, ...]]], bool]:
    """(site id, parent node id, names outermost first) of every site so
    far, and whether the site table was full; none where sites cannot be read."""
    if _frames is None or not _frames.sites_supported():
        return [], False
    found, full = _frames.sites_read()
    return found, bool(full)
