"""The compact profile format: writer and reader side by side.

The grammar is specified in docs/format.md, which is the contract shared with
the C++ writer (native/include/tinyprof/tinyprof.hpp). Change them together.

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
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._version import __version__

FORMAT_VERSION = 1
SUFFIX = ".tp"
_NAN = float("nan")


class FormatError(ValueError):
    """A profile file is truncated, corrupted, not a tinyprof profile, or too new."""

    def __init__(self, path: str, line: Optional[int], problem: str) -> None:
        self.path, self.line, self.problem = path, line, problem
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {problem}")


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

    def sub(m: "re.Match[str]") -> str:
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


def _parse_value(token: bytes) -> float:
    return float(token) if token else _NAN


# -- writer -------------------------------------------------------------------

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
    occ = _occurrences(times[start:], [None if m is None else m[start:] for m in metrics])
    exs, firsts = execs[0::2].tolist(), execs[1::2].tolist() + [n]
    pieces: List[str] = []
    for q in range(max(bisect.bisect_right(firsts, start) - 1, 0), len(exs)):
        lo, hi = max(firsts[q], start), min(firsts[q + 1], n)
        if lo < hi:
            # A new execution is preceded by one ';' per execution it moves on
            # (the empty groups of executions without values); a continued one by '+'.
            sep = ";" * (exs[q] - (exs[q - 1] if q else 0)) if lo == firsts[q] else "+"
            pieces.append(sep + "+".join(occ[lo - start:hi - start]))
    return "".join(pieces).encode()


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


def created_now() -> str:
    """UTC creation stamp, honouring SOURCE_DATE_EPOCH for reproducible files."""
    stamp = os.environ.get("SOURCE_DATE_EPOCH")
    secs = int(stamp) if stamp and stamp.isdigit() else int(time.time())
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(secs))


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


def encode_file(header: Header, names: Sequence[str], paths: Sequence[Sequence[int]],
                loops: Sequence[int], consistent: Sequence[bytes],
                fields: Sequence[Sequence[bytes]]) -> bytes:
    """The whole file. ``fields[r][i]`` is rank ``first_rank+r``'s field of path ``i``."""
    metrics = " ".join(f"{escape(k, key=True)}:{0 if c else 1}" for k, c in header.metrics)
    head = [
        f"tinyprof {FORMAT_VERSION}",
        f"name {escape(header.name)}",
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
        f"events {len(paths)}",
    ]
    # surrogatepass: a lone surrogate in a name is written, not a crash at flush
    # time; the reader decodes the same way.
    out = ["\n".join(head).encode("utf-8", "surrogatepass")]
    for i, path in enumerate(paths):
        prefix = f"{'<'.join(map(str, path))}|{loops[i]}|".encode() + consistent[i]
        out.append(b"|".join([prefix, *(f[i] for f in fields)]))
    out.append(b"end\n")
    return b"\n".join(out)


def encode_consistent(values: Dict[str, float], keys: Sequence[str]) -> bytes:
    """The consistent-metrics field of one callpath, in header order."""
    return ",".join(format_value(values[k]) if k in values else "" for k in keys).rstrip(",").encode()


def file_name(name: str, index: int, count: int) -> str:
    """``<name>.<index>-of-<count>.tp``, index zero-padded to the width of count."""
    safe = re.sub(r"[^\w.+-]", "_", name) or "profile"
    return f"{safe}.{index:0{len(str(count))}d}-of-{count}{SUFFIX}"


def write_atomic(path: str, data: bytes) -> None:
    """One write to a temporary file, then rename: readers never see half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


# -- reader -------------------------------------------------------------------

@dataclass
class EventData:
    """One callpath of one file: values of all its ranks, flattened.

    Execution ``e`` of the file's rank ``r`` holds ``times[offsets[j]:offsets[j+1]]``
    with ``j = exec_base[r] + e`` (``exec_base`` is per file).
    """

    loop: int
    consistent: Dict[str, float]
    offsets: np.ndarray
    times: np.ndarray
    metrics: Dict[str, np.ndarray]


@dataclass
class ParsedFile:
    path: str
    header: Header
    exec_base: np.ndarray
    events: Dict[Tuple[str, ...], EventData]


_HEADER_KEYS = ("name", "nranks", "ranks", "file", "unit", "metrics", "created",
                "version", "executions")


def parse_file(path: str) -> ParsedFile:
    """Parse one file of a profile; raises FormatError naming file and line."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise FormatError(path, None, f"cannot read: {e.strerror}") from None
    return _Parser(path, data).parse()


class _Parser:
    def __init__(self, path: str, data: bytes) -> None:
        self.path = path
        self.lines = data.split(b"\n")
        self.no = 0

    def fail(self, problem: str, line: Optional[int] = None) -> FormatError:
        return FormatError(self.path, line or self.no, problem)

    def next_line(self) -> bytes:
        if self.no >= len(self.lines) or (self.no == len(self.lines) - 1 and not self.lines[-1]):
            raise self.fail("truncated: file ends before the 'end' line", self.no)
        self.no += 1
        return self.lines[self.no - 1]

    def text(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise self.fail("not valid UTF-8") from None

    def keyed(self, key: str) -> str:
        raw = self.text(self.next_line())
        k, _, v = raw.partition(" ")
        if k != key:
            raise self.fail(f"expected '{key}', found {raw[:40]!r}")
        return v

    def integer(self, text: str, what: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise self.fail(f"bad {what}: {text[:40]!r}") from None
        if value < 0:
            raise self.fail(f"bad {what}: {text[:40]!r}")
        return value

    def parse(self) -> ParsedFile:
        first = self.lines[0][:40]
        if not first.startswith(b"tinyprof "):
            raise self.fail(f"not a tinyprof profile (first line {first!r})", 1)
        version = self.integer(self.keyed("tinyprof"), "format version")
        if version > FORMAT_VERSION:
            raise self.fail(f"written by a newer tinyprof (format version {version}); "
                            f"this reader supports version {FORMAT_VERSION}")
        h = self.header()
        names = [self.name(self.next_line()) for _ in range(self.integer(self.keyed("names"), "name count"))]
        nevents = self.integer(self.keyed("events"), "event count")
        exec_base = np.concatenate([[0], np.cumsum(h.executions, dtype=np.int64)])
        events: Dict[Tuple[str, ...], EventData] = {}
        for _ in range(nevents):
            path, ev = self.event(self.next_line(), names, h, exec_base)
            if path in events:
                raise self.fail(f"callpath {'<'.join(path)!r} appears twice")
            if len(path) > 1 and path[:-1] not in events:
                raise self.fail("callpath's parent is not on an earlier line")
            events[path] = ev
        if self.next_line() != b"end":
            raise self.fail("expected 'end' after the event lines")
        if self.no == len(self.lines):
            raise self.fail("truncated: no newline after the 'end' line")
        if self.no < len(self.lines) - 1 or self.lines[-1]:
            raise self.fail("data after the 'end' line")
        return ParsedFile(self.path, h, exec_base, events)

    def header(self) -> Header:
        seen: Dict[str, Tuple[str, int]] = {}      # key -> (value, line number)
        while True:
            mark = self.no
            raw = self.text(self.next_line())
            key, _, value = raw.partition(" ")
            if key == "names":
                self.no = mark
                break
            seen.setdefault(key, (value, self.no))
        missing = [k for k in _HEADER_KEYS if k not in seen]
        if missing:
            raise self.fail(f"header lacks {', '.join(missing)}")

        def field(key, parse):
            value, line = seen[key]
            try:
                return parse(value)
            except ValueError:
                raise self.fail(f"malformed '{key}' line: {value[:40]!r}", line) from None

        name = field("name", unescape)
        nranks, = field("nranks", lambda v: _ints(v, 1))
        first, count = field("ranks", lambda v: _ints(v, 2))
        index, nfiles = field("file", lambda v: _ints(v, 2))
        metrics = field("metrics", _metrics)
        runs = field("executions", _runs)
        if not (first + count <= nranks and index < nfiles):
            raise self.fail("header ranks/file out of range", seen["file"][1])
        covered = sum(k for _, k in runs)
        if covered != count:        # checked before expanding: a corrupt k may be huge
            raise self.fail(f"'executions' covers {covered} ranks, the file holds {count}",
                            seen["executions"][1])
        if seen["unit"][0] != "ns":
            raise self.fail(f"unknown timer unit {seen['unit'][0][:40]!r}", seen["unit"][1])
        return Header(name=name, nranks=nranks, first_rank=first, rank_count=count,
                      file_index=index, file_count=nfiles, metrics=metrics,
                      executions=[n for n, k in runs for _ in range(k)],
                      unit="ns", created=seen["created"][0], version=seen["version"][0])

    def name(self, raw: bytes) -> str:
        try:
            return unescape(self.text(raw))
        except ValueError as e:
            raise self.fail(f"bad name: {e}") from None

    def event(self, line: bytes, names: List[str], h: Header,
              exec_base: np.ndarray) -> Tuple[Tuple[str, ...], EventData]:
        if line == b"end":
            raise self.fail("fewer event lines than 'events' says")
        parts = line.split(b"|")
        if len(parts) != 3 + h.rank_count:
            raise self.fail(f"event line has {len(parts)} '|'-separated fields, expected "
                            f"{3 + h.rank_count} (path, loop, consistent, one per rank)")
        ids = parts[0].split(b"<")
        if not all(i.isdigit() and int(i) < len(names) for i in ids) or parts[1] not in (b"0", b"1", b"2"):
            raise self.fail("bad callpath or loop field")
        path = tuple(names[int(i)] for i in ids)
        loop = int(parts[1])
        consistent_keys = [k for k, c in h.metrics if c]
        other_keys = [k for k, c in h.metrics if not c]
        cons = parts[2].split(b",") if parts[2] else []
        if len(cons) > len(consistent_keys):
            raise self.fail("too many consistent metric values")
        try:
            consistent = {k: float(v) for k, v in zip(consistent_keys, cons) if v}
        except ValueError:
            raise self.fail("bad consistent metric value") from None
        counts = np.zeros(int(exec_base[-1]), dtype=np.int64)
        tokens: List[bytes] = []
        values: List[List[float]] = [[] for _ in other_keys]
        for r, fld in enumerate(parts[3:]):
            if not fld:
                continue
            groups = fld.split(b";")
            if len(groups) > h.executions[r]:
                raise self.fail(f"rank {h.first_rank + r} has {len(groups)} executions, "
                                f"header says {h.executions[r]}")
            base = int(exec_base[r])
            for e, group in enumerate(groups):
                if not group:
                    continue
                occ = group.split(b"+")
                if loop == 2 and len(occ) > 1:
                    raise self.fail("loop-2 event with several values in one execution")
                counts[base + e] = len(occ)
                if b"," in group:
                    self.split_metrics(occ, tokens, values)
                else:
                    tokens.extend(occ)
                    for col in values:
                        col.extend([_NAN] * len(occ))
        try:
            times = np.array(tokens, dtype=np.bytes_).astype(np.int64) if tokens else np.zeros(0, np.int64)
        except (ValueError, OverflowError):
            bad = next((t for t in tokens if not _is_int64(t)), tokens[0])
            raise self.fail(f"bad time value {bad[:40]!r} (not a 64-bit integer)") from None
        offsets = np.concatenate([[0], np.cumsum(counts)])
        metrics = {k: np.array(col, dtype=np.float64) for k, col in zip(other_keys, values)}
        return path, EventData(loop, consistent, offsets, times, metrics)

    def split_metrics(self, occ: List[bytes], tokens: List[bytes], values: List[List[float]]) -> None:
        width = len(values)
        for o in occ:
            items = o.split(b",")
            if len(items) > width + 1:
                raise self.fail("too many metric values in an occurrence")
            tokens.append(items[0])
            items.extend([b""] * (width + 1 - len(items)))
            try:
                for col, tok in zip(values, items[1:]):
                    col.append(_parse_value(tok))
            except ValueError:
                raise self.fail(f"bad metric value in {o[:40]!r}") from None


def _is_int64(token: bytes) -> bool:
    try:
        return -2**63 <= int(token) < 2**63
    except ValueError:
        return False


def _ints(text: str, n: int) -> List[int]:
    values = [int(x) for x in text.split(" ")]
    if len(values) != n or min(values) < 0:
        raise ValueError(text)
    return values


def _metrics(text: str) -> List[Tuple[str, bool]]:
    metrics = []
    for item in filter(None, text.split(" ")):    # " " only: keys may hold other whitespace
        key, flag = item.rsplit(":", 1)
        if flag not in ("0", "1"):
            raise ValueError(item)
        metrics.append((unescape(key), flag == "0"))
    keys = [k for k, _ in metrics]
    if len(set(keys)) != len(keys) or "time" in keys:
        raise ValueError("a metric key is repeated or is 'time'")
    return metrics


def _runs(text: str) -> List[Tuple[int, int]]:
    """The ``executions`` value as (executions, ranks) runs."""
    runs = []
    for item in filter(None, text.split(",")):
        n, _, k = item.partition("*")
        runs.append((int(n), int(k) if k else 1))
    if any(n < 0 or k < 1 for n, k in runs):
        raise ValueError(text)
    return runs
