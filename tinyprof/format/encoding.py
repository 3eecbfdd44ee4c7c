"""The compact profile format: its grammar's pieces and the writer.

The grammar is specified in docs/format.md, which is the contract shared with
the C++ writer (native/include/tinyprof/tinyprof.hpp) and the reader
(tinyprof/format/reader.py). Change them together.

Writing is split in two so that the flush can spread it over ranks: every rank
encodes its own values with :func:`encode_rank_field` (one bytes field per
callpath), and an aggregator joins the fields of its ranks into one file with
:func:`encode_file`.
"""
from __future__ import annotations

import bisect
import math
import os
import re
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

from .._version import __version__

if TYPE_CHECKING:       # numpy is loaded at the first flush or read, not on import
    import numpy as np

FORMAT_VERSION = 3
NO_RUN = "0" * 16              # the run id of writers that were given none
RUN_RE = re.compile("[0-9a-f]{16}")


# -- escaping and numbers -----------------------------------------------------

_NAME_ESCAPES = {"%": "%25", "\n": "%0A", "\r": "%0D"}
_KEY_ESCAPES = dict(_NAME_ESCAPES, **{":": "%3A", ",": "%2C", " ": "%20"})
_NAME_RE = re.compile("[%\n\r]")
_KEY_RE = re.compile("[%\n\r:, ]")
_PCT_RE = re.compile(r"%(?:([0-9A-Fa-f]{2})|(.{0,2}))", re.S)


def escape(text: str, key: bool = False) -> str:
    """Escape a name (or, with ``key``, a metric key) for the file."""
    if key:
        return _KEY_RE.sub(lambda m: _KEY_ESCAPES[m.group()], text)
    return _NAME_RE.sub(lambda m: _NAME_ESCAPES[m.group()], text)


def unescape(text: str) -> str:
    """Invert :func:`escape`; raises ValueError on a malformed ``%`` escape."""
    if "%" not in text:
        return text

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is None:
            raise ValueError(f"bad escape {m.group()!r}")
        return chr(int(m.group(1), 16))
    return _PCT_RE.sub(sub, text)


def format_value(v: float) -> str:
    """Canonical text of a metric value (docs/format.md, "Numbers")."""
    v = float(v)
    if v != v:
        return "nan"
    if v in (math.inf, -math.inf):
        return "inf" if v > 0 else "-inf"
    if v.is_integer() and abs(v) < 1e16:
        return "-0" if v == 0 and math.copysign(1.0, v) < 0 else "%d" % v
    text = repr(v)
    if "e" in text:
        mantissa, exp = text.split("e")
        text = f"{mantissa}e{int(exp)}"
    return text


# -- writer -------------------------------------------------------------------

# Values are encoded this many occurrences at a time: the Python strings of a
# chunk are freed before the next, so a flush's memory is that of the text
# it writes, not of a Python object per value.
_CHUNK = 1 << 16


def encode_rank_field(times: np.ndarray, execs: np.ndarray,
                      metrics: Sequence[Optional[np.ndarray]] = (), start: int = 0) -> bytes:
    """One rank's values of one callpath: ``exec;exec`` of ``occ+occ``.

    ``times`` holds int64 values, ``execs`` (execution, first index) pairs in
    increasing order, ``metrics`` one float64 array per inconsistent metric
    (aligned with ``times``; None when the callpath never set it). With
    ``start``, only occurrences from ``start`` on, with the separator before
    the first: appended to the field of ``times[:start]``, it gives the
    field of ``times`` (incremental snapshots encode only new values).
    """
    n = len(times)
    if n <= start:
        return b""
    if len(execs) == 2 and n <= _CHUNK and not any(m is not None for m in metrics):
        # one execution, times only: the common small field, without the chunks' work
        text = "+".join(map(str, times[start:].tolist()))
        return (gap(int(execs[0])) + text if start == 0 else "+" + text).encode()
    # small lists as Python ints (a numpy call per field would cost more than
    # the field); a long one stays an array, read a chunk's worth at a time
    pairs = execs.tolist() if len(execs) <= 2 * _CHUNK else execs
    exs, firsts = pairs[0::2], pairs[1::2]
    pieces: List[bytes] = []
    for lo in range(start, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        occ = _occurrences(times[lo:hi], [None if m is None else m[lo:hi] for m in metrics])
        seps = ["+"] * (hi - lo)        # an occurrence continues its execution, but
        b0, b1 = bisect.bisect_left(firsts, lo), bisect.bisect_left(firsts, hi)
        previous = int(exs[b0 - 1]) if b0 else 0
        last = base = -1
        for first, ex in zip(firsts[b0:b1], exs[b0:b1]):
            if first != last:           # (two pairs at one index: the first had no values)
                base = previous
            seps[int(first) - lo] = gap(int(ex) - base)     # the first of a new one
            previous, last = int(ex), first
        both = [""] * (2 * (hi - lo))
        both[0::2], both[1::2] = seps, occ
        pieces.append("".join(both).encode())
    return b"".join(pieces)


def gap(executions: int) -> str:
    """The separator before an execution's values, ``executions`` after the
    previous one with values (or after the start, 0: none): ``;``, or
    ``*k;`` for k >= 2, in constant space (docs/format.md, "Event lines")."""
    return "" if executions == 0 else ";" if executions == 1 else f"*{executions};"


def _occurrences(times: np.ndarray, metrics: Sequence[Optional[np.ndarray]]) -> List[str]:
    strs = list(map(str, times.tolist()))
    if not any(m is not None for m in metrics):
        return strs
    columns = [[""] * len(strs) if m is None else
               # NaN is the in-memory "not given": both are written empty, read as NaN
               ["" if v != v else format_value(v) for v in m.tolist()]
               for m in metrics]
    return [",".join([t, *cols]).rstrip(",") for t, *cols in zip(strs, *columns)]


@dataclass
class Header:
    """Everything in a file before the name table."""

    name: str
    nranks: int
    first_rank: int
    rank_count: int
    file_index: int = 0
    file_count: int = 1
    metrics: List[Tuple[str, bool]] = field(default_factory=list)  # (key, consistent)
    executions: List[int] = field(default_factory=list)             # per rank held
    unit: str = "ns"
    created: str = ""
    version: str = __version__
    run: str = field(default_factory=lambda: env_run_id() or NO_RUN)
    set_kind: str = "flush"        # "flush" | "snapshot"
    set_number: int = 0
    set_base: Optional[int] = None     # a delta snapshot: the snapshot it changes
    format_version: int = FORMAT_VERSION   # what the file said (1: run "", set_kind "")


def created_now() -> str:
    """UTC creation stamp, honouring SOURCE_DATE_EPOCH for reproducible files."""
    stamp = os.environ.get("SOURCE_DATE_EPOCH")
    secs = int(stamp) if stamp and stamp.isdigit() else int(time.time())
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(secs))


def env_run_id() -> Optional[str]:
    """``TINYPROF_RUN_ID`` if it is a run id (16 lowercase hex digits), else None:
    it overrides the drawn run id, for reproducible files."""
    value = os.environ.get("TINYPROF_RUN_ID", "")
    return value if RUN_RE.fullmatch(value) else None


def _rle(counts: Sequence[int]) -> str:
    items: List[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        items.append(str(counts[i]) if j - i == 1 else f"{counts[i]}*{j - i}")
        i = j
    return ",".join(items)


class Fields(Protocol):
    """One rank's fields by line, as :func:`encode_file` takes them: ``fields[i]``
    once for each line ``i``, lines in increasing order (each line's field of
    every rank before the next line's), never again after the last line. A
    Fields may rely on that order to free its storage early: the MPI flush's
    gathered rows (``runtime/mpi_flush``, an ``assemble.Row``) free their
    buffer with their last line's field and raise on any later access. A
    list of bytes is one too."""

    def __getitem__(self, line: int) -> Union[bytes, memoryview]: ...


def encode_file(header: Header, names: Sequence[str], parents: Sequence[int],
                ids: Sequence[int], loops: Sequence[int], consistent: Sequence[bytes],
                fields: Sequence[Fields],
                sections: Sequence[Tuple[str, bytes]] = ()) -> bytes:
    """The whole file. Line ``i`` is the callpath ending in name ``ids[i]`` whose
    parent is on line ``parents[i]`` (-1: a root callpath); ``fields[r][i]`` is
    rank ``first_rank+r``'s field of line ``i``, taken in the order
    :class:`Fields` states."""
    metrics = " ".join(f"{escape(k, key=True)}:{0 if c else 1}" for k, c in header.metrics)
    head = [
        f"tinyprof {FORMAT_VERSION}",
        f"name {escape(header.name)}",
        f"run {header.run}",
        f"set {set_value(header.set_kind, header.set_number, header.set_base)}",
        f"nranks {header.nranks}",
        f"ranks {header.first_rank} {header.rank_count}",
        f"file {header.file_index} {header.file_count}",
        f"unit {header.unit}",
        f"metrics {metrics}",
        f"created {header.created or created_now()}",
        f"version {header.version}",
        f"executions {_rle(header.executions)}",
        f"names {len(names)}",
        *(escape(n) for n in names),
        f"events {len(ids)}",
    ]
    # surrogatepass: a lone surrogate in a name is written, not a crash at flush
    # time; the reader decodes the same way.
    out = _Pieces()
    out.add(["\n".join(head).encode("utf-8", "surrogatepass"), b"\n"])
    bar = b"|"
    for i, (parent, name_id) in enumerate(zip(parents, ids)):
        path = f"{parent}:{name_id}" if parent >= 0 else str(name_id)
        line: List[Union[bytes, memoryview]] = [f"{path}|{loops[i]}|".encode(), consistent[i]]
        for f in fields:
            line += [bar, f[i]]
        line.append(b"\n")
        out.add(line)
    for name, payload in sections:
        out.add([f"section {name} {len(payload)}\n".encode(), payload, b"\n"])
    return out.join()


class _Pieces:
    """The file's bytes as pieces, joined once (the fields, as they are, are
    its largest share: one copy of them, into the file). Small pieces are
    joined a block at a time first: a join costs a buffer descriptor per piece."""

    BLOCK = 1 << 16

    def __init__(self) -> None:
        self.out: List[Union[bytes, memoryview]] = []
        self.small: List[Union[bytes, memoryview]] = []
        self.size = 0
        self.crc = 0        # over the pieces in order: no copy of the whole file

    def add(self, pieces: Sequence[Union[bytes, memoryview]]) -> None:
        for piece in pieces:
            if len(piece) >= self.BLOCK:
                self.flush()
                self.crc = zlib.crc32(piece, self.crc)
                self.out.append(piece)
            else:
                self.small.append(piece)
                self.size += len(piece)
        if self.size >= self.BLOCK:
            self.flush()

    def flush(self) -> None:
        if self.small:
            block = b"".join(self.small)
            self.crc = zlib.crc32(block, self.crc)
            self.out.append(block)
            self.small, self.size = [], 0

    def join(self) -> bytes:
        """The pieces and the end line, in one bytes."""
        self.flush()
        self.out.append(b"end %08x\n" % self.crc)
        return b"".join(self.out)


def encode_consistent(values: Mapping[str, float], keys: Sequence[str]) -> bytes:
    """The consistent-metrics field of one callpath, in header order."""
    return ",".join(format_value(values[k]) if k in values else "" for k in keys).rstrip(",").encode()


def set_value(kind: str, number: int, base: Optional[int] = None) -> str:
    """The ``set`` line's value: ``flush N``, ``snapshot K`` or, for a delta
    snapshot, ``snapshot K over J``."""
    return f"{kind} {number}" if base is None else f"{kind} {number} over {base}"


def relabel(data: bytes, kind: str, number: int, base: Optional[int] = None) -> bytes:
    """The bytes of a version-2 or 3 file as a file of set ``kind`` ``number``
    (over ``base``): the same data, its ``set`` line and checksum rewritten."""
    head, sep, rest = data.partition(b"\nset ")
    body = head + sep + set_value(kind, number, base).encode() + rest[rest.index(b"\n"):]
    end = body.rindex(b"\nend ") + 1
    return body[:end] + b"end %08x\n" % zlib.crc32(memoryview(body)[:end])


# -- numbers of the grammar ------------------------------------------------------

MAX_NATURAL = 2**63 - 1
_NAT = re.compile("0|[1-9][0-9]*")
_NAT_B = re.compile(rb"0|[1-9][0-9]*")


def natural(token, limit: int = MAX_NATURAL) -> int:
    """A str or bytes natural in its one spelling, at most ``limit``; else ValueError.
    The length is checked first: a huge token never becomes a huge int."""
    pattern = _NAT if isinstance(token, str) else _NAT_B
    if len(token) > len(str(limit)) or not pattern.fullmatch(token) or int(token) > limit:
        raise ValueError(token)
    return int(token)
