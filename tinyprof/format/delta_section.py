"""The ``delta`` section: the rank fields of a delta snapshot file.

A delta snapshot (``set snapshot K over J``) writes only what its ranks
recorded since snapshot J. A rank field only ever grows at its end, except
that its newest occurrence may still change (a loop-2 sum, a metric given
late), so a field of K is the first ``keep`` bytes of the same callpath's
and rank's field in J followed by new bytes. The section lists those
splices; fields it does not list are as in J. Layout: docs/format.md,
"The delta section". ``snapshot_chain.py`` applies them.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

from ..errors import FormatError
from .encoding import natural

# (event line, rank, bytes kept from the base's field, the bytes that follow)
Splice = Tuple[int, int, int, bytes]


def encode(splices: Sequence[Splice]) -> bytes:
    """The payload; ``splices`` sorted by (line, rank), each pair once."""
    rows = [b"fields %d\n" % len(splices)]
    rows += [b"%d|%d|%d|%d\n" % (line, rank, keep, len(text))
             for line, rank, keep, text in splices]
    return b"".join(rows) + b"".join(s[3] for s in splices)


def parse(payload: bytes, path: str, line: int, nlines: int, first_rank: int,
          count: int) -> List[Splice]:
    """The splices of a payload that starts on ``line`` of file ``path``,
    whose event lines number ``nlines`` and ranks ``first_rank`` ..
    ``first_rank + count - 1``; FormatError on anything else."""
    def fail(problem: str, at: int) -> FormatError:
        return FormatError(path, line + at, f"delta section: {problem}")

    head, _, rest = payload.partition(b"\n")
    if not head.startswith(b"fields "):
        raise fail("expected 'fields <count>'", 0)
    try:
        n = natural(head[7:])
    except ValueError:
        raise fail(f"bad count {head[7:47]!r}", 0) from None
    if n > rest.count(b"\n"):
        raise fail(f"'fields {n}', but fewer rows follow", 0)
    rows = rest.split(b"\n", n)
    blob = rows.pop()
    out: List[Splice] = []
    pos, previous = 0, (-1, -1)
    for i, row in enumerate(rows, 1):
        try:
            items = [natural(t) for t in row.split(b"|")]
            at, rank, keep, length = items
        except ValueError:
            raise fail(f"bad row {row[:60]!r} (expected line|rank|keep|length)", i) from None
        if at >= nlines or not first_rank <= rank < first_rank + count:
            raise fail(f"row {row[:60]!r}: line or rank outside the file", i)
        if (at, rank) <= previous:
            raise fail("rows not sorted by (line, rank), or a pair twice", i)
        previous = (at, rank)
        if pos + length > len(blob):
            raise fail("the rows' lengths exceed the bytes that follow them", i)
        out.append((at, rank, keep, blob[pos:pos + length]))
        pos += length
    if pos != len(blob):
        raise fail(f"{len(blob) - pos} bytes after the last field", n + 1)
    return out
