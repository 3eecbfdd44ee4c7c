"""The paper's "standard CSV" (Fig. 3(a)): one row per recorded value.

Columns: ``rank``, ``execution``, ``iteration``, ``callpath`` (names joined
by ``<``), ``time`` (inclusive, seconds, read back exactly), then the custom
metrics in the profile's order: an inconsistent one empty where not given, a
consistent one repeated on every row of its callpath. Every row repeats its
callpath and context: the redundancy the tinyprof format removes.
"""
from __future__ import annotations

import os

from .._profile import Profile

from .dataframe import to_dataframe


def write(profile: Profile, path: "str | os.PathLike[str]") -> str:
    """Write the standard CSV of ``profile`` to ``path``; needs pandas."""
    frame = to_dataframe(profile)
    columns = ["rank", "execution", "iteration", "callpath", "time", *(k for k, _ in profile.metrics)]
    frame[columns].to_csv(path, index=False, lineterminator="\n")
    return os.fspath(path)
