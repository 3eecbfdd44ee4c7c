"""The reader of the profile format (docs/format.md): one file to a ParsedFile.

The header, name table and sections are parsed here, in Python. The event
lines, which hold the values, are parsed by the C extension ``_parse``
(tinyprof/format/_parse.c) straight into flat numpy arrays, releasing the GIL.
Its pure-Python twin, the reference, is pyparser.py: it reads version-1
files, it is used when the extension is not built or ``TINYPROF_PURE=1``,
and it reparses any file the C parser rejects, so that errors carry its
messages. tests/format/test_reader_parity.py holds the two to the same results.

The model of a file as read is parsed.py's, its callpaths callpath.py's; the
names other layers use are re-exported here (``__all__``).
"""
from __future__ import annotations

import os
import re
import zlib
from typing import Callable, Dict, List, Optional, Tuple, cast

import numpy as np

from .._env import flag
from ..errors import FormatError
from . import meta_section
from .callpath import Callpath, Path
from .encoding import FORMAT_VERSION, MAX_NATURAL, RUN_RE, Header, natural
from .output_dir import open_regular
from .parsed import EventData, ParsedFile, Values
from .pyparser import ReferenceParser, unescape_canonical

try:
    from . import _parse
except ImportError:         # not built: the reference parser does it all
    _parse = None  # type: ignore[assignment]  # a module or None, which mypy cannot type

__all__ = ["Callpath", "EventData", "KNOWN_SECTIONS", "ParsedFile", "Path", "engine", "parse_data",
           "parse_file", "read_regular"]

# What _parse.parse_events returns, its Blocks typed as memoryviews: a Block
# exports the buffer protocol, but numpy's stubs take only a few concrete
# buffer types in np.frombuffer (not collections.abc.Buffer).
_Blocks = Tuple[int, memoryview, memoryview, memoryview, memoryview, memoryview, memoryview,
                memoryview, memoryview, memoryview, memoryview, List[memoryview]]

# Sections whose payloads the reader keeps (ParsedFile.sections); it skips others.
KNOWN_SECTIONS = frozenset({"mpi", "trace", "delta", "meta"})

_HEADER_KEYS = ("name", "run", "set", "nranks", "ranks", "file", "unit", "metrics", "created",
                "version", "executions")          # version 2: exactly these, in this order
_V1_KEYS = tuple(k for k in _HEADER_KEYS if k not in ("run", "set"))
MAX_NRANKS = 2**31 - 1
_MIN_RANK_BOUND = 2**20         # ranks a file may hold, whatever its size
_CREATED_RE = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_VERSION_RE = re.compile("[!-~]+")
_ANY = re.compile(".*", re.S)
_END_RE = re.compile(rb"end ([0-9a-f]{8})")
_SECTION_RE = re.compile(rb"section ([a-z][a-z0-9_.-]{0,63}) (0|[1-9][0-9]*)")


def parse_file(path: str, parser: str = "auto") -> ParsedFile:
    """Parse one file of a profile (format version 1 or 2); raises FormatError
    naming file and line, in time and memory linear in the file's size.

    ``parser`` (for tests): ``"auto"`` the C parser when built and not
    switched off (``TINYPROF_PURE=1``), else the reference; ``"python"`` the
    reference alone; ``"c"`` the C parser alone, whose FormatError then names
    no line.
    """
    return parse_data(path, read_regular(path), parser)


def parse_data(path: str, data: bytes, parser: str = "auto") -> ParsedFile:
    """:func:`parse_file` of the bytes ``data`` (``path`` names them in errors)."""
    return _Parser(path, data, engine(parser)).parse()


def engine(parser: str) -> str:
    """What ``parser`` (``"auto"``, ``"python"`` or ``"c"``) means here:
    ``"auto"`` stays (the C parser, the reference naming any error it finds)
    when the C parser is built and not switched off (``TINYPROF_PURE=1``),
    else it is ``"python"``; ``"c"`` without it is a RuntimeError."""
    if parser == "auto":
        pure = _parse is None or flag("TINYPROF_PURE", False)
        return "python" if pure else "auto"
    if parser == "c" and _parse is None:
        raise RuntimeError("tinyprof.format._parse, the C parser, is not built")
    return parser


def read_regular(path: str) -> bytes:
    """The bytes of ``path``, which must be a regular file without holes
    (``output_dir.open_regular``): a FIFO, a device or a sparse file is a
    FormatError, never a hang. Reads at most the size fstat gave."""
    try:
        fd = open_regular(path)
    except OSError as e:
        raise FormatError(path, None, f"cannot read: {e.strerror}") from None
    try:
        with open(fd, "rb", closefd=False) as f:
            return f.read(os.fstat(fd).st_size)
    except OSError as e:
        raise FormatError(path, None, f"cannot read: {e.strerror}") from None
    finally:
        os.close(fd)


class _Parser(ReferenceParser):
    """A whole file: the header and sections here, the name table and event
    lines through the C parser (:meth:`body_fast`), else the reference's."""

    def parse(self) -> ParsedFile:
        if not self.data.startswith(b"tinyprof "):
            first = self.data[:40].split(b"\n")[0]
            raise self.fail(f"not a tinyprof profile (first line {first!r})", 1)
        text = self.keyed("tinyprof")
        try:
            version = natural(text)
        except ValueError:
            version = 0
        if not version:
            raise self.fail(f"bad format version: {text[:40]!r}")
        if version > FORMAT_VERSION:
            raise self.fail(f"written by a newer tinyprof (format version {version}); "
                            f"this reader supports versions 1 to {FORMAT_VERSION}")
        self.strict = version >= 2
        self.gaps = version >= 3        # "*k;" skips executions (docs/format.md)
        if self.strict:
            self.check_end()
        h = self.header(version)
        exec_base = np.concatenate([[0], np.cumsum(h.executions, dtype=np.int64)])
        got = self.body_fast(h) if self.strict and self.parser != "python" else None
        if got is None:     # the reference: reads version 1, and says what is wrong
            got = self.body(h, exec_base)
        starts: Dict[str, int] = {}
        sections = self.sections(starts) if self.strict else self.end_v1()
        metadata = {}
        if "meta" in sections:
            if h.file_index != 0:
                raise self.fail("a meta section outside file 0 of its set", starts["meta"] - 1)
            metadata = meta_section.parse(sections["meta"], self.path, starts["meta"])
        return ParsedFile(self.path, h, exec_base, *got, sections, starts, len(self.data),
                          metadata)

    def body_fast(self, h: Header) -> Optional[Tuple[List[str], List[int], List[int], Values]]:
        """Version 2: the name table, and the event lines through the C parser:
        names, parent lines, name ids and values. None if anything is wrong,
        back at the name table: the reference then reparses it all, to raise
        its FormatError; in ``parser="c"`` mode, a FormatError here."""
        mark = self.pos, self.no
        try:
            names = [self.name(self.next_line()) for _ in range(self.count("names", exact=False))]
            nevents = self.count("events", exact=False)
        except FormatError:
            names, nevents = [], -1
        cons_keys = [k for k, c in h.metrics if c]
        other_keys = [k for k, c in h.metrics if not c]
        got = nevents >= 0 and _parse.parse_events(
            self.data, self.pos, self.stop, nevents, len(names),
            np.asarray(h.executions, np.int64).tobytes(), len(cons_keys), len(other_keys),
            self.gaps)
        if not got:
            if self.parser == "c":
                raise self.fail("the C parser rejects the name table or event lines", mark[1] + 1)
            self.pos, self.no = mark
            return None
        (end, parents, ids, loops, cons_block, given_block, times_block, vstart_block, slots_block,
         counts_block, sstart_block, columns) = cast(_Blocks, got)
        self.pos, self.no = end, self.no + nevents
        cons = np.frombuffer(cons_block, np.float64).reshape(nevents, len(cons_keys)).tolist()
        given = np.frombuffer(given_block, np.bool_).reshape(nevents, len(cons_keys)).tolist()
        consistent = [{k: x for k, x, g in zip(cons_keys, xs, gs) if g} for xs, gs in zip(cons, given)]
        times, slots, counts, vstart, sstart = (
            np.frombuffer(b, np.int64)
            for b in (times_block, slots_block, counts_block, vstart_block, sstart_block))
        values = Values(np.frombuffer(loops, np.int8).tolist(), consistent, times,
                        {k: np.frombuffer(c, np.float64) for k, c in zip(other_keys, columns)},
                        slots, counts, vstart, sstart)
        return (names, np.frombuffer(parents, np.int64).tolist(), np.frombuffer(ids, np.int64).tolist(),
                values)

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
        name = field("name", lambda v: unescape_canonical(v, strict))
        run, kind, number, base = "", "", 0, None
        if strict:
            run = field("run", _matching(RUN_RE))
            kind, number, base = field("set", _set)
        nranks = field("nranks", lambda v: natural(v, MAX_NRANKS))
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
                      set_number=number, set_base=base, format_version=version)

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
                n = natural(m[2])
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


def _matching(pattern: re.Pattern[str]) -> Callable[[str], str]:
    """A header value parser: the value itself if it matches ``pattern``."""
    def parse(text: str) -> str:
        if not pattern.fullmatch(text):
            raise ValueError(text)
        return text
    return parse


def _pair(text: str) -> Tuple[int, int]:
    a, b = text.split(" ")
    return natural(a), natural(b)


def _set(text: str) -> Tuple[str, int, Optional[int]]:
    """``flush N``, ``snapshot K`` or ``snapshot K over J`` (J < K: a delta)."""
    kind, number, *over = text.split(" ")
    base = None
    if over:
        if kind != "snapshot" or len(over) != 2 or over[0] != "over":
            raise ValueError(text)
        base = natural(over[1])
        if base >= natural(number):
            raise ValueError(text)
    if kind not in ("flush", "snapshot"):
        raise ValueError(text)
    return kind, natural(number), base


def _metrics(text: str, strict: bool) -> List[Tuple[str, bool]]:
    metrics = []
    # " " only: keys may hold other whitespace; version 1 allowed repeated spaces
    items = text.split(" ") if strict and text else filter(None, text.split(" "))
    for item in items:
        key, flag = item.rsplit(":", 1)
        if flag not in ("0", "1"):
            raise ValueError(item)
        metrics.append((unescape_canonical(key, strict, key=True), flag == "0"))
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
        run = (natural(n), natural(k) if star else 1)
        if run[1] < 1 or (strict and ((star and run[1] < 2) or (runs and runs[-1][0] == run[0]))):
            raise ValueError(text)
        runs.append(run)
    return runs
