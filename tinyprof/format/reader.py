"""The reader of the profile format (docs/format.md): one file to a ParsedFile.

The header, name table and sections are parsed here, in Python. The event
lines, which hold the values, are parsed by the C extension ``_parse``
(tinyprof/format/_parse.c) straight into flat numpy arrays, releasing the GIL. This
module keeps the pure-Python parser as the reference: it reads version-1
files, it is used when the extension is not built or ``TINYPROF_PURE=1``,
and it reparses any file the C parser rejects, so that errors carry its
messages. tests/format/test_reader_parity.py holds the two to the same results.
"""
from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, cast

import numpy as np

from .._env import flag
from ..errors import FormatError
from . import meta_section
from .encoding import FORMAT_VERSION, MAX_NATURAL, RUN_RE, Header, escape, format_value, natural, unescape
from .output_dir import open_regular

try:
    from . import _parse
except ImportError:         # not built: the reference parser does it all
    _parse = None  # type: ignore[assignment]  # a module or None, which mypy cannot type

# What _parse.parse_events returns, its Blocks typed as memoryviews: a Block
# exports the buffer protocol, but numpy's stubs take only a few concrete
# buffer types in np.frombuffer (not collections.abc.Buffer).
_Blocks = Tuple[int, memoryview, memoryview, memoryview, memoryview, memoryview, memoryview,
                memoryview, memoryview, memoryview, memoryview, List[memoryview]]

# Sections whose payloads the reader keeps (ParsedFile.sections); it skips others.
KNOWN_SECTIONS = frozenset({"mpi", "trace", "delta", "meta"})
_NAN = float("nan")


# A callpath as typed: a Callpath acts as the tuple of its names.
Path = Tuple[str, ...]

# CPython's tuple hash (xxHash-based, Objects/tupleobject.c, 64-bit): Callpath
# hashes as the tuple of its names, one step per name from its parent's state.
_XXPRIME_1, _XXPRIME_2, _XXPRIME_5 = 11400714785074694791, 14029467366897019727, 2870177450012600261
_MASK = 2**64 - 1


class Callpath(Sequence[str]):
    """A callpath: the tuple of its names, stored as its last name and its
    parent callpath, so that the callpaths of a file take memory linear in its
    lines, not in the sum of their depths (20,000 nested levels: 20,000 objects,
    not 2·10^8 names). It equals, hashes and sorts as the tuple of its names,
    so either finds the other in a dict; ``p[:-1]`` is the parent (``()`` for
    a root), ``p[-1]`` the last name, both O(1); other access walks the depth."""

    __slots__ = ("parent", "name", "depth", "_state", "_hash")

    def __init__(self, parent: Optional[Callpath], name: str) -> None:
        self.parent, self.name = parent, name
        self.depth: int = parent.depth + 1 if parent is not None else 1
        state = parent._state if parent is not None else _XXPRIME_5
        state = (state + (hash(name) & _MASK) * _XXPRIME_2) & _MASK
        state = (((state << 31) | (state >> 33)) & _MASK) * _XXPRIME_1 & _MASK
        self._state: int = state
        h = (state + (self.depth ^ (_XXPRIME_5 ^ 3527539))) & _MASK
        h = 1546275796 if h == _MASK else h
        self._hash = h - 2**64 if h >= 2**63 else h

    def names(self) -> Tuple[str, ...]:
        """The names, root first, as a tuple."""
        out: List[str] = []
        node: Optional[Callpath] = self
        while node is not None:
            out.append(node.name)
            node = node.parent
        return tuple(reversed(out))

    def __len__(self) -> int:
        return self.depth

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    # Sequence's own versions index name by name: O(depth^2) here.
    def __reversed__(self) -> Iterator[str]:
        return reversed(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def index(self, name: object, start: int = 0, stop: int = 2**63 - 1) -> int:
        return self.names().index(name, start, stop)

    def count(self, name: object) -> int:
        return self.names().count(name)

    def __getitem__(self, index):       # an int or a slice, as a tuple's
        if isinstance(index, slice):
            if index == slice(None, -1) or index == slice(0, -1):
                return self.parent if self.parent is not None else ()
            return self.names()[index]
        if index == -1 or index == self.depth - 1:
            return self.name
        return self.names()[index]

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Callpath):
            a, b = self, other      # equal depths and hashes, then name by name up to a shared node
            if a.depth != b.depth or a._hash != b._hash:
                return False
            while a is not b:
                if a.name != b.name:
                    return False
                a, b = a.parent, b.parent     # type: ignore[assignment]  # same depth: both None at once
            return True
        if isinstance(other, tuple):
            return len(other) == self.depth and self.names() == other
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        return self.names() < _names(other)

    def __le__(self, other: object) -> bool:
        return self.names() <= _names(other)

    def __gt__(self, other: object) -> bool:
        return self.names() > _names(other)

    def __ge__(self, other: object) -> bool:
        return self.names() >= _names(other)

    def __add__(self, other: Sequence[str]) -> Tuple[str, ...]:
        return self.names() + _names(other)

    def __radd__(self, other: Sequence[str]) -> Tuple[str, ...]:
        return _names(other) + self.names()

    def __repr__(self) -> str:
        return repr(self.names())

    def __reduce__(self):
        return tuple, (self.names(),)


def _names(path) -> Tuple[str, ...]:
    if isinstance(path, Callpath):
        return path.names()
    if isinstance(path, tuple):
        return path
    raise TypeError(f"a callpath compares with a tuple, not {type(path).__name__}")


_TUPLE_HASH = hash(Callpath(Callpath(None, "a"), "b")) == hash(("a", "b"))
_TUPLE_NAMES_PER_BYTE = 8
_MIN_TUPLE_BOUND = 2**20


def tuple_bound(nbytes: int) -> int:
    """The most names the callpaths of a file of ``nbytes`` bytes hold in all
    as tuples (8 bytes a name): past it, they are Callpaths."""
    return max(_MIN_TUPLE_BOUND, _TUPLE_NAMES_PER_BYTE * nbytes)


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
class Values:
    """Every value of a file's event lines in flat arrays, line after line.

    Line ``i`` holds ``times[line_values[i]:line_values[i+1]]`` (and the same
    range of each inconsistent metric, NaN where missing), recorded in the
    executions ``slots[line_slots[i]:line_slots[i+1]]`` (numbered across the
    file's ranks, see ``ParsedFile.exec_base``) with ``counts`` values each.
    """

    loops: List[int]
    consistent: List[Dict[str, float]]
    times: np.ndarray                   # int64
    metrics: Dict[str, np.ndarray]      # float64, aligned with times
    slots: np.ndarray                   # int64
    counts: np.ndarray                  # int64, aligned with slots
    line_values: np.ndarray             # int64, one more than the lines
    line_slots: np.ndarray              # int64, one more than the lines


@dataclass
class ParsedFile:
    """One file as read. Event line ``i`` is the callpath ending in name
    ``names[ids[i]]`` below line ``parents[i]`` (-1: a root callpath);
    ``values`` holds every value; ``lines`` and ``events`` (by callpath, as
    tuples of names) give each line's as views of them."""

    path: str
    header: Header
    exec_base: np.ndarray
    names: List[str]
    parents: List[int]
    ids: List[int]
    values: Values
    sections: Dict[str, bytes]          # payloads of the KNOWN_SECTIONS present
    section_lines: Dict[str, int] = field(default_factory=dict)   # line where each payload starts
    nbytes: int = 0                     # the file's size: paths as tuples within tuple_bound of it
    metadata: Dict[str, meta_section.Value] = field(default_factory=dict)   # its meta section

    @cached_property
    def lines(self) -> List[EventData]:
        v, nexec = self.values, int(self.exec_base[-1])
        bounds, slot_bounds = v.line_values.tolist(), v.line_slots.tolist()
        return [EventData(loop, cons, v.times[a:b], {k: m[a:b] for k, m in v.metrics.items()},
                          v.slots[c:d], v.counts[c:d], nexec)
                for loop, cons, a, b, c, d in zip(v.loops, v.consistent, bounds, bounds[1:],
                                                   slot_bounds, slot_bounds[1:])]

    @cached_property
    def paths(self) -> List[Path]:
        """The callpath of each event line, built on first use: a tuple of
        names, or past :func:`tuple_bound` a :class:`Callpath`, which acts as
        one in memory linear in the lines whatever their depth."""
        return self._paths({})

    def share_paths(self, known: Dict[Path, Path]) -> None:
        """Make :attr:`paths` the objects of ``known`` where it has them, and add
        the others: the files of one profile then share their callpaths, so that
        looking one file's up among another's is O(1), not a walk of the depth
        (a callpath whose parent is the same object compares at its last name)."""
        self.__dict__["paths"] = self._paths(known)
        self.__dict__.pop("events", None)

    def _paths(self, known: Dict[Path, Path]) -> List[Path]:
        """Plain tuples while their names in all (the sum of the depths) stay
        within :func:`tuple_bound` of the file's size, as every ordinary
        profile's do; else (deep nesting) Callpaths, in memory linear in the
        lines. Also tuples where tuples hash otherwise than Callpath (not
        CPython, not 64-bit)."""
        depths: List[int] = []
        for parent in self.parents:
            depths.append(depths[parent] + 1 if parent >= 0 else 1)
        linked = _TUPLE_HASH and sum(depths) > tuple_bound(self.nbytes)
        paths: List[Path] = []
        for parent, name_id in zip(self.parents, self.ids):
            above = paths[parent] if parent >= 0 else None
            name = self.names[name_id]
            path = cast(Path, Callpath(cast(Optional[Callpath], above), name)) if linked \
                else (above or ()) + (name,)
            got = known.setdefault(path, path)
            paths.append(got if type(got) is type(path) else path)    # a Callpath's parent is one
        return paths

    @cached_property
    def events(self) -> Dict[Path, EventData]:
        return dict(zip(self.paths, self.lines))


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
_TIME_RE = re.compile(rb"0|-?[1-9][0-9]*")
_TIME_CHARS = 20                # len("-9223372036854775808")
_POW10 = 10 ** np.arange(20, dtype=np.uint64)


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
    (``layout.open_regular``): a FIFO, a device or a sparse file is a
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


class _Parser:
    def __init__(self, path: str, data: bytes, parser: str = "python") -> None:
        self.path, self.data, self.parser = path, data, parser
        self.pos = self.no = 0          # next byte and number of lines read
        self.stop = len(data)           # end of the lines: version 2, the end line
        self.strict = True              # version 2 rules
        self.gaps = True                # version 3 rank fields
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

    def count(self, key: str, exact: bool = True) -> int:
        """The value of a ``names``/``events`` line, bounded by the lines left;
        without ``exact``, by the bytes left (a line takes at least one): as
        safe for memory, without counting the lines of the whole file."""
        value = self.keyed(key)
        try:
            n = natural(value)
        except ValueError:
            raise self.fail(f"bad {key} count: {value[:40]!r}") from None
        left = self.lines_left() if exact else self.stop - self.pos
        if n > left:
            raise self.fail(f"'{key} {n}', but only {left} lines follow")
        return n

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
            names = [self.name(self.next_line()) for _ in range(self.count("names"))]
            nevents = self.count("events")
            lines, bases = _Lines(), exec_base.tolist()
            for i in range(nevents):
                self.event(self.next_line(), i, len(names), h, bases, lines)
            got = names, lines.parents, lines.ids, lines.values(h)
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
        name = field("name", lambda v: _unescape_canonical(v, strict))
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

    def name(self, raw: bytes) -> str:
        try:
            return _unescape_canonical(self.text(raw), self.strict)
        except FormatError:
            raise
        except ValueError as e:
            raise self.fail(f"bad name: {e}") from None

    def index(self, token: bytes, bound: int, what: str) -> int:
        try:
            return natural(token, bound - 1)
        except ValueError:
            raise self.fail(f"bad callpath: {what} {token[:40]!r} (must be below {bound})") from None

    def event(self, line: bytes, i: int, nnames: int, h: Header, exec_base: List[int],
              lines: _Lines) -> None:
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
            for e, group in self.executions(fld, h.executions[r], h.first_rank + r):
                occ = group.split(b"+")
                if loop == 2 and len(occ) > 1:
                    raise self.fail("loop-2 event with several values in one execution")
                slots.append(exec_base[r] + e)
                counts.append(len(occ))
                if b"," in group:
                    self.split_metrics(occ, tokens, values)
                else:
                    tokens.extend(occ)
                    for col in values:
                        col.extend([b""] * len(occ))
        lines.line(loop, consistent, self.times(tokens),
                   {k: self.column(col) for k, col in zip(other_keys, values)}, slots, counts)

    def executions(self, fld: bytes, most: int, rank: int) -> List[Tuple[int, bytes]]:
        """A non-empty rank field as (execution, occurrences) pairs, those
        with values; at most ``most`` executions."""
        groups = fld.split(b";")
        if not self.gaps:           # versions 1, 2: a ';' per execution
            if self.strict and not groups[-1]:
                raise self.fail(f"trailing empty execution in the field of rank {rank}")
            if len(groups) > most:
                raise self.fail(f"rank {rank} has {len(groups)} executions, header says {most}")
            return [(e, g) for e, g in enumerate(groups) if g]
        out: List[Tuple[int, bytes]] = []
        e = 0
        for j, group in enumerate(groups):
            # "occ+occ" or "occ+occ*k" (k >= 2 executions on, or k - 1 skipped);
            # only the first may be empty, only the last has no ';' after it
            body, star, skip = group.partition(b"*")
            if not body and j:
                raise self.fail(f"empty execution in the field of rank {rank} (version 3 "
                                f"writes '*k;' for executions without values)")
            if body:
                if e >= most:
                    raise self.fail(f"rank {rank} has more than {most} executions, "
                                    f"as its header says")
                out.append((e, body))
            if j == len(groups) - 1:
                if star or not body:
                    raise self.fail(f"trailing empty execution in the field of rank {rank}")
                break
            try:
                step = natural(skip, most) if star else 1
            except ValueError:
                step = 0
            if step < 1 or (step == 1 and star):
                raise self.fail(f"bad execution gap {b'*' + skip[:40]!r} in the field of rank "
                                f"{rank} (must be '*k;' with 2 <= k <= {most})")
            e += step
        return out

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


class _Lines:
    """The reference parser's event lines: callpaths as (parent line, name id),
    checked as they come, and values per line, joined at the end (``values``)."""

    def __init__(self) -> None:
        self.parents: List[int] = []
        self.ids: List[int] = []
        self.seen: set = set()                      # (parent, id) pairs
        self.v1: Dict[Tuple[int, ...], int] = {}    # version 1: id path -> line
        self.loops: List[int] = []
        self.consistent: List[Dict[str, float]] = []
        self.times: List[np.ndarray] = []
        self.metrics: List[Dict[str, np.ndarray]] = []
        self.slots: List[int] = []
        self.counts: List[int] = []
        self.line_slots: List[int] = [0]

    def line(self, loop: int, consistent: Dict[str, float], times: np.ndarray,
             metrics: Dict[str, np.ndarray], slots: List[int], counts: List[int]) -> None:
        self.loops.append(loop)
        self.consistent.append(consistent)
        self.times.append(times)
        self.metrics.append(metrics)
        self.slots += slots
        self.counts += counts
        self.line_slots.append(len(self.slots))

    def values(self, h: Header) -> Values:
        lengths = [len(t) for t in self.times]

        def join(arrays: List[np.ndarray], dtype) -> np.ndarray:
            return np.concatenate(arrays) if arrays else np.zeros(0, dtype)
        return Values(self.loops, self.consistent, join(self.times, np.int64),
                      {k: join([m[k] for m in self.metrics], np.float64)
                       for k, c in h.metrics if not c},
                      np.array(self.slots, np.int64), np.array(self.counts, np.int64),
                      np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64),
                      np.array(self.line_slots, np.int64))

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


def _matching(pattern: re.Pattern[str]) -> Callable[[str], str]:
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
        run = (natural(n), natural(k) if star else 1)
        if run[1] < 1 or (strict and ((star and run[1] < 2) or (runs and runs[-1][0] == run[0]))):
            raise ValueError(text)
        runs.append(run)
    return runs
