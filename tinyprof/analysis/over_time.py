"""The POP metrics over time (``tinyprof.pop_history``, docs/pop.md): per
interval between the kept snapshots of a run, from the differences of their
cumulative values."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..format.encoding import excerpt
from . import pop
from .callpaths import spelled
from .profile import read, snapshots

HISTORY_COLUMNS = ["snapshot", "created"]


def pop_history(outdir: Union[str, os.PathLike[str]], callpath: Optional[Sequence[str]] = None,
                hosts: Optional[pop.Hosts] = None, numbers: Optional[Sequence[int]] = None) -> Any:
    """``tinyprof.pop_history``: the metrics of each interval between
    consecutive kept snapshots (the first from the start of the run), from
    the differences of their cumulative values, as a pandas DataFrame. One
    row per (snapshot, callpath) with values recorded in that interval;
    ``numbers``: the snapshots to use (default: every complete one; taken
    oldest first whatever their order); ``hosts`` as for ``Profile.pop``
    (None: the recorded ones). PopError (a ValueError) without snapshots or without MPI data in one;
    KeyError for a ``callpath`` that no snapshot holds."""
    import pandas as pd

    return pd.DataFrame(history(outdir, callpath, hosts, numbers))


def history(outdir: Union[str, os.PathLike[str]], callpath: Optional[Sequence[str]] = None,
            hosts: Optional[pop.Hosts] = None, numbers: Optional[Sequence[int]] = None) -> pop.Columns:
    """The columns of ``pop_history``: lists and numpy arrays."""
    outdir = os.fspath(outdir)
    # oldest first: an interval is the difference with the snapshot before it
    numbers = snapshots(outdir) if numbers is None else sorted(set(numbers))
    if not numbers:
        raise pop.PopError(f"{outdir}: no complete snapshot: the metrics over time need the snapshots "
                           "of a run kept with Profiler(frequency=..., keep='all')")
    first = read(outdir, snapshot=numbers[0])
    if hosts is None:       # every snapshot of a run records the same hosts
        hosts = pop.recorded_hosts(first)
    names = HISTORY_COLUMNS + pop.COLUMNS + (pop.HOST_COLUMNS if hosts is not None else [])
    parts: Dict[str, List[Any]] = {name: [] for name in names}
    before: Dict[pop.Callpath, Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    known = False           # some snapshot has the callpath
    for i, k in enumerate(numbers):
        snap = first if i == 0 else read(outdir, snapshot=k)
        if not snap.mpi_recorded:
            raise pop.PopError(f"{outdir}: snapshot {k} holds no MPI data: the metrics over time "
                               "need the MPI time in every snapshot (record with Profiler(mpi=True) "
                               "or TINYPROF_MPI=1; an older C++ header's snapshots hold none)")
        ids = pop.host_ids(hosts, snap.nranks)
        now = dict(zip(snap.callpaths, zip(*pop.per_rank(snap))))
        paths = [p for p, keep in zip(snap.callpaths, pop.below(snap.callpaths, callpath)) if keep]
        known = known or bool(paths)
        zero = np.zeros(snap.nranks)
        steps = [tuple(a - b for a, b in zip(now[p], before.get(p, (zero, zero, zero))))
                 for p in paths]
        before = now
        if not steps:
            continue
        count, inc, mpi = (np.array(x) for x in zip(*steps))
        cols = pop.columns(paths, count, inc, mpi, ids)
        ran = cols["ranks"] > 0
        cols["snapshot"] = np.full(len(paths), k, np.int64)
        cols["created"] = [snap.created] * len(paths)
        for name in names:
            value = cols[name]
            parts[name].append(value[ran] if isinstance(value, np.ndarray) else
                               [v for v, r in zip(value, ran) if r])
    if callpath is not None and not known:
        raise KeyError(f"no callpath {excerpt(spelled(callpath))} in the snapshots of {outdir}")
    return {name: np.concatenate(p) if name not in ("callpath", "created") and p else
            [v for chunk in p for v in chunk] for name, p in parts.items()}
