"""pandas: every recorded value as one row of a long-form DataFrame."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Union

import numpy as np

from .._profile import _PER_SECOND, Profile

from ._values import as_profile, check_columns, consistent, occurrences

if TYPE_CHECKING:                       # pandas is imported when to_dataframe runs
    import pandas

_COLUMNS = ("callpath_id", "callpath", "rank", "execution", "iteration", "time")


def to_dataframe(profile_or_path: Union[Profile, str, "os.PathLike[str]"]) -> "pandas.DataFrame":
    """Every value of the profile: one row per callpath, rank, execution and iteration.

    Columns: ``callpath_id`` (index into ``profile.callpaths``), ``callpath``
    (names joined by ``<``, categorical), ``rank``, ``execution``,
    ``iteration`` (occurrence index within the execution; 0 for loop mode 2),
    ``time`` (inclusive, seconds), each inconsistent metric (NaN where not
    given) and each consistent metric (its one value, repeated). A rank that
    never ran a callpath has no rows for it. Needs pandas.
    """
    import pandas as pd

    profile = as_profile(profile_or_path)
    check_columns(profile, _COLUMNS, "dataframe")
    occ = occurrences(profile)
    labels = ["<".join(path) for path in profile.callpaths]
    lookup = {label: i for i, label in enumerate(dict.fromkeys(labels))}  # "<" in names may join alike
    code = np.array([lookup[label] for label in labels], dtype=np.int32)
    frame = pd.DataFrame({
        "callpath_id": occ.callpath,
        "callpath": pd.Categorical.from_codes(code[occ.callpath], categories=list(lookup)),
        "rank": occ.rank, "execution": occ.execution, "iteration": occ.iteration,
        "time": occ.time_ns / _PER_SECOND[profile.unit],
        **occ.metrics,
        **{k: v[occ.callpath] for k, v in consistent(profile).items()}})
    return frame
