"""The POP efficiency metrics per callpath (docs/pop.md): ``Profile.pop``
and, over the snapshots of a run, ``pop_history``.

Everything is computed at read time from what every profile with MPI capture
holds: each rank's inclusive time per callpath and the MPI time the capture
library charged to that callpath and the ones below it. Useful time is the
difference. The metrics are those of the POP Centre of Excellence, and the
split of load balance across and within nodes is TALP's.
"""
from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import excerpt
from ..format import hostlist
from .callpaths import Spec, Tree
from .sums import PER_SECOND, inclusive, mpi_exclusive, parent_rows, segments, tree_order
from .trace import ideal_inclusive

Callpath = Tuple[str, ...]
Hosts = Union[str, Mapping[int, str], Sequence[str]]
Columns = Dict[str, Any]        # a name -> the list of callpaths, or a numpy array

COLUMNS = ["callpath", "ranks", "runtime", "useful_mean", "useful_max", "load_balance",
           "communication_efficiency", "parallel_efficiency"]
HOST_COLUMNS = ["hosts", "load_balance_in", "load_balance_out"]
TRACE_COLUMNS = ["ideal_runtime", "serialization_efficiency", "transfer_efficiency"]


class PopError(ValueError):
    """The profile cannot give POP metrics: recorded without MPI capture, or
    no snapshots kept. Its message is one line, fit for a command's output."""


def no_mpi_message(profile: Any) -> str:
    return (f"profile {excerpt(profile.name)} holds no MPI data: the POP metrics need the time "
            "in MPI calls (record with Profiler(mpi=True) or TINYPROF_MPI=1)")


def per_rank(profile: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (callpath, rank) of a ``Profile``, as in its ``callpaths``: the
    number of values recorded, the inclusive time and the inclusive MPI time
    (seconds). PopError without MPI capture."""
    if not profile.mpi_recorded:
        raise PopError(no_mpi_message(profile))
    shape = (len(profile.callpaths), profile.nranks)
    index = {path: i for i, path in enumerate(profile.callpaths)}
    count = np.zeros(shape, np.int64)
    inc = np.zeros(shape, np.int64)
    for f in profile.parsed:
        row, rank, first, n = segments(f, index)
        count[row, rank] = n
        if len(first):
            inc[row, rank] = np.add.reduceat(f.values.times, first)
    parents = parent_rows(profile.callpaths)
    mpi = inclusive(mpi_exclusive(profile.mpi_data.ops, profile.callpaths, profile.nranks)["time"],
                    parents)
    waiting = sampled_waits(profile.callpaths)
    if waiting.any():
        # The capture charges a call to its site, a sibling of the sampled
        # frames, so below a frame the MPI time is what its samples in MPI
        # calls stand for; where the capture charged any, it is exact.
        sampled = inclusive(np.where(waiting[:, None], inc, 0), parents)
        mpi = np.where(mpi > 0, mpi, sampled)
    # summed in ns as integers, so that useful time subtracts exactly
    scale = PER_SECOND[profile.unit]
    return count, inc / scale, mpi / scale


SAMPLED_FRAME = re.compile(r".* \([^()]*:[0-9]+\)\Z", re.S)
SAMPLED_WAIT = re.compile(r"MPI_[A-Za-z_]+\Z")


def sampled_waits(callpaths: Sequence[Callpath]) -> np.ndarray:
    """Which callpaths are samples of a thread inside an MPI call: an
    ``MPI_<method>`` below a sampled frame ``function (file:line)``
    (docs/unannotated.md). An event cannot be one: events hang only below
    events."""
    return np.array([len(p) > 1 and SAMPLED_WAIT.match(p[-1]) is not None
                     and SAMPLED_FRAME.match(p[-2]) is not None for p in callpaths], bool)


def host_ids(hosts: Optional[Hosts], nranks: int) -> Optional[np.ndarray]:
    """Each rank's host as a small integer (ranks on one host share it), from
    a mapping rank -> host name, a sequence of one name per rank, or a
    string as ``rank_hosts`` and ``--hosts`` write them (``"n1*64,n2*64"``);
    None for None."""
    if hosts is None:
        return None
    names: Sequence[Optional[str]]
    if isinstance(hosts, str):          # a str is a sequence too: of characters, not of hosts
        try:
            names = hostlist.decode(hosts, nranks, "hosts")
        except ValueError as e:
            raise PopError(str(e)) from None
    elif isinstance(hosts, Mapping):
        names = [hosts.get(r) for r in range(nranks)]
        if None in names:
            raise PopError(f"hosts: no host for rank {names.index(None)} of the profile's {nranks}")
    else:
        names = list(hosts)
        if len(names) != nranks:
            raise PopError(f"hosts: {len(names)} given for the profile's {nranks} ranks")
    index: Dict[str, int] = {}
    return np.array([index.setdefault(str(n), len(index)) for n in names], np.int64)


def recorded_hosts(profile: Any) -> Optional[List[str]]:
    """The host of each rank that the profile's run metadata records
    (``rank_hosts``), when it names one per rank and more than one host;
    None otherwise (one host has no split; a user's key of that name that
    does not fit the profile is not the run's)."""
    text = profile.metadata.get("rank_hosts")
    if not isinstance(text, str):
        return None
    try:
        names = hostlist.decode(text, profile.nranks, "rank_hosts")
    except ValueError:
        return None
    return names if len(set(names)) > 1 else None


def columns(callpaths: Sequence[Callpath], count: np.ndarray, inc: np.ndarray, mpi: np.ndarray,
            hosts: Optional[np.ndarray] = None, ideal: Optional[np.ndarray] = None) -> Columns:
    """The metrics of each callpath (a row of the (callpath, rank) arrays
    ``count``, ``inc`` and ``mpi``, a column per rank of the run), as
    columns: the list of callpaths and numpy arrays (no pandas: ``tinyprof
    show`` and ``tinyprof pop`` need only numpy). POP's basis: means are over
    all ranks of the run, a rank that recorded no value (``count`` 0) counting
    0 useful time, so a region run by some ranks only shows their imbalance;
    maxima are over the ranks that recorded values, ``ranks`` counts them. NaN
    where a ratio has a zero denominator, and where no rank ran the callpath.
    ``hosts``: each rank's host id, for TALP's split of load balance within and
    across nodes. ``ideal``: the inclusive times on an ideal network
    (``trace.ideal_inclusive``), which split communication efficiency into
    serialization and transfer."""
    ran = count > 0
    useful = np.where(ran, np.clip(inc - mpi, 0.0, None), 0.0)
    ranks = ran.sum(axis=1)
    some = ranks > 0
    runtime = np.where(some, np.where(ran, inc, -np.inf).max(axis=1, initial=-np.inf), np.nan)
    top = np.where(some, np.where(ran, useful, -np.inf).max(axis=1, initial=-np.inf), np.nan)
    mean = np.where(some, useful.sum(axis=1) / max(useful.shape[1], 1), np.nan)
    out: Columns = {
        "callpath": list(callpaths), "ranks": ranks.astype(np.int64), "runtime": runtime,
        "useful_mean": mean, "useful_max": top, "load_balance": _ratio(mean, top),
        "communication_efficiency": _ratio(top, runtime), "parallel_efficiency": _ratio(mean, runtime)}
    if hosts is not None:
        # TALP: the node whose ranks have the most useful time on average (over
        # all its ranks) against the busiest rank (in), and the mean against
        # that node (out).
        nodes = int(hosts.max()) + 1 if len(hosts) else 0
        on = np.zeros((nodes, len(hosts)))
        on[hosts, np.arange(len(hosts))] = 1.0
        node_mean = (useful @ on.T) / np.maximum(on.sum(axis=1), 1)
        busiest = np.where(some, node_mean.max(axis=1, initial=-np.inf), np.nan)
        out["hosts"] = ((ran.astype(np.float64) @ on.T) > 0).sum(axis=1).astype(np.int64)
        out["load_balance_in"] = _ratio(busiest, top)
        out["load_balance_out"] = _ratio(mean, busiest)
    if ideal is not None:
        # POP: serialization = max useful / ideal runtime, transfer = ideal / real
        # runtime; their product is the communication efficiency.
        replayed = np.where(some, np.where(ran, ideal, -np.inf).max(axis=1, initial=-np.inf), np.nan)
        out["ideal_runtime"] = replayed
        out["serialization_efficiency"] = _ratio(top, replayed)
        out["transfer_efficiency"] = _ratio(replayed, runtime)
    return out


def worst_first(frame: Columns) -> List[Callpath]:
    """The callpaths of ``frame`` (columns of :func:`columns`) in tree order,
    the siblings of each parent by parallel efficiency, lowest first (those
    without one last): where ``tinyprof pop`` and the report look first."""
    pe = dict(zip(frame["callpath"], frame["parallel_efficiency"]))
    return tree_order(list(frame["callpath"]),
                      key=lambda p: (math.isnan(pe[p]), pe[p] if not math.isnan(pe[p]) else 0.0))


def several_hosts(frame: Columns) -> bool:
    """Whether ``frame`` splits load balance over nodes and some callpath
    ran on more than one: else there is nothing to split."""
    return "hosts" in frame and bool((frame["hosts"] > 1).any())


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)


def below(callpaths: Sequence[Callpath], callpath: Optional[Spec]) -> np.ndarray:
    """Which of ``callpaths`` are ``callpath`` or below it (all for None, none
    when it is not among them); a string as ``Profile.callpath`` reads it."""
    tree = Tree(callpaths)
    if callpath is None:
        return tree.below(None)
    path = tree.find(callpath)
    return tree.below(path) if path is not None else np.zeros(len(callpaths), bool)


def pop(profile: Any, callpath: Optional[Spec] = None,
        hosts: Optional[Hosts] = None, trace: bool = False) -> Columns:
    """The columns of ``Profile.pop``: one row per callpath (``callpath`` and
    those below it; None: all), in ``profile.callpaths`` order; ``trace``:
    with the split of communication efficiency from the replay of the trace
    on an ideal network (ValueError without a trace). ``hosts`` None: those
    the profile records, if it ran on several (:func:`recorded_hosts`)."""
    count, inc, mpi = per_rank(profile)
    keep = below(profile.callpaths, None if callpath is None else profile.callpath(callpath))
    paths = [p for p, k in zip(profile.callpaths, keep) if k]
    ideal = ideal_inclusive(profile.trace)[keep] if trace else None
    if hosts is None:
        hosts = recorded_hosts(profile)
    return columns(paths, count[keep], inc[keep], mpi[keep], host_ids(hosts, profile.nranks), ideal)
