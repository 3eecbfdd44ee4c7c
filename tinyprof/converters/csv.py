"""The paper's "standard CSV" (Fig. 3(a)): one row per recorded value.

Columns: ``rank``, ``execution``, ``iteration``, ``callpath`` (names joined
by ``<``), ``time`` (inclusive, seconds, read back exactly), then the custom
metrics in the profile's order: an inconsistent one empty where not given, a
consistent one repeated on every row of its callpath. Every row repeats its
callpath and context: the redundancy the tinyprof format removes.

The MPI table (``table="mpi"``) has the columns of :data:`MPI_COLUMNS`, as
``to_dataframe(profile, "mpi")`` gives them (callpath empty outside any event).

Text cells are made safe for spreadsheets and for UTF-8 (see docs/convert.md):
a text cell starting with a formula character gets a leading ``'``, and a
lone surrogate in a name is written as its escape ``\\udcff``.
"""
from __future__ import annotations

import csv as std_csv
import os
from typing import TYPE_CHECKING, Tuple

import numpy as np

from ..analysis.profile import Profile
from ..format.encoding import excerpt
from ..format.layout import write_atomic
from . import ConvertError
from .dataframe import to_dataframe

if TYPE_CHECKING:                       # pandas is imported when to_dataframe runs
    import pandas

# What a spreadsheet takes for the start of a formula (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


MPI_COLUMNS = ["rank", "callpath", "comm", "op", "bucket", "size_min", "size_max", "calls",
               "bytes", "time"]


def write(profile: Profile, path: str | os.PathLike[str], table: str = "values") -> str:
    """Write the standard CSV of ``profile`` (``table="mpi"``: its MPI table,
    one row per rank, callpath, communicator, op and size bucket) to ``path``
    atomically; needs pandas."""
    if table == "mpi" and not profile.mpi_recorded:
        raise ConvertError(f"profile {excerpt(profile.name)} holds no MPI data "
                           "(record with Profiler(mpi=True) or TINYPROF_MPI=1)")
    frame = to_dataframe(profile, table)
    columns = MPI_COLUMNS if table == "mpi" else [
        "rank", "execution", "iteration", "callpath", "time", *(k for k, _ in profile.metrics)]
    safe, cr = safe_text(frame[columns])
    # Before 3.13 the csv module quotes a cell holding a CR only when the line
    # terminator has one: with "\n" lines, a CR quotes every text cell instead.
    text = safe.to_csv(index=False, lineterminator="\n",
                       quoting=std_csv.QUOTE_NONNUMERIC if cr else std_csv.QUOTE_MINIMAL)
    # backslashreplace: a lone surrogate (legal in a name) has no UTF-8 form.
    write_atomic(os.fspath(path), text.encode("utf-8", "backslashreplace"))
    return os.fspath(path)


def safe_cell(text: str) -> str:
    """``text`` with a leading ``'`` if a spreadsheet would run it as a formula."""
    return f"'{text}" if text.startswith(FORMULA_START) else text


def safe_text(frame: pandas.DataFrame) -> Tuple[pandas.DataFrame, bool]:
    """A copy of ``frame`` with :func:`safe_cell` applied to the column names
    and every text cell, numeric columns (negative numbers too) as they are;
    and whether a text cell holds a CR."""
    import pandas as pd

    columns, texts = [], [str(name) for name in frame.columns]
    for _, column in frame.items():
        if isinstance(column.dtype, pd.CategoricalDtype):    # once per category, not per row
            labels = [safe_cell(c) for c in column.cat.categories]
            texts += labels
            column = pd.Series(np.array(labels + [None], dtype=object)[column.cat.codes.to_numpy()],
                               index=frame.index)            # code -1 (missing): None
        elif not pd.api.types.is_numeric_dtype(column.dtype):
            column = column.map(safe_cell, na_action="ignore")
            texts += column.dropna().tolist()
        columns.append(column)
    out = pd.concat(columns, axis=1, ignore_index=True)
    out.columns = [safe_cell(str(name)) for name in frame.columns]   # "'=x" and "=x" may both be
    return out, any("\r" in text for text in texts)
