"""The pure-Python reference parser of the profile format (docs/format.md):
the twin of the C parser _parse.c, as annotate/pyevent.py is the C core's.

The reader (reader.py) reads every file's header and sections in Python,
through :class:`ReferenceParser`'s line cursor. The name table and event
lines, which hold the values, are C's where it is built; this parser reads
them where it is not (or ``TINYPROF_PURE=1``), reads version-1 files, and
rereads any file the C parser rejects, so that errors carry its messages.
tests/format/test_reader_parity.py holds the two to the same results.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..errors import FormatError
from .encoding import Header, escape, format_value, natural, unescape
from .parsed import Values

_NAN = float("nan")
_TIME_RE = re.compile(rb"0|-?[1-9][0-9]*")
_TIME_CHARS = 20                # len("-9223372036854775808")
_POW10 = 10 ** np.arange(20, dtype=np.uint64)


class ReferenceParser:
    """A file's bytes read line by line (``no``: lines read, for errors), and
    its name table and event lines read in Python (:meth:`body`)."""

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

    def name(self, raw: bytes) -> str:
        try:
            return unescape_canonical(self.text(raw), self.strict)
        except FormatError:
            raise
        except ValueError as e:
            raise self.fail(f"bad name: {e}") from None

    def index(self, token: bytes, bound: int, what: str) -> int:
        try:
            return natural(token, bound - 1)
        except ValueError:
            raise self.fail(f"bad callpath: {what} {token[:40]!r} (must be below {bound})") from None

    def body(self, h: Header, exec_base: np.ndarray) -> Tuple[List[str], List[int], List[int], Values]:
        """The name table and event lines: names, parent lines, name ids and values."""
        names = [self.name(self.next_line()) for _ in range(self.count("names"))]
        nevents = self.count("events")
        lines, bases = _Lines(), exec_base.tolist()
        for i in range(nevents):
            self.event(self.next_line(), i, len(names), h, bases, lines)
        return names, lines.parents, lines.ids, lines.values(h)

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

    def add(self, parser: ReferenceParser, parent: int, name_id: int) -> None:
        if (parent, name_id) in self.seen:
            raise parser.fail("callpath appears twice (same parent line and name)")
        self.seen.add((parent, name_id))
        self.parents.append(parent)
        self.ids.append(name_id)

    def add_v1(self, parser: ReferenceParser, ids: Tuple[int, ...]) -> None:
        """A version-1 path of name ids from the root."""
        parent = self.v1.get(ids[:-1], -1)
        if len(ids) > 1 and parent < 0:
            raise parser.fail("callpath's parent is not on an earlier line")
        self.v1[ids] = len(self.parents)
        self.add(parser, parent, ids[-1])


def unescape_canonical(text: str, strict: bool, key: bool = False) -> str:
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
