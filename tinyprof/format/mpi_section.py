"""The ``mpi`` section codec: MPI communication per callpath (docs/format.md).

The payload is text: the communicators the file's ranks know, then one row
per (rank, callpath line, communicator, op, size bucket) and one per (rank,
line, communicator, destination); with the transport view (``ucx=True``),
one per (rank, line, op, UCP op, protocol, transport) and each rank's UCX
state. :func:`encode` writes the one canonical
form, which the C++ writer matches byte for byte; :func:`parse` accepts
only that form and raises :class:`FormatError` naming the file and line.
The ops and peers rows, a section's bulk, are read by the C parser when it
is built (``_parse.mpi_rows``); this module is its reference.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence, Tuple

from ..errors import FormatError
from .encoding import MAX_NATURAL, natural

try:
    from . import _parse
except ImportError:         # not built: the reference reads the rows
    _parse = None  # type: ignore[assignment]  # a module or None, which mypy cannot type

NONE = -1       # a row's line outside any event, a completion call's communicator

# rank, line, comm, op, bucket, calls, bytes, time (ns)
OpRow = Tuple[int, int, int, str, int, int, int, int]
# rank, line, comm, peer (world rank), messages, bytes
PeerRow = Tuple[int, int, int, int, int, int]
# rank, line, MPI op ("": none), UCP op, protocol, transport, calls, bytes
TransportRow = Tuple[int, int, str, str, str, str, int, int]
# rank, UCX state (UCX_STATES)
StateRow = Tuple[int, str]
UCX_STATES = ("used", "unused", "unavailable")
# Receives have no protocol: the sender selects it.
UCP_RECEIVES = frozenset({"tag_recv", "tag_msg_recv", "am_recv_data"})
COMPLETIONS = ("Wait", "Test")      # Wait*, Test*: they name no communicator

_NAME_RE = re.compile("[A-Za-z0-9_.@]{1,255}")
_OP_RE = re.compile("[A-Z][A-Za-z_]{0,63}")
_UCP_RE = re.compile("[a-z][a-z_]{0,63}")
_TEXT_RE = re.compile("[ -{}~]{0,255}")     # printable ASCII but '|'
MAX_BUCKET = 64


@dataclass(frozen=True)
class Communicator:
    """A communicator as the file's ranks know it."""

    name: str
    size: int
    members: Tuple[int, ...]        # world ranks in rank order; () when self-like
    created: int                    # line of the callpath that created it, or NONE


@dataclass
class Section:
    """One file's ``mpi`` section: ``comms`` sorted by name; rows refer to them by index."""

    comms: List[Communicator]
    ops: List[OpRow]
    peers: List[PeerRow]
    transport: List[TransportRow] = field(default_factory=list)
    ucx: List[StateRow] = field(default_factory=list)


def bucket(nbytes: int) -> int:
    """The size bucket of a call of ``nbytes`` bytes: 0 for none, else k with
    2**(k-1) <= nbytes < 2**k."""
    return nbytes.bit_length()


def bucket_range(k: int) -> Tuple[int, int]:
    """``(size_min, size_max)`` of bucket ``k``."""
    return (0, 0) if k == 0 else (1 << (k - 1), (1 << k) - 1)


def encode_members(members: Sequence[int]) -> str:
    """World ranks as ``a``, ``a-b`` (step 1) and ``a-b:s`` items, greedy from the left."""
    items: List[str] = []
    i, n = 0, len(members)
    while i < n:
        a = members[i]
        step = members[i + 1] - a if i + 1 < n else 0
        j = i + 1
        while step > 0 and j < n and members[j] - members[j - 1] == step:
            j += 1
        run = j - i
        if step == 1 and run >= 2:
            items.append(f"{a}-{members[j - 1]}")
        elif step >= 2 and run >= 3:
            items.append(f"{a}-{members[j - 1]}:{step}")
        else:
            items.append(str(a))
            j = i + 1
        i = j
    return ",".join(items)


def decode_members(text: str, size: int) -> Tuple[int, ...]:
    """Invert :func:`encode_members`; ValueError unless ``text`` is canonical and
    lists ``size`` ranks. The count is checked as items are read, so a short
    text cannot ask for a huge list."""
    if not text:
        return ()
    out: List[int] = []
    for item in text.split(","):
        head, _, step_text = item.partition(":")
        a_text, dash, b_text = head.partition("-")
        a = natural(a_text)
        b = natural(b_text) if dash else a
        step = natural(step_text) if step_text else 1
        if b < a or (b - a) % step or len(out) + (b - a) // step + 1 > size:
            raise ValueError(item)
        out.extend(range(a, b + 1, step))
    if len(out) != size:
        raise ValueError(text)
    members = tuple(out)
    if encode_members(members) != text:
        raise ValueError(text)
    return members


def encode(comms: Sequence[Communicator], ops: Sequence[OpRow], peers: Sequence[PeerRow],
           transport: Sequence[TransportRow] = (), ucx: Sequence[StateRow] = ()) -> bytes:
    """The payload. Rows refer to ``comms`` by index (NONE: no communicator);
    the keys of rows must be distinct. Sorts everything into the canonical order.
    The transport and ucx blocks are written only when the ranks recorded them."""
    order = sorted(range(len(comms)), key=lambda i: comms[i].name.encode())
    new = {old: i for i, old in enumerate(order)}
    new[NONE] = NONE
    lines = [f"comms {len(comms)}"]
    for i in order:
        c = comms[i]
        created = "" if c.created == NONE else str(c.created)
        lines.append(f"{c.name}|{c.size}|{encode_members(c.members)}|{created}")
    op_rows = sorted(((r[0], r[1], new[r[2]], *r[3:]) for r in ops), key=_op_key)
    lines.append(f"ops {len(op_rows)}")
    lines += ["|".join(map(_field, row)) for row in op_rows]
    peer_rows = sorted((r[0], r[1], new[r[2]], *r[3:]) for r in peers)
    lines.append(f"peers {len(peer_rows)}")
    lines += ["|".join(map(_field, row)) for row in peer_rows]
    if transport or ucx:
        lines.append(f"transport {len(transport)}")
        lines += ["|".join(map(_field, row)) for row in sorted(transport, key=_transport_key)]
        lines.append(f"ucx {len(ucx)}")
        lines += [f"{rank}|{state}" for rank, state in sorted(ucx)]
    return ("\n".join(lines) + "\n").encode()


def encode_section(s: Section) -> bytes:
    """:func:`encode` of a whole section."""
    return encode(s.comms, s.ops, s.peers, s.transport, s.ucx)


def _transport_key(row: TransportRow):
    return (row[0], row[1], *(f.encode() for f in row[2:6]))


def _op_key(row: OpRow):
    return row[0], row[1], row[2], row[3].encode(), row[4]


def _peer_key(row: PeerRow):
    return row[:4]


def _field(v) -> str:
    return "" if v == NONE else str(v)


def parse(payload: bytes, path: str, line: int, nlines: int, first_rank: int, count: int,
          nranks: int, parser: str = "auto") -> Section:
    """Parse and check the payload of a file holding ranks ``first_rank`` ..
    ``first_rank+count-1`` of ``nranks`` and ``nlines`` event lines; the payload
    starts on line ``line`` of the file (for messages). ``parser`` as in
    :func:`reader.parse_file`: the ops and peers rows in C or in Python."""
    from .reader import engine  # here, not above: the reader loads numpy, which writers must not
    parser = engine(parser)
    p = _Payload(payload, path, line)
    comms: List[Communicator] = []
    for fields in p.block("comms", 4):
        name, size_text, members_text, created_text = fields
        if not _NAME_RE.fullmatch(name):
            raise p.fail(f"bad communicator name {name[:80]!r}")
        size = p.number(size_text, "communicator size", nranks + 1, low=1)
        try:
            members = decode_members(members_text, size if members_text else 0)
        except ValueError:
            raise p.fail(f"bad member list of communicator {name!r} of size {size}") from None
        if not members_text and size != 1:
            raise p.fail(f"communicator {name!r} of size {size} lists no member")
        if any(m >= nranks for m in members):
            raise p.fail(f"communicator {name!r} lists a rank outside the run's {nranks}")
        if comms and name.encode() <= comms[-1].name.encode():
            raise p.fail("communicators not sorted by name, or one listed twice")
        comms.append(Communicator(name, size, members, p.optional(created_text, "line", nlines)))
    rows = parser != "python" and _parse.mpi_rows(payload, p.pos, len(comms), nlines, first_rank, count,
                                                  nranks)
    if rows:
        p.pos, ops, peers = rows
        p.no += 2 + len(ops) + len(peers)
    elif parser == "c":
        raise p.fail("ops or peers rows break the grammar (the C parser names no line)")
    else:
        ops, peers = _reference_rows(p, len(comms), nlines, first_rank, count, nranks)
    transport: List[TransportRow] = []
    ucx: List[StateRow] = []
    viewed = payload.startswith(b"transport ", p.pos)
    if viewed:
        for fields in p.block("transport", 8):
            rank = p.number(fields[0], "rank", first_rank + count, low=first_rank)
            line_no = p.optional(fields[1], "line", nlines)
            if fields[2] and not _OP_RE.fullmatch(fields[2]):
                raise p.fail(f"bad operation name {fields[2][:80]!r}")
            if not _UCP_RE.fullmatch(fields[3]):
                raise p.fail(f"bad UCP operation {fields[3][:80]!r}")
            if not (_TEXT_RE.fullmatch(fields[4]) and _TEXT_RE.fullmatch(fields[5])):
                raise p.fail("bad protocol or transport text")
            if (fields[4] == "") != (fields[5] == "") or (fields[4] and fields[3] in UCP_RECEIVES):
                raise p.fail(f"a {fields[3]} row with protocol {fields[4]!r} and transport {fields[5]!r}: "
                             "both are empty (not classified, receives) or neither")
            tr_row = (rank, line_no, *fields[2:6], p.number(fields[6], "calls", MAX_NATURAL + 1, low=1),
                      p.number(fields[7], "bytes"))
            p.ordered(transport, tr_row, _transport_key)
            transport.append(tr_row)
        for fields in p.block("ucx", 2):
            rank = p.number(fields[0], "rank", first_rank + count, low=first_rank)
            if fields[1] not in UCX_STATES:
                raise p.fail(f"bad UCX state {fields[1][:40]!r}")
            if ucx and rank <= ucx[-1][0]:
                raise p.fail("ucx rows not in rank order, or a rank twice")
            ucx.append((rank, fields[1]))
        # A rank that UCX carried for has rows; one with rows has a state, and UCX in it.
        states, moved = dict(ucx), {row[0] for row in transport}
        wrong = sorted({r for r, state in ucx if state == "used"} - moved |
                       {r for r in moved if states.get(r, "unavailable") == "unavailable"})
        if wrong:
            raise p.fail(f"rank {wrong[0]} is {states.get(wrong[0], 'not listed')} in the ucx rows but "
                         f"{'has' if wrong[0] in moved else 'has no'} transport rows")
    if p.pos != len(payload):
        p.no += 1
        raise p.fail(f"data after the {'ucx' if viewed else 'peers'} rows")
    return Section(comms, ops, peers, transport, ucx)


def _reference_rows(p: _Payload, ncomms: int, nlines: int, first_rank: int, count: int,
                    nranks: int) -> Tuple[List[OpRow], List[PeerRow]]:
    """The ops and peers blocks read and checked in Python: ``_parse.mpi_rows``' reference."""
    ops: List[OpRow] = []
    for fields in p.block("ops", 8):
        rank = p.number(fields[0], "rank", first_rank + count, low=first_rank)
        line_no = p.optional(fields[1], "line", nlines)
        comm = p.optional(fields[2], "communicator", ncomms)
        if not _OP_RE.fullmatch(fields[3]):
            raise p.fail(f"bad operation name {fields[3][:80]!r}")
        if comm != NONE and fields[3].startswith(COMPLETIONS):
            raise p.fail(f"completion call {fields[3]} names a communicator")
        k = p.number(fields[4], "size bucket", MAX_BUCKET + 1)
        calls = p.number(fields[5], "calls", MAX_NATURAL + 1, low=1)
        nbytes = p.number(fields[6], "bytes")
        low, high = bucket_range(k)
        if not calls * low <= nbytes <= calls * high:
            raise p.fail(f"{nbytes} bytes in {calls} calls of size bucket {k} "
                         f"({low} to {high} bytes a call)")
        op_row = (rank, line_no, comm, fields[3], k, calls, nbytes, p.number(fields[7], "time"))
        p.ordered(ops, op_row, _op_key)
        ops.append(op_row)
    peers: List[PeerRow] = []
    for fields in p.block("peers", 6):
        rank = p.number(fields[0], "rank", first_rank + count, low=first_rank)
        peer_row = (rank, p.optional(fields[1], "line", nlines),
                    p.optional(fields[2], "communicator", ncomms), p.number(fields[3], "peer", nranks),
                    p.number(fields[4], "messages", MAX_NATURAL + 1, low=1), p.number(fields[5], "bytes"))
        p.ordered(peers, peer_row, _peer_key)
        peers.append(peer_row)
    return ops, peers


class _Payload:
    """A cursor over the section's lines, with messages naming the file's line."""

    def __init__(self, data: bytes, path: str, line: int) -> None:
        self.data, self.path, self.no, self.pos = data, path, line - 1, 0

    def fail(self, problem: str) -> FormatError:
        return FormatError(self.path, self.no, f"mpi section: {problem}")

    def next_line(self) -> str:
        self.no += 1
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise self.fail("truncated (no line end)")
        raw, self.pos = self.data[self.pos:end], end + 1
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            raise self.fail("not ASCII") from None

    def block(self, key: str, nfields: int):
        """The rows of block ``key <n>``, as lists of ``nfields`` strings."""
        head = self.next_line()
        word, _, n_text = head.partition(" ")
        if word != key:
            raise self.fail(f"expected '{key} <count>', got {head[:80]!r}")
        n = self.number(n_text, f"{key} count")
        if n > (len(self.data) - self.pos) // nfields:     # a row takes >= nfields bytes
            raise self.fail(f"{key} count {n} is more than the section's bytes can hold")
        for _ in range(n):
            fields = self.next_line().split("|")
            if len(fields) != nfields:
                raise self.fail(f"a {key} row has {len(fields)} fields, expected {nfields}")
            yield fields

    def number(self, text: str, what: str, bound: int = MAX_NATURAL + 1, low: int = 0) -> int:
        try:
            v = natural(text)
        except ValueError:
            v = None
        if v is None or not low <= v < bound:
            expected = "" if bound > MAX_NATURAL else \
                " (none listed)" if bound <= low else f" (expected {low}..{bound - 1})"
            raise self.fail(f"bad {what} {text[:40]!r}{expected}")
        return v

    def optional(self, text: str, what: str, bound: int) -> int:
        return NONE if text == "" else self.number(text, what, bound)

    def ordered(self, rows: list, row: tuple, key: Callable) -> None:
        if rows and key(row) <= key(rows[-1]):
            raise self.fail("rows not in order, or a key twice")


def merge(parts: Sequence[Section]) -> Section:
    """The section of a file from the sections of its ranks, lowest rank
    first: communicators united by name (the first one's record wins)."""
    comms: List[Communicator] = []
    where: Dict[str, int] = {}
    ops: List[OpRow] = []
    peers: List[PeerRow] = []
    transport: List[TransportRow] = []
    ucx: List[StateRow] = []
    for part in parts:
        remap = {NONE: NONE}
        for i, c in enumerate(part.comms):
            if c.name not in where:
                where[c.name] = len(comms)
                comms.append(c)
            remap[i] = where[c.name]
        ops += [(r[0], r[1], remap[r[2]], *r[3:]) for r in part.ops]
        peers += [(r[0], r[1], remap[r[2]], *r[3:]) for r in part.peers]
        transport += part.transport
        ucx += part.ucx
    return Section(comms, ops, peers, transport, ucx)

