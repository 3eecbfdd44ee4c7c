"""What every text view shares: time units, names printed safely, and
aligned columns (and the call tree's order, from ``analysis``)."""
from __future__ import annotations

import unicodedata
from typing import List, Optional, Sequence, Tuple

from ..analysis.sums import tree_order as tree_order  # the views import it from here

Callpath = Tuple[str, ...]
UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: a name from a profile may hold
    escape sequences (an OSC title or clipboard write, clear screen), C0/C1
    controls, DEL, line breaks or bidi overrides, which a terminal would act
    on. Each character Python does not call printable is written as its
    escape (``\\x1b``, ``\\u202e``) and a backslash as ``\\\\``, as ``repr``
    spells them, so the text reads back unambiguously. Text with nothing to
    escape is unchanged, so escaping twice changes nothing."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in text)


# A terminal table stays readable and its size follows the rows, whatever the
# names: deeper levels than MAX_INDENT say their depth instead of indenting
# further, and a cell longer than MAX_CELL keeps its start and its end.
MAX_INDENT = 32
MAX_CELL = 240


def tree_label(path: Callpath) -> str:
    """``path``'s last name indented by its depth, as a tree prints it."""
    depth = len(path) - 1
    if depth <= MAX_INDENT:
        return "  " * depth + path[-1]
    return "  " * MAX_INDENT + f"[{depth}] " + path[-1]


def clip(text: str) -> str:
    """``text`` cut to MAX_CELL characters, its middle replaced by "…"."""
    if len(text) <= MAX_CELL:
        return text
    return text[:MAX_CELL // 3] + "…" + text[len(text) - (MAX_CELL - MAX_CELL // 3 - 1):]


def shown(text: str) -> str:
    """``text`` as a terminal view prints it: :func:`printable`, then :func:`clip`."""
    return clip(printable(text))


def width(text: str) -> int:
    """The columns ``text`` (printable) takes on a terminal: 2 for a wide
    (East Asian) character, 0 for a combining mark."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF"
               else 1 for c in text)


def align(table: Sequence[Sequence[str]], right: Optional[Sequence[int]] = None) -> List[str]:
    """Columns padded to their widest cell: those in ``right`` (by default
    all but the first) right-aligned. Every cell is made :func:`printable`
    and clipped first (:func:`shown`), so no view prints a raw name or a huge row."""
    cells = [[shown(c) for c in row] for row in table]
    widths = [max(width(row[i]) for row in cells) for i in range(len(cells[0]))]
    right = range(1, len(widths)) if right is None else right
    return ["  ".join(" " * (w - width(c)) + c if i in right else c + " " * (w - width(c))
                      for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells]
