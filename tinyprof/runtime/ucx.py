"""The transport view: which UCX protocol and transport each counted UCP
operation used (docs/mpi.md, "Transports").

The capture library counts UCP operations per endpoint and exact message
size, and keeps, for each endpoint, the protocol selection tables UCX printed
for it (``ucp_ep_print_info``): per operation and variant, size ranges ->
protocol -> transport. This module parses those tables and looks each
operation's size up in the one UCX itself selects by, so a row's protocol is
the one UCX chose for that endpoint, operation and size, not a guess.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

# TP_UCP_* of native/include/tinyprof/tinyprof_mpi.h, in code order
UCP_OPS = ("tag_send", "tag_send_sync", "tag_recv", "tag_msg_recv", "am_send", "am_recv_data",
           "put", "get")
FAST, MULTI, REPLY, NONCONTIG = 16, 32, 64, 128
NOEP = 0xFFFF

# Operation titles as UCX 1.20 prints them (src/ucp/proto/proto.c)
_TITLES = {0: "tagged message by ucp_tag_send*",
           1: "synchronous tagged message by ucp_tag_send_sync*",
           4: "active message by ucp_am_send*",
           6: "remote memory write by ucp_put*",
           7: "remote memory read by ucp_get*"}
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

# (low, high, protocol, transport) rows of one table
Table = List[Tuple[float, float, str, str]]


def ucp_name(code: int) -> str:
    """The name of UCP operation code ``code`` (variant bits ignored)."""
    base = code & 15
    return UCP_OPS[base] if base < len(UCP_OPS) else f"ucp{base}"


def title(code: int) -> Optional[str]:
    """The start of the title of the table UCX selects operation ``code``'s
    protocol by, up to the memory part; None for receives."""
    base = _TITLES.get(code & 15)
    if base is None:
        return None
    if code & REPLY:
        base += " with reply flag"
    flags = [name for bit, name in ((FAST, "fast-completion"), (MULTI, "multi")) if code & bit]
    return base + (f"({','.join(flags)})" if flags else "")


def _size(text: str) -> float:
    if text == "inf":
        return math.inf
    unit = text[-1:] if text[-1:] in UNITS and not text[-1:].isdigit() else ""
    return int(text[:len(text) - len(unit)]) * UNITS[unit]


def parse_tables(text: str) -> Dict[str, Table]:
    """The tables of a ``ucp_ep_print_info`` text, by title (without the
    configuration cell): rows of size ranges, protocol and transport."""
    tables: Dict[str, Table] = {}
    current: Optional[Table] = None
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 2:
            current = tables.setdefault(cells[1], [])
        elif len(cells) == 3 and current is not None:
            span, protocol, transport = cells
            protocol = protocol[4:] if protocol.startswith("(?) ") else protocol
            if not span and current:            # a protocol's further lanes
                lo, hi, p, t = current[-1]
                current[-1] = (lo, hi, p, f"{t}, {transport}")
                continue
            low, _, high = span.partition("..")
            try:
                current.append((_size(low), _size(high or low), protocol, transport))
            except ValueError:
                continue
    return tables


def classify(tables: Dict[str, Table], code: int, size: int) -> Tuple[str, str]:
    """``(protocol, transport)`` UCX selects for operation ``code`` of
    ``size`` bytes from host memory; ``("", "")`` when not known (receives,
    non-contiguous data, a table not printed)."""
    head = title(code)
    if head is None or code & NONCONTIG:
        return "", ""
    for memory in (f"{head} from host memory", f"{head} into host memory"):
        # RMA titles go on with the remote memory (" to host"): the first in title order
        names = [memory] if memory in tables else \
            [name for name in sorted(tables) if name.startswith(memory + " ")][:1]
        for name in names:
            for low, high, protocol, transport in tables[name]:
                if low <= size <= high:
                    return protocol, transport
    return "", ""
