"""Hatchet: a GraphFrame in memory, or a file hatchet's own reader loads.

The GraphFrame's dataframe is indexed by ``(node, rank)`` with one hatchet
node per callpath and a row for every rank, also the ranks that never ran
the callpath (count 0). Columns: ``time`` (exclusive) and ``time (inc)`` in
seconds, ``count`` (recorded values), every custom metric, and ``name``.
``exc_metrics`` are ``time``, ``count`` and the inconsistent metrics.
With MPI capture, both also hold the MPI columns of :data:`MPI_EXCLUSIVE`
and :data:`MPI_INCLUSIVE` (hatchet's reader takes a column named ``(inc)``
for an inclusive metric).

The file is Caliper json-split, the format of hatchet's
``GraphFrame.from_caliper`` that keeps every rank; it holds the same rows.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Tuple, Union

import numpy as np

from ..analysis.profile import Profile
from ..analysis.values import MPI_VALUES, Aggregates, aggregate, as_profile, check_columns, mpi_per_node
from ..errors import ConvertError, excerpt
from . import _jsonsplit

if TYPE_CHECKING:                       # hatchet is imported when a function needs it
    import hatchet

ProfileOrPath = Union[Profile, str, "os.PathLike[str]"]
Callpath = Tuple[str, ...]
# Own columns of the GraphFrame and of the json-split file (hatchet renames some).
_COLUMNS = ("time", "time (inc)", "count", "name", "node", "rank", "nid", "path",
            _jsonsplit.RANK, _jsonsplit.TIME, _jsonsplit.TIME_INC)
MPI_EXCLUSIVE = tuple(f"mpi.{k}" for k in MPI_VALUES)          # mpi.time, mpi.bytes, mpi.calls
MPI_INCLUSIVE = tuple(f"mpi.{k} (inc)" for k in MPI_VALUES)


def to_hatchet(profile_or_path: ProfileOrPath, statistic: str = "sum") -> hatchet.GraphFrame:
    """A hatchet GraphFrame of the profile, values aggregated per (node, rank).

    ``statistic`` (``sum``, ``mean``, ``min`` or ``max``) aggregates the
    values of all executions and iterations; the exclusive ``time`` is the
    inclusive time minus the children's inclusive time on the same rank.
    Needs the ``tinyprof[hatchet]`` extra.

    With MPI capture (``profile.mpi_recorded``) each (node, rank) also gets
    ``mpi.time`` (seconds), ``mpi.bytes`` and ``mpi.calls``: the MPI calls
    made while that callpath was current, summed over communicators,
    operations and sizes (always sums, whatever ``statistic``); and
    ``mpi.time (inc)``, ``mpi.bytes (inc)``, ``mpi.calls (inc)`` over the node
    and its descendants. MPI calls outside any event have no node and are
    not in the GraphFrame (``profile.mpi`` has them, with callpath ``()``).
    """
    import hatchet
    import pandas as pd

    profile = as_profile(profile_or_path)
    mpi = _mpi_columns(profile)
    agg = aggregate(profile, statistic)
    try:
        graph, nodes = build_graph(profile.callpaths)
    except RecursionError:      # hatchet walks its graph by recursion, a Python frame per level
        raise ConvertError(f"profile {excerpt(profile.name)}: callpaths nested "
                           f"{max(map(len, profile.callpaths))} levels deep are more than hatchet can "
                           f"walk under the recursion limit of {sys.getrecursionlimit()} "
                           "(sys.setrecursionlimit raises it)") from None
    order = np.argsort([n._hatchet_nid for n in nodes], kind="stable")   # hatchet's row order
    index = pd.MultiIndex.from_product([[nodes[i] for i in order], range(profile.nranks)],
                                       names=["node", "rank"])
    columns = {"time": agg.time_exc, "time (inc)": agg.time_inc, "count": agg.count, **agg.metrics,
               **mpi}
    frame = pd.DataFrame({k: v[order].ravel() for k, v in columns.items()}, index=index)
    frame["name"] = np.repeat(np.array([nodes[i].frame["name"] for i in order], dtype=object),
                              profile.nranks)
    # Per-rank quantities are exclusive metrics, so that hatchet's cross-rank
    # reductions (drop_index_levels) apply to them; a consistent metric is not.
    exclusive = ["time", "count", *(k for k, c in profile.metrics if not c)]
    inclusive = ["time (inc)"]
    if mpi:
        exclusive += MPI_EXCLUSIVE
        inclusive += MPI_INCLUSIVE
    return hatchet.GraphFrame(graph, frame, exclusive, inclusive, metadata=_metadata(profile, agg))


def load_imbalance(gf: hatchet.GraphFrame, metric_column: str = "time") -> hatchet.GraphFrame:
    """Per node, how unevenly the ranks share ``metric_column``: what hatchet
    1.4's ``GraphFrame.load_imbalance`` gave, which llnl-hatchet no longer has.

    A new GraphFrame indexed by node, its metrics the mean over ranks (as
    ``gf.drop_index_levels()``), with a column ``<metric_column>.imbalance``:
    the maximum over the mean across all ranks of ``gf``'s (node, rank) rows,
    a rank that never ran the node counting 0 (NaN where the mean is 0).
    ``gf`` is left as it was.
    """
    out = gf.deepcopy()
    per_node = out.dataframe.groupby(level="node")[metric_column]
    mean, top = per_node.mean(), per_node.max()
    out.drop_index_levels()
    out.dataframe[f"{metric_column}.imbalance"] = (top / mean.where(mean != 0)).reindex(out.dataframe.index)
    return out


def build_graph(callpaths: Sequence[Callpath]) -> Tuple[hatchet.graph.Graph, List[hatchet.node.Node]]:
    """A hatchet Graph of the call tree and its Node of each callpath, numbered
    in hatchet's pre-order. Callpaths come parents first."""
    from hatchet.frame import Frame
    from hatchet.graph import Graph
    from hatchet.node import Node

    made: Dict[Callpath, Node] = {}
    roots = []
    for path in callpaths:
        parent = made.get(path[:-1])
        node = made[path] = Node(Frame({"name": path[-1], "type": "region"}), parent)
        if parent is None:
            roots.append(node)
        else:
            parent.add_child(node)
    graph = Graph(roots)
    graph.enumerate_traverse()
    return graph, [made[p] for p in callpaths]


def write(profile: Profile, path: str | os.PathLike[str], statistic: str = "sum") -> str:
    """Write the rows of :func:`to_hatchet` as json-split for ``GraphFrame.from_caliper``."""
    write_aggregates(profile, aggregate(profile, statistic), path)
    return os.fspath(path)


def write_aggregates(profile: Profile, agg: Aggregates, path: str | os.PathLike[str],
                     unit: str = "s") -> None:
    """The json-split file of already aggregated values (also CallFlow's
    input), times in ``unit``: "s", or "us" for CallFlow, whose views label
    every time in microseconds."""
    scale = {"s": 1.0, "us": 1e6}[unit]
    mpi = {k: v * scale if k.startswith("mpi.time") else v for k, v in _mpi_columns(profile).items()}
    ncallpaths, nranks = agg.count.shape
    values = [(_jsonsplit.RANK, np.tile(np.arange(nranks), ncallpaths)),
              (_jsonsplit.TIME, agg.time_exc.ravel() * scale),
              (_jsonsplit.TIME_INC, agg.time_inc.ravel() * scale),
              ("count", agg.count.ravel()),
              *((k, v.ravel()) for k, v in {**agg.metrics, **mpi}.items())]
    _jsonsplit.write(path, profile.callpaths, np.repeat(np.arange(ncallpaths), nranks), values,
                     _metadata(profile, agg, unit))


def _mpi_columns(profile: Profile) -> Dict[str, np.ndarray]:
    """The MPI columns, by name, of a profile with MPI capture (else none), once
    no custom metric has the name of an output column."""
    mpi = profile.mpi_recorded
    check_columns(profile, _COLUMNS + (MPI_EXCLUSIVE + MPI_INCLUSIVE if mpi else ()), "hatchet")
    return {f"mpi.{k}": v for k, v in mpi_per_node(profile).items()} if mpi else {}


def _metadata(profile: Profile, agg: Aggregates, unit: str = "s") -> Dict[str, Any]:
    return {"tinyprof.name": profile.name, "tinyprof.version": profile.version,
            "tinyprof.created": profile.created, "tinyprof.statistic": agg.statistic,
            "mpi.world.size": profile.nranks, "time.unit": unit}
