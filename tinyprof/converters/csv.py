"""The paper's "standard CSV" (Fig. 3(a)): one row per recorded value.

Columns: ``rank``, ``execution``, ``iteration``, ``callpath`` (names joined
by ``<``), ``time`` (inclusive, seconds, read back exactly), then the custom
metrics in the profile's order: an inconsistent one empty where not given, a
consistent one repeated on every row of its callpath. Every row repeats its
callpath and context: the redundancy the tinyprof format removes.

The MPI table (``table="mpi"``) has the columns of :data:`MPI_COLUMNS`, as
``to_dataframe(profile, "mpi")`` gives them (callpath empty outside any event).

Text cells are made safe for spreadsheets and for UTF-8 (see docs/convert.md):
every text cell is quoted; a ``'`` goes before a formula character (or a
``'``) wherever a spreadsheet could start a cell: at the cell's start and
after each separator a spreadsheet may split on (``,;|``, tab, line breaks),
so :func:`original` gives the name back; a lone surrogate in a name is
written as its escape ``\\udcff``.
"""
from __future__ import annotations

import csv as std_csv
import os
import re
from typing import TYPE_CHECKING

import numpy as np

from ..analysis.profile import Profile
from ..errors import ConvertError, excerpt
from ..format.output_dir import write_atomic
from .dataframe import to_dataframe

if TYPE_CHECKING:                       # pandas is imported when to_dataframe runs
    import pandas

# What a spreadsheet takes for the start of a formula (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Where a spreadsheet may start a cell inside a text cell, if it splits lines
# on another separator than ours, or ignores quotes that are not at a cell's
# start: after any of these. Quotes there may be taken for the cell's own.
_SEPARATORS = ",;|\t\r\n"
_AT = f"(?:^|(?<=[{re.escape(_SEPARATORS)}]))"                        # a cell may start here
_RISKY = f"(?=\"*[{re.escape(''.join(FORMULA_START))}'])"              # before this
_CELL_START = re.compile(_AT + _RISKY)
_MARK = re.compile(_AT + "'" + _RISKY)


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
    # Every text cell quoted: a separator or a CR in a name stays in its cell
    # (before 3.13 the csv module would not quote a lone CR with "\n" lines).
    text = safe_text(frame[columns]).to_csv(index=False, lineterminator="\n",
                                            quoting=std_csv.QUOTE_NONNUMERIC)
    # backslashreplace: a lone surrogate (legal in a name) has no UTF-8 form.
    write_atomic(os.fspath(path), text.encode("utf-8", "backslashreplace"))
    return os.fspath(path)


def safe_cell(text: str) -> str:
    """``text`` with a ``'`` wherever a spreadsheet could start a cell (its
    start, after a separator) before a formula character or a ``'``, both
    possibly after quotes: ``x;=1+1`` becomes ``x;'=1+1``."""
    return _CELL_START.sub("'", text)


def original(cell: str) -> str:
    """The text :func:`safe_cell` made ``cell`` from: a CSV cell read back
    (by pandas, say) gives the name."""
    return _MARK.sub("", cell)


def safe_text(frame: pandas.DataFrame) -> pandas.DataFrame:
    """A copy of ``frame`` with :func:`safe_cell` applied to the column names
    and every text cell, numeric columns (negative numbers too) as they are."""
    import pandas as pd

    columns = []
    for _, column in frame.items():
        if isinstance(column.dtype, pd.CategoricalDtype):    # once per category, not per row
            labels = [safe_cell(c) for c in column.cat.categories]
            column = pd.Series(np.array(labels + [None], dtype=object)[column.cat.codes.to_numpy()],
                               index=frame.index)            # code -1 (missing): None
        elif not pd.api.types.is_numeric_dtype(column.dtype):
            column = column.map(safe_cell, na_action="ignore")
        columns.append(column)
    out = pd.concat(columns, axis=1, ignore_index=True)
    out.columns = [safe_cell(str(name)) for name in frame.columns]   # "'=x" and "=x" may both be
    return out
