"""The run metadata recorded automatically (docs/api.md, "Run metadata").

Rank 0 builds it once, at its first write (a flush or a snapshot), from what
``Session.start`` took (the start time, every rank's host name) and what it
reads then: the command line, the MPI library, the versions, the git commit
of the application's directory. Nothing here may raise into or block the
application: what cannot be read is left out. C++ twin:
``native/include/tinyprof/detail/metadata.hpp``.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
import time
from typing import Dict, Optional, Sequence

from .._version import __version__
from ..format import hostlist
from ..format.meta_section import Value

_COMMIT = re.compile("[0-9a-f]{40}|[0-9a-f]{64}")
_REF = re.compile("refs/[A-Za-z0-9_./+@-]{1,200}")
_WHITESPACE = " \t\r\n\v\f"


def automatic(start: float, hosts: Sequence[str], mpi_library: Optional[str]) -> Dict[str, Value]:
    """The automatic keys of a run started at ``start`` (seconds since the
    epoch) on ranks whose host names are ``hosts`` (rank order);
    ``mpi_library`` is ``MPI_Get_library_version``'s text, None without MPI."""
    nodes = sorted(set(hosts))
    out: Dict[str, Value] = {
        "start": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
        "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "hostnames": ",".join(nodes),
        "nranks": len(hosts),
        "nodes": len(nodes),
        "python": sys.version.split()[0],     # platform.python_version()'s, without its import
        "tinyprof": __version__,
        "writer": "python",
    }
    rank_hosts = hostlist.encode(hosts)
    if rank_hosts:
        out["rank_hosts"] = rank_hosts
    if mpi_library is not None:
        out["mpi_library"] = mpi_library.split("\n")[0].strip(_WHITESPACE)
    commit = git_commit(app_directory())
    if commit:
        out["git"] = commit
    return out


def app_directory() -> str:
    """The directory of the main script, else the working directory."""
    script = sys.argv[0] if sys.argv else ""
    return os.path.dirname(os.path.abspath(script)) if script and os.path.isfile(script) \
        else os.getcwd()


def git_commit(directory: str) -> Optional[str]:
    """The commit checked out in the git work tree holding ``directory`` (the
    nearest ``.git`` above it, a worktree's ``.git`` file followed), read from
    ``HEAD``, the refs and ``packed-refs``: no git process, nothing to wait
    for. None when there is none or anything is unreadable."""
    try:
        d = os.path.abspath(directory)
        while True:
            dotgit = os.path.join(d, ".git")
            if os.path.isdir(dotgit):
                gitdir = dotgit
                break
            if os.path.isfile(dotgit):
                link = _first_line(dotgit)
                if not link.startswith("gitdir: "):
                    return None
                gitdir = os.path.join(d, link[len("gitdir: "):])
                break
            parent = os.path.dirname(d)
            if parent == d:
                return None
            d = parent
        common = gitdir
        if os.path.isfile(os.path.join(gitdir, "commondir")):
            common = os.path.join(gitdir, _first_line(os.path.join(gitdir, "commondir")))
        head = _first_line(os.path.join(gitdir, "HEAD"))
        for _ in range(5):              # a symbolic ref names a ref, which may name another
            if _COMMIT.fullmatch(head):
                return head
            ref = head[len("ref: "):] if head.startswith("ref: ") else ""
            if not _REF.fullmatch(ref) or ".." in ref:
                return None
            loose = [p for p in (os.path.join(gitdir, ref), os.path.join(common, ref))
                     if os.path.isfile(p)]
            if not loose:
                return _packed(os.path.join(common, "packed-refs"), ref)
            head = _first_line(loose[0])
        return None
    except (OSError, ValueError):       # UnicodeDecodeError is a ValueError
        return None


def _first_line(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(4096).decode().split("\n")[0].strip(_WHITESPACE)


def _packed(path: str, ref: str) -> Optional[str]:
    """``ref``'s commit in a ``packed-refs`` file, if listed."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        for raw in f:
            commit, _, name = raw.decode().strip(_WHITESPACE).partition(" ")
            if name == ref and _COMMIT.fullmatch(commit):
                return commit
    return None
