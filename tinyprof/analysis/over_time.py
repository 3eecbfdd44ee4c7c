"""The POP metrics over time (``tinyprof.pop_history``, docs/pop.md): per
interval between the kept snapshots of a run, from the differences of their
cumulative values."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import pop
from .profile import read, snapshots

HISTORY_COLUMNS = ["snapshot", "created"]


def pop_history(outdir: Union[str, os.PathLike[str]], callpath: Optional[Sequence[str]] = None,
                hosts: Optional[pop.Hosts] = None, numbers: Optional[Sequence[int]] = None) -> Any:
    """``tinyprof.pop_history``: the metrics of each interval between
    consecutive kept snapshots (the first from the start of the run), from
    the differences of their cumulative values. One row per (snapshot,
    callpath) with values recorded in that interval; ``numbers``: the
    snapshots to use (default: every complete one, oldest first)."""
    import pandas as pd

    outdir = os.fspath(outdir)
    numbers = snapshots(outdir) if numbers is None else list(numbers)
    if not numbers:
        raise pop.PopError(f"{outdir}: no complete snapshot: the metrics over time need the snapshots "
                           "of a run kept with Profiler(frequency=..., keep='all')")
    before: Dict[pop.Callpath, Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    frames: List[Any] = []
    for k in numbers:
        snap = read(outdir, snapshot=k)
        if not snap.mpi_recorded:
            raise pop.PopError(f"{outdir}: snapshot {k} holds no MPI data: the metrics over time "
                               "need the MPI time in every snapshot (record with Profiler(mpi=True); "
                               "the C++ header's snapshots carry none, docs/native.md)")
        ids = pop.host_ids(hosts, snap.nranks)
        now = dict(zip(snap.callpaths, zip(*pop.per_rank(snap))))
        paths = [p for p, keep in zip(snap.callpaths, pop.below(snap.callpaths, callpath)) if keep]
        zero = np.zeros(snap.nranks)
        steps = [tuple(a - b for a, b in zip(now[p], before.get(p, (zero, zero, zero))))
                 for p in paths]
        before = now
        if not steps:
            continue
        count, inc, mpi = (np.array(x) for x in zip(*steps))
        frame = pop.table(paths, count, inc, mpi, ids)
        frame = frame[frame["ranks"] > 0].reset_index(drop=True)
        frame.insert(0, "created", snap.created)
        frame.insert(0, "snapshot", k)
        frames.append(frame)
    columns = HISTORY_COLUMNS + pop.COLUMNS + (pop.HOST_COLUMNS if hosts is not None else [])
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]
