"""Caliper's "json-split" layout, which hatchet's ``GraphFrame.from_caliper``
and CallFlow's ``caliper_json`` format read.

A json-split file holds ``columns`` with their ``column_metadata``, the call
tree as ``nodes`` (``label``, ``column`` and ``parent`` index), and ``data``
rows whose ``path`` cell is a node index. Hatchet turns the ``mpi.rank``
column into the rank index level, ``sum#time.duration`` into ``time`` and
``inclusive#sum#time.duration`` into ``time (inc)``; every other value
column becomes a metric of the same name, and top-level keys other than
these four become ``GraphFrame.metadata``.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import numpy as np

from ..format.output_dir import write_atomic

Callpath = Tuple[str, ...]
RANK, TIME, TIME_INC = "mpi.rank", "sum#time.duration", "inclusive#sum#time.duration"


def nodes(callpaths: Sequence[Callpath]) -> List[Dict[str, Any]]:
    """The ``nodes`` section: one per callpath, parents before children."""
    index = {path: i for i, path in enumerate(callpaths)}
    out = []
    for path in callpaths:
        node: Dict[str, Any] = {"label": path[-1], "column": "path"}
        if len(path) > 1:
            node["parent"] = index[path[:-1]]
        out.append(node)
    return out


def write(path: str | os.PathLike[str], callpaths: Sequence[Callpath], node: np.ndarray,
          values: Sequence[Tuple[str, np.ndarray]], metadata: Dict[str, Any]) -> None:
    """Write one row per entry of ``node`` (an index into ``callpaths``) with the
    value columns ``values`` (name, array aligned with ``node``); NaN is null."""
    columns = ["path", *(name for name, _ in values)]
    head = {"columns": columns,
            "column_metadata": [{"is_value": name != "path"} for name in columns],
            "nodes": nodes(callpaths), **metadata}
    rows = b",\n".join(_rows([node, *(v for _, v in values)]))
    write_atomic(os.fspath(path), b"".join([json.dumps(head)[:-1].encode(), b', "data": [\n',
                                            rows, b"\n]}\n"]))


def _rows(columns: List[np.ndarray], chunk: int = 1 << 16) -> Iterator[bytes]:
    """The data rows as text, a chunk of rows at a time: Python strings for
    every cell of a large profile at once would take gigabytes."""
    for start in range(0, len(columns[0]), chunk):
        cells = [_texts(c[start:start + chunk]) for c in columns]
        yield ",\n".join(f"[{','.join(row)}]" for row in zip(*cells)).encode()


def _texts(column: np.ndarray) -> List[str]:
    """JSON text of each value: integers as such, floats round-trip exact, NaN null."""
    if column.dtype.kind in "iu":
        return list(map(str, column.tolist()))
    return [repr(v) if -_INF < v < _INF else _SPECIAL.get(v, "null") for v in column.tolist()]


_INF = float("inf")
_SPECIAL = {_INF: "Infinity", -_INF: "-Infinity"}     # as Python's json writes and reads them
