"""The MPI data of a profile as tables: ``Profile.mpi``, ``.communicators``,
``.comm_matrix()``, ``.transport`` and ``.ucx`` (docs/mpi.md). The ``mpi`` sections are parsed on
first use, so that reading a profile costs nothing more for them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..format import mpi_section
from ..format.encoding import excerpt
from ..format.mpi_section import NONE
from ..format.reader import ParsedFile

Callpath = Tuple[str, ...]

MPI_COLUMNS = ["callpath", "rank", "comm", "op", "bucket", "size_min", "size_max",
               "calls", "bytes", "time"]
COMM_COLUMNS = ["comm", "size", "world_ranks", "created"]
TRANSPORT_COLUMNS = ["callpath", "rank", "op", "ucp_op", "protocol", "transport", "calls", "bytes"]
METRICS = ("bytes", "messages")


@dataclass
class MpiData:
    """The rows of all files, with callpaths and communicator names resolved."""

    recorded: bool                      # some file has an mpi section
    ops: List[Tuple[Callpath, int, str, str, int, int, int, int]]
    peers: List[Tuple[Callpath, int, str, int, int, int]]
    comms: Dict[str, Tuple[int, Tuple[int, ...], Optional[Callpath]]]
    transport: List[Tuple[Callpath, int, str, str, str, str, int, int]]
    ucx: Dict[int, str]                 # rank -> UCX state, ranks that recorded the transport view


def load(files: Sequence[ParsedFile]) -> MpiData:
    """Parse and check every file's ``mpi`` section (FormatError on a bad one)."""
    data = MpiData(False, [], [], {}, [], {})
    for f in files:
        payload = f.sections.get("mpi")
        if payload is None:
            continue
        h = f.header
        s = mpi_section.parse(payload, f.path, f.section_lines.get("mpi", 0), len(f.parents),
                              h.first_rank, h.rank_count, h.nranks)
        data.recorded = True
        path = [*f.paths, ()]                            # index NONE (-1): outside any event
        names = [c.name for c in s.comms] + [""]         # index NONE: no communicator
        for c in s.comms:
            created = None if c.created == NONE else path[c.created]
            data.comms.setdefault(c.name, (c.size, c.members, created))
        data.ops += [(path[line], rank, names[comm], op, k, calls, nbytes, t)
                     for rank, line, comm, op, k, calls, nbytes, t in s.ops]
        data.peers += [(path[line], rank, names[comm], peer, messages, nbytes)
                       for rank, line, comm, peer, messages, nbytes in s.peers]
        data.transport += [(path[r[1]], r[0], *r[2:]) for r in s.transport]
        data.ucx.update(s.ucx)
    return data


def table(data: MpiData, units_per_second: float) -> Any:
    """``Profile.mpi``: one row per (callpath, rank, comm, op, size bucket)."""
    import pandas as pd
    rows = [(path, rank, comm, op, k, *mpi_section.bucket_range(k), calls, nbytes,
             t / units_per_second) for path, rank, comm, op, k, calls, nbytes, t in data.ops]
    frame = pd.DataFrame(rows, columns=MPI_COLUMNS)
    return frame.astype({"rank": "int64", "bucket": "int64", "size_min": "int64",
                         "size_max": "int64", "calls": "int64", "bytes": "int64",
                         "time": "float64"})


def transport(data: MpiData) -> Any:
    """``Profile.transport``: one row per (callpath, rank, MPI op, UCP op,
    protocol, transport)."""
    import pandas as pd
    frame = pd.DataFrame(data.transport, columns=TRANSPORT_COLUMNS)
    return frame.astype({"rank": "int64", "calls": "int64", "bytes": "int64"})


def communicators(data: MpiData) -> Any:
    """``Profile.communicators``: name, size, world ranks (empty: each rank
    alone, as COMM_SELF), and the callpath that created it (None: predefined
    or outside any event)."""
    import pandas as pd
    rows = [(name, size, members, created)
            for name, (size, members, created) in sorted(data.comms.items())]
    return pd.DataFrame(rows, columns=COMM_COLUMNS).astype({"size": "int64"})


def matrix(data: MpiData, nranks: int, callpath: Optional[Sequence[str]] = None,
           comm: Optional[str] = None, metric: str = "bytes") -> np.ndarray:
    """``Profile.comm_matrix``: (P, P) int64, entry [i, j] the bytes (or
    messages) sent point-to-point by rank i to world rank j, within
    ``callpath`` and its descendants, on communicator ``comm`` (None: all)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {excerpt(metric)}")
    prefix = None if callpath is None else tuple(callpath)
    out = np.zeros((nranks, nranks), np.int64)
    for path, rank, name, peer, messages, nbytes in data.peers:
        if (prefix is None or path[:len(prefix)] == prefix) and (comm is None or name == comm):
            out[rank, peer] += messages if metric == "messages" else nbytes
    return out
