"""The MPI data of a profile as tables: ``Profile.mpi``, ``.communicators``,
``.comm_matrix()``, ``.transport`` and ``.ucx`` (docs/mpi.md), and the sums
that ``tinyprof mpi`` and the report print (:func:`group`,
:func:`transport_rows`, :func:`ucx_states`). The ``mpi`` sections are parsed on
first use, so that reading a profile costs nothing more for them.

The sums are exact: calls, bytes and time (integer nanoseconds) summed over
every rank and row not grouped by."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, Set, Tuple, Union

import numpy as np

from ..errors import ConvertError, excerpt
from ..format import mpi_section
from ..format.mpi_section import NONE
from ..format.parsed import ParsedFile
from .callpaths import Spec, Tree

Callpath = Tuple[str, ...]

MPI_COLUMNS = ["callpath", "rank", "comm", "op", "bucket", "size_min", "size_max",
               "calls", "bytes", "time"]
COMM_COLUMNS = ["comm", "size", "world_ranks", "created"]
TRANSPORT_COLUMNS = ["callpath", "rank", "op", "ucp_op", "protocol", "transport", "calls", "bytes"]
METRICS = ("bytes", "messages")
KEYS = ("callpath", "comm", "op", "bucket", "rank", "transport")   # what rows can be grouped by
DEFAULT_BY = ("callpath", "comm", "op", "bucket")
_FIELD = {"callpath": 0, "rank": 1, "comm": 2, "op": 3, "bucket": 4}   # in an op row

# One row of ``tinyprof mpi``: its key (values of the --by fields) and calls, bytes, time in ns.
Row = Tuple[tuple, int, int, int]


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


def matrix(data: MpiData, nranks: int, inside: Optional[Set[Callpath]] = None,
           comm: Optional[str] = None, metric: str = "bytes") -> np.ndarray:
    """``Profile.comm_matrix``: (P, P) int64, entry [i, j] the bytes (or
    messages) sent point-to-point by rank i to world rank j, summed over the
    rows of the callpaths ``inside`` (None: all), on communicator ``comm``
    (None: all)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {excerpt(metric)}")
    out = np.zeros((nranks, nranks), np.int64)
    for path, rank, name, peer, messages, nbytes in data.peers:
        if (inside is None or path in inside) and (comm is None or name == comm):
            out[rank, peer] += messages if metric == "messages" else nbytes
    return out


class Source(Protocol):
    """What the sums read of a ``Profile`` (this module never imports
    profile.py, which imports it)."""

    name: str
    callpaths: List[Callpath]

    @property
    def mpi_data(self) -> MpiData: ...


def group(profile: Source, by: Sequence[str] = DEFAULT_BY,
          callpaths: Union[Spec, Sequence[Spec]] = (), comms: Sequence[str] = ()) -> List[Row]:
    """The MPI calls of ``profile`` summed over ranks and rows per distinct
    value of the ``by`` fields (of :data:`KEYS` but ``transport``), in key
    order: ``(key, calls, bytes, time in the profile's unit)``. ``callpaths``
    keeps the calls made in those regions and below them (each a callpath as
    ``Profile.callpath`` reads it: ``"a<b"``, ``"a/b"`` or a tuple of names);
    ``comms`` keeps the calls on those communicators (so no completion call,
    which has none). A callpath or communicator not in the profile is a
    :class:`ConvertError`."""
    unknown = [k for k in by if k not in KEYS or k == "transport"]
    if unknown:
        raise ConvertError(f"cannot group by {unknown[0]!r}: use {', '.join(KEYS[:-1])}")
    data = profile.mpi_data
    for name in comms:
        if name not in data.comms:
            raise ConvertError(f"no communicator {name!r} in profile {profile.name!r} "
                               f"(it has {', '.join(sorted(data.comms)) or 'none'})")
    inside = _within(profile, callpaths)
    keep = set(comms)
    sums: Dict[tuple, List[int]] = {}
    for row in data.ops:
        if inside is not None and row[0] not in inside:
            continue
        if keep and row[2] not in keep:
            continue
        acc = sums.setdefault(tuple(row[_FIELD[k]] for k in by), [0, 0, 0])
        acc[0] += row[5]
        acc[1] += row[6]
        acc[2] += row[7]
    return [(key, c, b, t) for key, (c, b, t) in sorted(sums.items())]


def totals(profile: Source) -> Tuple[int, int, int]:
    """The calls, bytes and time (in the profile's unit) of every MPI call
    the profile recorded, summed over all ranks (the whole of what
    :func:`group` splits)."""
    ops = profile.mpi_data.ops
    return sum(r[5] for r in ops), sum(r[6] for r in ops), sum(r[7] for r in ops)


def transport_rows(profile: Source, callpaths: Union[Spec, Sequence[Spec]] = (),
                   by_rank: bool = False) -> List[Tuple[tuple, int, int]]:
    """The transport view summed over ranks (but with ``by_rank``) per
    (callpath, [rank,] MPI op, UCP op, protocol, transport): ``(key, calls,
    bytes)``, most bytes first (ties in key order), in the regions
    ``callpaths`` and below (all if none; as for :func:`group`).
    :class:`ConvertError` when the profile holds no transport view."""
    data = profile.mpi_data
    if not data.ucx:
        raise ConvertError(f"profile {profile.name!r} holds no transport view "
                           "(record with Profiler(ucx=True) or TINYPROF_UCX=1)")
    inside = _within(profile, callpaths)
    sums: Dict[tuple, List[int]] = {}
    for path, rank, op, ucp, protocol, link, calls, nbytes in data.transport:
        if inside is None or path in inside:
            acc = sums.setdefault((path, *((rank,) if by_rank else ()), op, ucp, protocol, link), [0, 0])
            acc[0] += calls
            acc[1] += nbytes
    return [(key, c, b) for key, (c, b) in sorted(sorted(sums.items()), key=lambda kv: -kv[1][1])]


def ucx_states(profile: Source) -> Dict[str, List[int]]:
    """The ranks that recorded the transport view in each UCX state
    (``used``, ``unused``, ``unavailable``), in rank order."""
    states: Dict[str, List[int]] = {}
    for rank, state in sorted(profile.mpi_data.ucx.items()):
        states.setdefault(state, []).append(rank)
    return states


def _within(profile: Source, callpaths: Union[Spec, Sequence[Spec]]) -> Optional[Set[Callpath]]:
    """The callpaths in the regions ``callpaths`` or below them (None: all)."""
    if not isinstance(callpaths, str) and not callpaths:
        return None
    try:
        return Tree(profile.callpaths, f"profile {profile.name!r}").within(callpaths)
    except KeyError as e:
        raise ConvertError(e.args[0]) from None
