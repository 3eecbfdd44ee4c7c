"""The host of each rank as one line of text: the run metadata's
``rank_hosts`` (docs/format.md, "The meta section") and ``tinyprof pop
--hosts`` (docs/pop.md).

    NAME*N,NAME,NAME*N          rank order; NAME*N: N ranks in a row on NAME

A run of one rank is written ``NAME`` alone. In a name, ``%``, ``,`` and
``*`` are written ``%25``, ``%2C`` and ``%2A``, so that any non-empty name
reads back. The C++ writer (``meta::rank_hosts`` in
``native/include/tinyprof/detail/metadata.hpp``) writes the same text.
"""
from __future__ import annotations

import itertools
import re
from typing import List, Sequence

from ..errors import excerpt

_SPECIAL = re.compile("[%,*]")
_ESCAPED = re.compile("%(25|2[Cc]|2[Aa])")
_COUNT = re.compile("[0-9]+")


def encode(hosts: Sequence[str]) -> str:
    """The text of ``hosts`` (one name per rank, in rank order); "" when it
    has none to give: no rank, or an empty name (which no text can name)."""
    if not hosts or not all(hosts):
        return ""
    items: List[str] = []
    for host, run in itertools.groupby(hosts):
        name = _SPECIAL.sub(lambda m: f"%{ord(m.group()):02X}", host)
        count = sum(1 for _ in run)
        items.append(name if count == 1 else f"{name}*{count}")
    return ",".join(items)


def decode(text: str, nranks: int, label: str) -> List[str]:
    """The host of each of ``nranks`` ranks that ``text`` names; ValueError
    starting with ``label`` (the option or key it came from) unless it names
    exactly ``nranks``. Memory bounded by ``nranks``, whatever the counts."""
    out: List[str] = []
    for item in text.split(","):
        name, star, times = item.partition("*")
        if not name or (star and not _COUNT.fullmatch(times)) or "%" in _ESCAPED.sub("", name):
            raise ValueError(f"{label}: {excerpt(item)} is not a host name or NAME*COUNT")
        digits = times.lstrip("0") if star else "1"
        # past 18 digits, more than any run's ranks (and than int() reads)
        count = int(digits or "0") if len(digits) <= 18 else nranks + 1
        if len(out) + count > nranks:           # checked before the list grows
            raise ValueError(f"{label}: more than the profile's {nranks} ranks")
        out += [_ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), name)] * count
    if len(out) != nranks:
        raise ValueError(f"{label}: {len(out)} given for the profile's {nranks} ranks")
    return out
