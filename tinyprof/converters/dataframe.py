"""pandas: every recorded value as one row of a long-form DataFrame, or the MPI table."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, List, Sequence, Tuple, Union

import numpy as np

from ..analysis.profile import PER_SECOND, Profile
from ..analysis.values import as_profile, check_columns, consistent, occurrences

if TYPE_CHECKING:                       # pandas is imported when to_dataframe runs
    import pandas

Callpath = Tuple[str, ...]
_COLUMNS = ("callpath_id", "callpath", "rank", "execution", "iteration", "time")
TABLES = ("values", "mpi")


def to_dataframe(profile_or_path: Union[Profile, str, os.PathLike[str]],
                 table: str = "values") -> pandas.DataFrame:
    """Every value of the profile (``table="values"``), or its MPI calls (``"mpi"``).

    ``"values"``: one row per callpath, rank, execution and iteration.
    Columns: ``callpath_id`` (index into ``profile.callpaths``), ``callpath``
    (names joined by ``<``, categorical), ``rank``, ``execution``,
    ``iteration`` (occurrence index within the execution; 0 for loop mode 2),
    ``time`` (inclusive, seconds), each inconsistent metric (NaN where not
    given) and each consistent metric (its one value, repeated). A rank that
    never ran a callpath has no rows for it.

    ``"mpi"``: :attr:`Profile.mpi` with the callpath as in ``"values"``: one
    row per (callpath, rank, comm, op, size bucket), columns ``callpath_id``
    (-1 outside any event), ``callpath`` (``""`` outside any event),
    ``rank``, ``comm``, ``op``, ``bucket``, ``size_min``, ``size_max``,
    ``calls``, ``bytes`` and ``time`` (seconds). Empty without MPI capture.
    Needs pandas.
    """
    import pandas as pd

    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}: use one of {', '.join(TABLES)}")
    profile = as_profile(profile_or_path)
    if table == "mpi":
        return _mpi_frame(profile)
    check_columns(profile, _COLUMNS, "dataframe")
    occ = occurrences(profile)
    frame = pd.DataFrame({
        "callpath_id": occ.callpath,
        "callpath": _labels(profile.callpaths, occ.callpath),
        "rank": occ.rank, "execution": occ.execution, "iteration": occ.iteration,
        "time": occ.time_ns / PER_SECOND[profile.unit],
        **occ.metrics,
        **{k: v[occ.callpath] for k, v in consistent(profile).items()}})
    return frame


def _labels(callpaths: Sequence[Callpath], ids: np.ndarray) -> pandas.Categorical:
    """The callpath ``callpaths[i]`` of each ``i`` in ``ids``, names joined by ``<``,
    as a categorical; ``i = -1`` (no callpath) is ``""``."""
    import pandas as pd

    # Each label extends its parent's (callpaths come parents first): C-speed
    # concatenation, not a walk of every callpath's depth.
    labels: List[str] = []
    where = {path: i for i, path in enumerate(callpaths)}
    for path in callpaths:
        labels.append(f"{labels[where[path[:-1]]]}<{path[-1]}" if len(path) > 1 else path[-1])
    labels += [""] if (ids < 0).any() else []
    lookup = {label: i for i, label in enumerate(dict.fromkeys(labels))}  # "<" in names may join alike
    code = np.array([lookup[label] for label in labels], dtype=np.int32)
    return pd.Categorical.from_codes(code[ids], categories=list(lookup))


def _mpi_frame(profile: Profile) -> pandas.DataFrame:
    """``profile.mpi`` with ``callpath_id`` and the callpath as a ``<``-joined label."""
    frame = profile.mpi
    index = {path: i for i, path in enumerate(profile.callpaths)}
    ids = np.array([index.get(path, -1) for path in frame["callpath"]], dtype=np.int32)
    frame["callpath"] = _labels(profile.callpaths, ids)
    frame.insert(0, "callpath_id", ids)
    return frame
