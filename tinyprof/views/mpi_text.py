"""The text tables of ``tinyprof mpi``: MPI calls grouped as mpisee-through
groups them, the communicators, and the transport view (``--by transport``).
Needs neither pandas nor hatchet. The sums are :mod:`tinyprof.analysis.mpi_tables`';
this module prints them (the time summed in integer nanoseconds, so the table
is exact to its last printed digit).
"""
from __future__ import annotations

from typing import Dict, Literal, Optional, Sequence

from ..analysis.mpi_tables import DEFAULT_BY, KEYS, Row, Spec, group, totals, transport_rows, ucx_states
from ..analysis.profile import PER_SECOND, Profile
from ..errors import ConvertError
from ..format.mpi_section import encode_members
from .text import UNITS as TIME_UNITS
from .text import align, printable, shown

# group, transport_rows and ucx_states are analysis.mpi_tables', named here
# for views/report_page.py and demo.py, which still read them through this module.
__all__ = ["KEYS", "DEFAULT_BY", "SORTS", "Row", "group", "table", "transport_rows", "ucx_states",
           "transport", "communicators", "size_range"]

_SORT_COLUMN: Dict[str, Literal[1, 2, 3]] = {"time": 3, "bytes": 2, "calls": 1}   # in a Row
SORTS = tuple(_SORT_COLUMN)
_HEAD = {"callpath": "callpath", "comm": "comm", "op": "op", "bucket": "size", "rank": "rank"}
BYTE_UNITS = ("", "K", "M", "G", "T", "P", "E")       # binary: 1K = 1024 bytes


def table(profile: Profile, rows: Sequence[Row], by: Sequence[str] = DEFAULT_BY,
          sort: str = "time", limit: Optional[int] = None) -> str:
    """``rows`` (from :func:`group`) as a text table under a line of the
    profile's totals: the ``by`` fields, then calls, bytes, time, average
    bytes per call and the share of the profile's whole MPI time, largest
    ``sort`` first (ties in key order), at most ``limit`` rows. Times are in
    the unit (s, ms, us, ns) of the profile's whole MPI time."""
    if sort not in SORTS:
        raise ConvertError(f"cannot sort by {sort!r}: use {', '.join(SORTS)}")
    calls, nbytes, total = totals(profile)
    seconds = 1 / PER_SECOND[profile.unit]
    unit, scale = next(((u, s) for u, s in TIME_UNITS if total * seconds >= s), TIME_UNITS[-1])
    head = (f"{shown(profile.name)}: {profile.nranks} ranks, {calls} MPI calls, {nbytes} bytes, "
            f"{total * seconds / scale:.3f} {unit} in MPI (summed over ranks)")
    listed = sorted(rows, key=lambda r: -r[_SORT_COLUMN[sort]])[:limit]   # stable: ties in key order
    lines = [(*(_HEAD[k] for k in by), "calls", "bytes", f"time ({unit})", "avg bytes/call",
              "% MPI time")]
    for key, c, b, t in listed:
        lines.append((*(_cell(k, v) for k, v in zip(by, key)), str(c), str(b),
                      f"{t * seconds / scale:.3f}", f"{b / c:.1f}",
                      f"{100 * t / total if total else 0:.2f}"))
    numbers = [i for i, k in enumerate(by) if k == "rank"] + list(range(len(by), len(lines[0])))
    out = [head, *align(lines, right=numbers)]
    hidden = len(rows) - len(listed)
    if hidden:
        out.append(f"({hidden} more {'row' if hidden == 1 else 'rows'} not shown: --limit)")
    return "\n".join(out)


def transport(profile: Profile, callpaths: Sequence[Spec] = (), by_rank: bool = False,
              limit: Optional[int] = None) -> str:
    """The transport view (:func:`~tinyprof.analysis.mpi_tables.transport_rows`)
    as a text table: per callpath (and rank), MPI op, UCP op, protocol and
    transport, the calls and bytes, most bytes first, under a line saying on
    which ranks UCX carried the MPI traffic."""
    rows = transport_rows(profile, callpaths, by_rank)
    states = ucx_states(profile)
    said = {"used": "UCX carried the MPI traffic of rank(s)",
            "unused": "UCX carried none of the MPI traffic of rank(s)",
            "unavailable": "this MPI does not use UCX on rank(s)"}
    where = "; ".join(f"{said[s]} {encode_members(r)}" for s, r in states.items())
    out = [f"{shown(profile.name)}: {where}"]
    # MPICH's own shared memory and its CVAR: not said under another MPI (unknown: said)
    if "unused" in states and str(profile.metadata.get("mpi_library", "MPICH")).startswith("MPICH"):
        out.append("  (a rank made no MPI call through UCX, or MPICH moved its messages to ranks of "
                   "the same node through its own shared memory: MPIR_CVAR_NOLOCAL=1 routes them "
                   "through UCX)")
    head = ("callpath", *(("rank",) if by_rank else ()), "op", "ucp op", "protocol", "transport",
            "calls", "bytes", "avg bytes/call")
    lines = [head] + [(_cell("callpath", key[0]), *map(str, key[1:-4]), key[-4] or "-", key[-3],
                       key[-2] or _unclassified(key[-3]), key[-1] or "-", str(c), str(b), f"{b / c:.1f}")
                      for key, c, b in rows[:limit]]
    out += align(lines, right=[i for i, h in enumerate(head) if h in ("rank", "calls", "bytes",
                                                                        "avg bytes/call")])
    hidden = len(rows) - len(lines) + 1
    if hidden:
        out.append(f"({hidden} more {'row' if hidden == 1 else 'rows'} not shown: --limit)")
    return "\n".join(out)


def _unclassified(ucp_op: str) -> str:
    """What an empty protocol means: a receive's is the sender's choice."""
    return "(by sender)" if ucp_op.endswith("recv") or ucp_op == "am_recv_data" else "(not known)"


def communicators(profile: Profile) -> str:
    """The communicators as a text table: name, size, world ranks in rank
    order (``self`` for COMM_SELF and its kind: each rank alone) and the
    callpath that created it (``-``: predefined or outside any event)."""
    lines = [("comm", "size", "ranks", "created")]
    for name, (size, members, created) in sorted(profile.mpi_data.comms.items()):
        lines.append((name, str(size), encode_members(members) if members else "self",
                      _cell("callpath", created or ())))
    return "\n".join(align(lines, right=(1,)))


def size_range(bucket: int) -> str:
    """Bucket ``k`` as its byte range: ``0``, else ``[2^(k-1), 2^k)`` in binary
    units, ``[1K, 2K)`` for 1024..2047 bytes."""
    return "0" if bucket == 0 else f"[{_binary(bucket - 1)}, {_binary(bucket)})"


def _binary(exponent: int) -> str:
    """2**exponent in binary units: ``512``, ``1K``, ``16E``."""
    return f"{1 << exponent % 10}{BYTE_UNITS[exponent // 10]}"


def _cell(key: str, value) -> str:
    if key == "callpath":
        return "<".join(map(printable, value)) if value else "-"   # (): outside any event
    if key == "comm":
        return value or "-"                                          # completion calls
    if key == "bucket":
        return size_range(value)
    return str(value)

