"""Converters from tinyprof profiles to other tools' formats, one module per target.

- :mod:`.hatchet`: ``to_hatchet`` (a GraphFrame) and a json-split file for
  hatchet's ``GraphFrame.from_caliper``;
- :mod:`.callflow`: CallFlow's ``caliper_json`` input, and CallFlow run with
  the compatibility fix it needs today;
- :mod:`.dataframe`: ``to_dataframe``, every value as a long-form pandas DataFrame,
  or the MPI table;
- :mod:`.csv`: the paper's "standard CSV", one row per value, or the MPI table;
- :mod:`.perfetto`: Chrome trace-event JSON of a traced profile, for the
  Perfetto UI;
- :mod:`.pprof`: a gzipped pprof ``profile.proto``, for ``go tool pprof``,
  Grafana Pyroscope and speedscope.

The MPI tables of ``tinyprof mpi`` are computed in :mod:`tinyprof.analysis.mpi_tables`
and printed by :mod:`tinyprof.views.mpi_text`.

pandas, hatchet, CallFlow and protobuf are imported inside the functions that need
them, so that importing tinyprof never does.
"""
from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from ..errors import ConvertError

if TYPE_CHECKING:   # not at run time: cli and every command import ConvertError, light
    from ..analysis.profile import Profile

TARGETS = ("hatchet", "callflow", "csv", "perfetto", "pprof")


__all__ = ["TARGETS", "ConvertError", "convert"]


def convert(profile: Profile, target: str, out: str | os.PathLike[str],
            statistic: str = "sum", table: str = "values") -> str:
    """Write ``profile`` as ``target`` (one of :data:`TARGETS`) to ``out``; returns the
    path written (a file, or for CallFlow the file inside the directory ``out``).
    ``table="mpi"`` (csv only) writes the MPI table instead of the values."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}: use one of {', '.join(TARGETS)}")
    if table != "values" and target != "csv":
        raise ValueError(f"table {table!r} is for the csv target only")
    module = importlib.import_module(f"{__name__}.{target}")
    # CSV keeps every value: no statistic
    options = {"table": table} if target == "csv" else {"statistic": statistic}
    return module.write(profile, out, **options)
