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
import stat
import time
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._version import __version__

FORMAT_VERSION = 2
NO_RUN = "0" * 16              # the run id of writers that were given none
# Sections whose payloads the reader keeps (ParsedFile.sections); it skips others.
KNOWN_SECTIONS = frozenset({"mpi", "trace", "delta"})
_NAN = float("nan")
_RUN_RE = re.compile("[0-9a-f]{16}")


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
    run: str = field(default_factory=lambda: env_run_id() or NO_RUN)
    set_kind: str = "flush"        # "flush" | "snapshot"
    set_number: int = 0
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
    return value if _RUN_RE.fullmatch(value) else None


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


def encode_file(header: Header, names: Sequence[str], parents: Sequence[int],
                ids: Sequence[int], loops: Sequence[int], consistent: Sequence[bytes],
                fields: Sequence[Sequence[bytes]],
                sections: Sequence[Tuple[str, bytes]] = ()) -> bytes:
    """The whole file. Line ``i`` is the callpath ending in name ``ids[i]`` whose
    parent is on line ``parents[i]`` (-1: a root callpath); ``fields[r][i]`` is
    rank ``first_rank+r``'s field of line ``i``."""
    metrics = " ".join(f"{escape(k, key=True)}:{0 if c else 1}" for k, c in header.metrics)
    head = [
        f"tinyprof {FORMAT_VERSION}",
        f"name {escape(header.name)}",
        f"run {header.run}",
        f"set {header.set_kind} {header.set_number}",
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
    out = ["\n".join(head).encode("utf-8", "surrogatepass")]
    for i, (parent, name_id) in enumerate(zip(parents, ids)):
        path = f"{parent}:{name_id}" if parent >= 0 else str(name_id)
        prefix = f"{path}|{loops[i]}|".encode() + consistent[i]
        out.append(b"|".join([prefix, *(f[i] for f in fields)]))
    for name, payload in sections:
        out += [f"section {name} {len(payload)}".encode(), bytes(payload)]
    crc = 0          # over the parts as joined below: no copy of the whole file
    for part in out:
        crc = zlib.crc32(b"\n", zlib.crc32(part, crc))
    out += [b"end %08x" % crc, b""]
    return b"\n".join(out)


def encode_consistent(values: Dict[str, float], keys: Sequence[str]) -> bytes:
    """The consistent-metrics field of one callpath, in header order."""
    return ",".join(format_value(values[k]) if k in values else "" for k in keys).rstrip(",").encode()


def relabel(data: bytes, kind: str, number: int) -> bytes:
    """The bytes of a version-2 file as a file of set ``kind`` ``number``: the
    same data, its ``set`` line and checksum rewritten."""
    head, sep, rest = data.partition(b"\nset ")
    body = head + sep + f"{kind} {number}".encode() + rest[rest.index(b"\n"):]
    end = body.rindex(b"\nend ") + 1
    return body[:end] + b"end %08x\n" % zlib.crc32(memoryview(body)[:end])


# -- reader -------------------------------------------------------------------

@dataclass
class EventData:
    """One callpath of one file: values of all its ranks, flattened.

    Execution ``e`` of the file's rank ``r`` holds ``times[offsets[j]:offsets[j+1]]``
    with ``j = exec_base[r] + e`` (``exec_base`` is per file). The reader stores
    only the executions that have values (``slots``, increasing, with their
    occurrence ``counts``); ``offsets`` is built on first use, so that reading
    costs no memory per execution of the file on every line.
    """

    loop: int
    consistent: Dict[str, float]
    times: np.ndarray
    metrics: Dict[str, np.ndarray]
    slots: np.ndarray
    counts: np.ndarray
    nexec: int                     # executions of all ranks of the file

    @cached_property
    def offsets(self) -> np.ndarray:
        counts = np.zeros(self.nexec + 1, np.int64)
        counts[self.slots + 1] = self.counts
        return np.cumsum(counts)


@dataclass
class ParsedFile:
    """One file as read. Event line ``i`` is the callpath ending in name
    ``names[ids[i]]`` below line ``parents[i]`` (-1: a root callpath);
    ``events`` maps the callpaths, as tuples of names, to their lines' data."""

    path: str
    header: Header
    exec_base: np.ndarray
    names: List[str]
    parents: List[int]
    ids: List[int]
    lines: List[EventData]
    sections: Dict[str, bytes]          # payloads of the KNOWN_SECTIONS present
    section_lines: Dict[str, int] = field(default_factory=dict)   # line where each payload starts

    @cached_property
    def paths(self) -> List[Tuple[str, ...]]:
        """The callpath of each event line. Built on first use: the tuples take
        memory quadratic in the depth."""
        paths: List[Tuple[str, ...]] = []
        for parent, name_id in zip(self.parents, self.ids):
            paths.append((paths[parent] if parent >= 0 else ()) + (self.names[name_id],))
        return paths

    @cached_property
    def events(self) -> Dict[Tuple[str, ...], EventData]:
        return dict(zip(self.paths, self.lines))


_HEADER_KEYS = ("name", "run", "set", "nranks", "ranks", "file", "unit", "metrics", "created",
                "version", "executions")          # version 2: exactly these, in this order
_V1_KEYS = tuple(k for k in _HEADER_KEYS if k not in ("run", "set"))
MAX_NATURAL = 2**63 - 1
MAX_NRANKS = 2**31 - 1
_MIN_RANK_BOUND = 2**20         # ranks a file may hold, whatever its size
_NAT = re.compile("0|[1-9][0-9]*")
_NAT_B = re.compile(rb"0|[1-9][0-9]*")
_CREATED_RE = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_VERSION_RE = re.compile("[!-~]+")
_ANY = re.compile(".*", re.S)
_END_RE = re.compile(rb"end ([0-9a-f]{8})")
_SECTION_RE = re.compile(rb"section ([a-z][a-z0-9_.-]{0,63}) (0|[1-9][0-9]*)")
_TIME_RE = re.compile(rb"0|-?[1-9][0-9]*")
_TIME_CHARS = 20                # len("-9223372036854775808")
_POW10 = 10 ** np.arange(20, dtype=np.uint64)


def parse_file(path: str) -> ParsedFile:
    """Parse one file of a profile (format version 1 or 2); raises FormatError
    naming file and line, in time and memory linear in the file's size."""
    return _Parser(path, _read_regular(path)).parse()


def _read_regular(path: str) -> bytes:
    """The bytes of ``path``, which must be a regular file: a FIFO or a device
    is a FormatError, never a hang. Reads at most the size fstat gave."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise FormatError(path, None, f"cannot read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(path, None, "not a regular file")
        with open(fd, "rb", closefd=False) as f:
            return f.read(st.st_size)
    except OSError as e:
        raise FormatError(path, None, f"cannot read: {e.strerror}") from None
    finally:
        os.close(fd)


def _natural(token, limit: int = MAX_NATURAL) -> int:
    """A str or bytes natural in its one spelling, at most ``limit``; else ValueError.
    The length is checked first: a huge token never becomes a huge int."""
    pattern = _NAT if isinstance(token, str) else _NAT_B
    if len(token) > len(str(limit)) or not pattern.fullmatch(token) or int(token) > limit:
        raise ValueError(token)
    return int(token)


class _Parser:
    def __init__(self, path: str, data: bytes) -> None:
        self.path, self.data = path, data
        self.pos = self.no = 0          # next byte and number of lines read
        self.stop = len(data)           # end of the lines: version 2, the end line
        self.strict = True              # version 2 rules
        self.canonical: Dict[bytes, float] = {b"": _NAN}     # metric value tokens checked

    def fail(self, problem: str, line: Optional[int] = None) -> FormatError:
        return FormatError(self.path, line or self.no, problem)

    def next_line(self) -> bytes:
        if self.pos >= self.stop:
            raise self.fail("truncated: file ends before the 'end' line", self.no + 1)
        end = self.data.find(b"\n", self.pos, self.stop)
        self.no += 1
        if end < 0:
            raise self.fail("truncated: the last line has no newline")
        line = self.data[self.pos:end]
        self.pos = end + 1
        return line

    def lines_left(self) -> int:
        return self.data.count(b"\n", self.pos, self.stop)

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

    def count(self, key: str) -> int:
        """The value of a ``names``/``events`` line, bounded by the lines left."""
        value = self.keyed(key)
        try:
            n = _natural(value)
        except ValueError:
            raise self.fail(f"bad {key} count: {value[:40]!r}") from None
        left = self.lines_left()
        if n > left:
            raise self.fail(f"'{key} {n}', but only {left} lines follow")
        return n

    def parse(self) -> ParsedFile:
        if not self.data.startswith(b"tinyprof "):
            first = self.data[:40].split(b"\n")[0]
            raise self.fail(f"not a tinyprof profile (first line {first!r})", 1)
        text = self.keyed("tinyprof")
        try:
            version = _natural(text)
        except ValueError:
            version = 0
        if not version:
            raise self.fail(f"bad format version: {text[:40]!r}")
        if version > FORMAT_VERSION:
            raise self.fail(f"written by a newer tinyprof (format version {version}); "
                            f"this reader supports versions 1 to {FORMAT_VERSION}")
        self.strict = version == 2
        if self.strict:
            self.check_end()
        h = self.header(version)
        names = [self.name(self.next_line()) for _ in range(self.count("names"))]
        nevents = self.count("events")
        exec_base = np.concatenate([[0], np.cumsum(h.executions, dtype=np.int64)])
        lines, bases = _Lines(), exec_base.tolist()
        for i in range(nevents):
            self.event(self.next_line(), i, len(names), h, bases, lines)
        starts: Dict[str, int] = {}
        sections = self.sections(starts) if self.strict else self.end_v1()
        return ParsedFile(self.path, h, exec_base, names, lines.parents, lines.ids,
                          lines.data, sections, starts)

    def check_end(self) -> None:
        """Version 2: the end line and its CRC-32, before anything else is parsed."""
        data = self.data
        last = data.rfind(b"\n", 0, len(data) - 1) + 1
        m = _END_RE.fullmatch(data, last, len(data) - 1) if data.endswith(b"\n") else None
        if m is None:
            raise self.fail("truncated: the file does not end in an 'end <crc32>' line",
                            data.count(b"\n") + 1)
        crc = zlib.crc32(memoryview(data)[:last])
        if crc != int(m[1], 16):
            raise FormatError(self.path, None, f"checksum mismatch: the bytes give {crc:08x}, "
                                               f"the end line says {m[1].decode()}")
        self.stop = last

    def header(self, version: int) -> Header:
        seen: Dict[str, Tuple[str, int]] = {}      # key -> (value, line number)
        if self.strict:
            for key in _HEADER_KEYS:
                seen[key] = (self.keyed(key), self.no)
        else:       # version 1: any order; keys it does not know are ignored
            while True:
                pos, no = self.pos, self.no
                key, _, value = self.text(self.next_line()).partition(" ")
                if key == "names":
                    self.pos, self.no = pos, no
                    break
                seen.setdefault(key, (value, no + 1))
            missing = [k for k in _V1_KEYS if k not in seen]
            if missing:
                raise self.fail(f"header lacks {', '.join(missing)}")

        def field(key, parse):
            value, line = seen[key]
            try:
                return parse(value)
            except ValueError:
                raise self.fail(f"malformed '{key}' line: {value[:40]!r}", line) from None

        strict = self.strict
        name = field("name", lambda v: _unescape_canonical(v, strict))
        run, kind, number = "", "", 0
        if strict:
            run = field("run", _matching(_RUN_RE))
            kind, number = field("set", _set)
        nranks = field("nranks", lambda v: _natural(v, MAX_NRANKS))
        first, count = field("ranks", _pair)
        index, nfiles = field("file", _pair)
        if not (nranks >= 1 and count >= 1 and first + count <= nranks):
            raise self.fail("header ranks out of range", seen["ranks"][1])
        if not index < nfiles <= nranks:
            raise self.fail("header file index out of range", seen["file"][1])
        size = len(self.data)
        if count > max(size, _MIN_RANK_BOUND):
            raise self.fail(f"{count} ranks in a file of {size} bytes", seen["ranks"][1])
        if seen["unit"][0] != "ns":
            raise self.fail(f"unknown timer unit {seen['unit'][0][:40]!r}", seen["unit"][1])
        metrics = field("metrics", lambda v: _metrics(v, strict))
        created = field("created", _matching(_CREATED_RE if strict else _ANY))
        release = field("version", _matching(_VERSION_RE if strict else _ANY))
        runs = field("executions", lambda v: _runs(v, strict))
        line = seen["executions"][1]
        covered = sum(k for _, k in runs)
        if covered != count:        # checked before expanding: a corrupt k may be huge
            raise self.fail(f"'executions' covers {covered} ranks, the file holds {count}", line)
        total = sum(n * k for n, k in runs)
        if total > size + count:
            raise self.fail(f"{total} executions in a file of {size} bytes", line)
        return Header(name=name, nranks=nranks, first_rank=first, rank_count=count,
                      file_index=index, file_count=nfiles, metrics=metrics,
                      executions=[n for n, k in runs for _ in range(k)], unit="ns",
                      created=created, version=release, run=run, set_kind=kind,
                      set_number=number, format_version=version)

    def name(self, raw: bytes) -> str:
        try:
            return _unescape_canonical(self.text(raw), self.strict)
        except FormatError:
            raise
        except ValueError as e:
            raise self.fail(f"bad name: {e}") from None

    def index(self, token: bytes, bound: int, what: str) -> int:
        try:
            return _natural(token, bound - 1)
        except ValueError:
            raise self.fail(f"bad callpath: {what} {token[:40]!r} (must be below {bound})") from None

    def event(self, line: bytes, i: int, nnames: int, h: Header, exec_base: List[int],
              lines: "_Lines") -> None:
        parts = line.split(b"|")
        if len(parts) != 3 + h.rank_count:
            raise self.fail(f"event line has {len(parts)} '|'-separated fields, expected "
                            f"{3 + h.rank_count} (path, loop, consistent, one per rank)")
        if self.strict:
            parent_token, colon, id_token = parts[0].rpartition(b":")
            parent = self.index(parent_token, i, "parent line") if colon else -1
            lines.add(self, parent, self.index(id_token, nnames, "name id"))
        else:
            lines.add_v1(self, tuple(self.index(t, nnames, "name id") for t in parts[0].split(b"<")))
        if parts[1] not in (b"0", b"1", b"2"):
            raise self.fail(f"bad loop field {parts[1][:40]!r}")
        loop = int(parts[1])
        consistent_keys = [k for k, c in h.metrics if c]
        other_keys = [k for k, c in h.metrics if not c]
        cons = parts[2].split(b",") if parts[2] else []
        if len(cons) > len(consistent_keys):
            raise self.fail("too many consistent metric values")
        if self.strict and cons and not cons[-1]:
            raise self.fail("trailing empty consistent metric value")
        consistent = {k: self.value(v, "consistent") for k, v in zip(consistent_keys, cons) if v}
        slots: List[int] = []
        counts: List[int] = []
        tokens: List[bytes] = []
        values: List[List[bytes]] = [[] for _ in other_keys]    # b"": missing
        for r, fld in enumerate(parts[3:]):
            if not fld:
                continue
            if self.strict and fld.endswith(b";"):
                raise self.fail(f"trailing empty execution in the field of rank {h.first_rank + r}")
            groups = fld.split(b";")
            if len(groups) > h.executions[r]:
                raise self.fail(f"rank {h.first_rank + r} has {len(groups)} executions, "
                                f"header says {h.executions[r]}")
            base = exec_base[r]
            for e, group in enumerate(groups):
                if not group:
                    continue
                occ = group.split(b"+")
                if loop == 2 and len(occ) > 1:
                    raise self.fail("loop-2 event with several values in one execution")
                slots.append(base + e)
                counts.append(len(occ))
                if b"," in group:
                    self.split_metrics(occ, tokens, values)
                else:
                    tokens.extend(occ)
                    for col in values:
                        col.extend([b""] * len(occ))
        times = self.times(tokens)
        metrics = {k: self.column(col) for k, col in zip(other_keys, values)}
        lines.data.append(EventData(loop, consistent, times, metrics, np.array(slots, np.int64),
                                    np.array(counts, np.int64), exec_base[-1]))

    def times(self, tokens: List[bytes]) -> np.ndarray:
        """The time tokens as int64, each in its one spelling. Vectorised: numpy
        converts leniently (as ``int()``: signs, spaces, ``_``, leading zeros),
        and any such extra makes a token longer than the canonical spelling of
        its value, so equal total lengths mean every token is canonical."""
        if not tokens:
            return np.zeros(0, np.int64)
        try:        # "S20": a huge token is cut, not a wide array (and then too long)
            times = np.array(tokens, dtype="S20").astype(np.int64)
        except (ValueError, OverflowError):
            times = None
        if times is not None and _spelled_length(times) == sum(map(len, tokens)):
            return times
        bad = next((t for t in tokens if not _is_time(t)), tokens[0])
        raise self.fail(f"bad time value {bad[:40]!r} (not a 64-bit integer in its one spelling)")

    def value(self, token: bytes, what: str) -> float:
        """A metric value, accepted only in its canonical spelling."""
        got = self.canonical.get(token)
        if got is None:
            try:
                got = float(token)
            except ValueError:
                got = None
            if got is None or format_value(got).encode() != token:
                raise self.fail(f"bad {what} metric value {token[:40]!r}")
            self.canonical[token] = got
        return got

    def split_metrics(self, occ: List[bytes], tokens: List[bytes], values: List[List[bytes]]) -> None:
        width = len(values)
        for o in occ:
            items = o.split(b",")
            if len(items) > width + 1:
                raise self.fail("too many metric values in an occurrence")
            if self.strict and not items[-1]:
                raise self.fail("trailing empty metric value in an occurrence")
            tokens.append(items[0])
            items.extend([b""] * (width + 1 - len(items)))
            for col, tok in zip(values, items[1:]):
                col.append(tok)

    def column(self, tokens: List[bytes]) -> np.ndarray:
        """An inconsistent metric's tokens (b"": missing) as doubles; each
        distinct token is checked once."""
        known = self.canonical
        for token in set(tokens).difference(known):
            self.value(token, "inconsistent")
        return np.fromiter(map(known.__getitem__, tokens), np.float64, len(tokens))

    def sections(self, starts: Dict[str, int]) -> Dict[str, bytes]:
        """Version 2: the sections up to the end line; payloads of known ones,
        and in ``starts`` the line where each of those begins."""
        kept: Dict[str, bytes] = {}
        seen = set()
        while self.pos < self.stop:
            m = _SECTION_RE.fullmatch(self.next_line())
            if m is None:
                raise self.fail("expected 'section <name> <bytes>' or the end line "
                                "after the event lines")
            name, start = m[1].decode(), self.pos
            try:
                n = _natural(m[2])
            except ValueError:
                n = MAX_NATURAL
            if n >= self.stop - start or self.data[start + n] != 0x0A:
                raise self.fail(f"section {name!r} of {m[2][:40].decode()} bytes does not "
                                f"fit the {self.stop - start} bytes left before the end line")
            if name in seen:
                raise self.fail(f"section {name!r} appears twice")
            seen.add(name)
            if name in KNOWN_SECTIONS:
                kept[name] = self.data[start:start + n]
                starts[name] = self.no + 1
            self.no += self.data.count(b"\n", start, start + n + 1)
            self.pos = start + n + 1
        return kept

    def end_v1(self) -> Dict[str, bytes]:
        """Version 1: the line ``end``, then nothing."""
        if self.next_line() != b"end":
            raise self.fail("expected 'end' after the event lines")
        if self.pos != len(self.data):
            raise self.fail("data after the 'end' line")
        return {}


class _Lines:
    """The event lines' callpaths as (parent line, name id), checked as they come."""

    def __init__(self) -> None:
        self.parents: List[int] = []
        self.ids: List[int] = []
        self.data: List[EventData] = []
        self.seen: set = set()                      # (parent, id) pairs
        self.v1: Dict[Tuple[int, ...], int] = {}    # version 1: id path -> line

    def add(self, parser: _Parser, parent: int, name_id: int) -> None:
        if (parent, name_id) in self.seen:
            raise parser.fail("callpath appears twice (same parent line and name)")
        self.seen.add((parent, name_id))
        self.parents.append(parent)
        self.ids.append(name_id)

    def add_v1(self, parser: _Parser, ids: Tuple[int, ...]) -> None:
        """A version-1 path of name ids from the root."""
        parent = self.v1.get(ids[:-1], -1)
        if len(ids) > 1 and parent < 0:
            raise parser.fail("callpath's parent is not on an earlier line")
        self.v1[ids] = len(self.parents)
        self.add(parser, parent, ids[-1])


def _matching(pattern: "re.Pattern[str]") -> Callable[[str], str]:
    """A header value parser: the value itself if it matches ``pattern``."""
    def parse(text: str) -> str:
        if not pattern.fullmatch(text):
            raise ValueError(text)
        return text
    return parse


def _unescape_canonical(text: str, strict: bool, key: bool = False) -> str:
    """Unescape; with ``strict``, only the escapes the writer makes are allowed."""
    plain = unescape(text)
    if strict and escape(plain, key) != text:
        raise ValueError(f"not canonically escaped: {text[:40]!r}")
    return plain


def _spelled_length(times: np.ndarray) -> int:
    """Total length of the canonical decimal spellings of int64 ``times``."""
    negative = times < 0
    magnitude = times.view(np.uint64).copy()
    magnitude[negative] = np.uint64(0) - magnitude[negative]      # wraps: |-2^63| = 2^63
    digits = np.maximum(np.searchsorted(_POW10, magnitude, side="right"), 1)
    return int(digits.sum()) + int(negative.sum())


def _is_time(token: bytes) -> bool:
    return (len(token) <= _TIME_CHARS and _TIME_RE.fullmatch(token) is not None
            and -2**63 <= int(token) < 2**63)


def _pair(text: str) -> Tuple[int, int]:
    a, b = text.split(" ")
    return _natural(a), _natural(b)


def _set(text: str) -> Tuple[str, int]:
    kind, number = text.split(" ")
    if kind not in ("flush", "snapshot"):
        raise ValueError(text)
    return kind, _natural(number)


def _metrics(text: str, strict: bool) -> List[Tuple[str, bool]]:
    metrics = []
    # " " only: keys may hold other whitespace; version 1 allowed repeated spaces
    items = text.split(" ") if strict and text else filter(None, text.split(" "))
    for item in items:
        key, flag = item.rsplit(":", 1)
        if flag not in ("0", "1"):
            raise ValueError(item)
        metrics.append((_unescape_canonical(key, strict, key=True), flag == "0"))
    keys = [k for k, _ in metrics]
    if len(set(keys)) != len(keys) or "time" in keys:
        raise ValueError("a metric key is repeated or is 'time'")
    return metrics


def _runs(text: str, strict: bool) -> List[Tuple[int, int]]:
    """The ``executions`` value as (executions, ranks) runs; version 2 only in
    its canonical form (``n*k`` with k >= 2, no two adjacent runs of the same n)."""
    runs: List[Tuple[int, int]] = []
    for item in (text.split(",") if strict else filter(None, text.split(","))):
        n, star, k = item.partition("*")
        run = (_natural(n), _natural(k) if star else 1)
        if run[1] < 1 or strict and ((star and run[1] < 2) or (runs and runs[-1][0] == run[0])):
            raise ValueError(text)
        runs.append(run)
    return runs
