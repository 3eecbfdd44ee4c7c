"""The ``trace`` section of format version 2: codec (docs/format.md#the-trace-section).

A payload is a list of rank blocks in ascending rank order; each block is
self-contained (its own thread and communicator tables), so the aggregator
merges its ranks' blocks by concatenating them. Rows are integer columns in
numpy arrays: encoding and parsing a million occurrences take no Python
object per value on the parse side, and one formatted line each on the
encode side (``make_block`` sorts and indexes, ``encode`` writes).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import FormatError

NONE = -1                   # an empty field: no line, communicator or root
SEND, RECV = 0, 1           # endpoint kinds
Clock = Tuple[int, int, int, int, int]      # local0, offset0, local1, offset1, error

# Columns of Block.events, Block.calls and Block.endpoints.
EVENT_COLUMNS = ("thread", "line", "start", "dur")
CALL_COLUMNS = ("thread", "line", "start", "dur", "op", "comm", "bytes", "root")
ENDPOINT_COLUMNS = ("call", "kind", "peer", "tag", "bytes", "comm")

_NAT = rb"(?:0|[1-9][0-9]*)"
_TIME = rb"(?:0|-?[1-9][0-9]*)"
_COMM_RE = re.compile(r"[A-Za-z0-9_.@]{1,255}")
_OP_RE = re.compile(r"[A-Z][A-Za-z_]{0,63}")
_EVENT_ROW = re.compile(_NAT + rb"\|" + _NAT + rb"\|" + _NAT + rb"\|" + _NAT + rb"\n")
_CALL_RE = re.compile(rb"(" + _NAT + rb")\|(" + _NAT + rb")?\|(" + _NAT + rb")\|(" + _NAT +
                      rb")\|([A-Z][A-Za-z_]{0,63})\|(" + _NAT + rb")?\|(" + _NAT + rb")\|(" +
                      _NAT + rb")?\|(.*)")
_ENDPOINT_RE = re.compile(rb"([sr])(" + _NAT + rb"):(" + _NAT + rb"):(" + _NAT + rb"):(" + _NAT +
                          rb")")
_CLOCK_RE = re.compile(rb"clock (" + _TIME + rb")\|(" + _TIME + rb")\|(" + _TIME + rb")\|(" +
                       _TIME + rb")\|(" + _NAT + rb")")
_INT64_MAX = 2 ** 63 - 1


@dataclass
class Block:
    """One rank's trace: the rows of a block, sorted, with its tables."""

    rank: int
    clock: Clock
    threads: List[int]                  # OS thread ids, ascending
    comms: List[str]                    # communicator names
    events: np.ndarray                  # (E, 4) int64: EVENT_COLUMNS
    calls: np.ndarray                   # (M, 8) int64: CALL_COLUMNS, op indexes ops
    ops: List[str]                      # operation names of the calls' op column
    endpoints: np.ndarray               # (K, 6) int64: ENDPOINT_COLUMNS, by call
    dropped: Tuple[int, int] = (0, 0)   # events, calls not kept
    line: int = 0                       # the file line of its "rank" line (errors)

    def global_times(self, local: np.ndarray) -> np.ndarray:
        """Local clock readings as rank 0's clock: the offset interpolated
        linearly between the first and the latest synchronisation."""
        l0, o0, l1, o1, _ = self.clock
        if l1 == l0:
            return local + o0
        return local + (o0 + (local - l0) * ((o1 - o0) / (l1 - l0))).astype(np.int64)


def make_block(rank: int, clock: Clock, events: np.ndarray, calls: np.ndarray,
               call_ops: Sequence[str], endpoints: np.ndarray, comm_names: Sequence[str],
               dropped: Tuple[int, int] = (0, 0), events_sorted: bool = False) -> Block:
    """A block from raw records, in recording order.

    ``events``: (E, 4) int64 rows (tid, line, start, dur). ``calls``: (M, 7)
    int64 rows (tid, line or NONE, start, dur, comm or NONE, bytes, root or
    NONE), ``call_ops`` their operation names. ``endpoints``: (K, 6) rows
    (call index, kind, peer, tag, bytes, comm). ``comm_names[i]`` names
    communicator ``i`` of the calls and endpoints. Rows are sorted by (start,
    thread, dur descending), stably; threads become indices into the ascending
    tid list and communicators into the list of those the calls and their
    endpoints use, in order of first use. With ``events_sorted``, the event
    rows are in that order already and are taken, not copied (their thread
    column changed in place): a trace's largest array is not held twice.
    """
    events = np.asarray(events, np.int64).reshape(-1, 4)
    calls = np.asarray(calls, np.int64).reshape(-1, 7)
    endpoints = np.asarray(endpoints, np.int64).reshape(-1, 6)
    tids = np.union1d(events[:, 0], calls[:, 0])      # sorted, distinct
    threads = tids.tolist()

    # fancy indexing copies: the caller's rows stay as they were
    if events_sorted:
        ev = events
    else:
        ev = events[np.lexsort((-events[:, 3], events[:, 0], events[:, 2]))] if len(events) else events.copy()
    ev[:, 0] = np.searchsorted(tids, ev[:, 0])

    order = np.lexsort((-calls[:, 3], calls[:, 0], calls[:, 2])) if len(calls) else \
        np.zeros(0, np.int64)
    sorted_calls = calls[order]
    new_index = np.empty(len(order), np.int64)
    new_index[order] = np.arange(len(order))
    eps = endpoints.copy()
    if len(eps):
        eps[:, 0] = new_index[eps[:, 0]]
        eps = eps[np.argsort(eps[:, 0], kind="stable")]
    used: dict = {}
    ep_comms = np.split(eps[:, 5], np.searchsorted(eps[:, 0], np.arange(1, len(order)))) \
        if len(order) else []
    for c, mine in zip(sorted_calls[:, 4].tolist(), ep_comms):
        for x in [c, *mine.tolist()]:
            if x != NONE and x not in used:
                used[x] = len(used)
    if len(eps):
        eps[:, 5] = [used[x] for x in eps[:, 5].tolist()]
    op_names: dict = {}
    ops = [call_ops[i] for i in order.tolist()]
    out = np.empty((len(order), 8), np.int64)
    out[:, 0] = np.searchsorted(tids, sorted_calls[:, 0])
    out[:, 1:4] = sorted_calls[:, 1:4]
    out[:, 4] = [op_names.setdefault(op, len(op_names)) for op in ops]
    out[:, 5] = [used.get(c, NONE) for c in sorted_calls[:, 4].tolist()]
    out[:, 6:8] = sorted_calls[:, 5:7]
    return Block(rank, clock, threads, [comm_names[c] for c in used], ev, out,
                 list(op_names), eps, dropped)


def encode(blocks: Sequence[Block]) -> bytes:
    """The payload of the blocks (given in ascending rank order)."""
    out: List[bytes] = []
    for b in blocks:
        head = [f"rank {b.rank}\nclock {'|'.join(map(str, b.clock))}\n",
                "|".join(map(str, [f"threads {len(b.threads)}", *b.threads])) + "\n",
                "|".join([f"comms {len(b.comms)}", *b.comms]) + "\n",
                f"events {len(b.events)}|{b.dropped[0]}\n"]
        out.append("".join(head).encode())
        ev = b.events
        for lo in range(0, len(ev), _CHUNK):    # Python objects for a chunk of rows at a time
            rows = ev[lo:lo + _CHUNK]
            d = np.diff(rows[:, 2], prepend=ev[lo - 1, 2] if lo else 0)
            out.append("".join(f"{t}|{ln}|{s}|{u}\n" for t, ln, s, u in
                               zip(rows[:, 0].tolist(), rows[:, 1].tolist(), d.tolist(),
                                   rows[:, 3].tolist())).encode())
        calls = b.calls
        out.append(f"calls {len(calls)}|{b.dropped[1]}\n".encode())
        if len(calls):
            out.append("".join(_call_rows(b)).encode())
    return b"".join(out)


_CHUNK = 1 << 16


def _call_rows(b: Block) -> List[str]:
    calls, eps = b.calls, b.endpoints
    bounds = np.searchsorted(eps[:, 0], np.arange(len(calls) + 1)).tolist()
    eps_text = [f"{'sr'[k]}{p}:{t}:{n}:{c}" for k, p, t, n, c in eps[:, 1:].tolist()]
    d = np.diff(calls[:, 2], prepend=0).tolist()
    rows = []
    for i, (t, ln, _, u, op, c, n, root) in enumerate(calls.tolist()):
        rows.append(f"{t}|{_opt(ln)}|{d[i]}|{u}|{b.ops[op]}|{_opt(c)}|{n}|{_opt(root)}|"
                    f"{','.join(eps_text[bounds[i]:bounds[i + 1]])}\n")
    return rows


def _opt(v: int) -> str:
    return "" if v == NONE else str(v)


# -- reading -------------------------------------------------------------------------

@dataclass
class _Reader:
    data: bytes
    where: str
    line0: int
    pos: int = 0
    line: int = 0
    errors: List[str] = field(default_factory=list)

    def fail(self, message: str, line: Optional[int] = None) -> FormatError:
        n = self.line0 + (self.line if line is None else line) - 1
        return FormatError(self.where, n, f"trace section: {message}")

    def next_line(self) -> bytes:
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise self.fail("truncated: a line does not end in a newline")
        text = self.data[self.pos:end]
        self.pos = end + 1
        self.line += 1
        return text

    def keyed(self, key: bytes) -> bytes:
        text = self.next_line()
        if not text.startswith(key + b" "):
            raise self.fail(f"expected '{key.decode()} ...', got {text[:40]!r}")
        return text[len(key) + 1:]


def _nat(r: _Reader, token: bytes, what: str, bound: int = _INT64_MAX) -> int:
    if not re.fullmatch(_NAT, token) or int(token) > bound:
        raise r.fail(f"bad {what} {token[:30]!r}")
    return int(token)


def _counted(r: _Reader, key: bytes) -> Tuple[int, List[bytes]]:
    """``key N|a|b|...``: N and the N items."""
    parts = r.keyed(key).split(b"|")
    n = _nat(r, parts[0], f"{key.decode()} count")
    if len(parts) != n + 1:
        raise r.fail(f"{key.decode()} says {n} items but has {len(parts) - 1}")
    return n, parts[1:]


def parse(payload: bytes, where: str, line0: int, nlines: int, first: int, count: int,
          nranks: int) -> List[Block]:
    """The blocks of a file's trace section, checked against the file: ranks
    in [first, first + count) ascending, lines below ``nlines``, peers and
    roots below ``nranks``. ``line0`` is the file line of the payload's first
    line, for the messages. Raises FormatError."""
    r = _Reader(bytes(payload), where, line0)
    blocks: List[Block] = []
    while r.pos < len(r.data):
        line = r.line
        rank = _nat(r, r.keyed(b"rank"), "rank")
        if not first <= rank < first + count or (blocks and rank <= blocks[-1].rank):
            raise r.fail(f"rank {rank} is not a later rank of this file")
        m = _CLOCK_RE.fullmatch(r.next_line())
        if m is None or any(abs(int(v)) > _INT64_MAX for v in m.groups()):
            raise r.fail("expected 'clock local0|offset0|local1|offset1|error'")
        l0, o0, l1, o1, err = (int(v) for v in m.groups())    # the pattern has 5 groups
        if l1 < l0:
            raise r.fail("clock: the latest alignment (local1) is before the first (local0)")
        clock = (l0, o0, l1, o1, err)
        _, tids = _counted(r, b"threads")
        threads = [_nat(r, t, "thread id") for t in tids]
        if threads != sorted(set(threads)):
            raise r.fail("thread ids are not ascending and distinct")
        _, names = _counted(r, b"comms")
        comms = [n.decode("ascii", "replace") for n in names]
        if not all(_COMM_RE.fullmatch(c) for c in comms) or len(set(comms)) != len(comms):
            raise r.fail("bad or repeated communicator name")
        nev, ev_dropped = _pair(r, b"events")
        events = _event_rows(r, nev, len(threads), nlines)
        ncalls, calls_dropped = _pair(r, b"calls")
        calls, ops, eps = _call_rows_parse(r, ncalls, len(threads), len(comms), nlines, nranks)
        _check_calls(r, calls, eps, comms)
        blocks.append(Block(rank, clock, threads, comms, events, calls, ops, eps,
                            (ev_dropped, calls_dropped), line0 + line))
    return blocks


def _pair(r: _Reader, key: bytes) -> Tuple[int, int]:
    parts = r.keyed(key).split(b"|")
    if len(parts) != 2:
        raise r.fail(f"expected '{key.decode()} <rows>|<dropped>'")
    n = _nat(r, parts[0], f"{key.decode()} count", len(r.data))
    return n, _nat(r, parts[1], "dropped count")


def _event_rows(r: _Reader, n: int, nthreads: int, nlines: int) -> np.ndarray:
    end = r.pos
    for _ in range(n):
        end = r.data.find(b"\n", end) + 1
        if end == 0:
            raise r.fail("truncated: fewer event rows than declared")
    region = r.data[r.pos:end]
    if not _numeric_rows(region, n, 4):
        for i, row in enumerate(region.split(b"\n")[:-1]):     # find the bad row
            if not _EVENT_ROW.fullmatch(row + b"\n"):
                raise r.fail(f"bad event row {row[:60]!r}", r.line + 1 + i)
    # fromstring saturates at 2^64-1, which the bound below rejects
    rows = np.fromstring(region.replace(b"|", b" "), dtype=np.uint64, sep=" ").reshape(-1, 4) \
        if n else np.zeros((0, 4), np.uint64)
    if len(rows) and np.max(rows) > _INT64_MAX:
        raise r.fail("a number in an event row exceeds 2^63-1")
    rows = rows.astype(np.int64)
    bad = np.flatnonzero((rows[:, 0] >= nthreads) | (rows[:, 1] >= nlines))
    if len(bad):
        raise r.fail("event row names an unknown thread or event line", r.line + 1 + int(bad[0]))
    rows[:, 2] = _cumulative(r, rows[:, 2], r.line + 1)
    _check_order(r, rows, r.line + 1, "event")
    r.pos, r.line = end, r.line + n
    return rows


def _check_order(r: _Reader, rows: np.ndarray, line: int, what: str) -> None:
    """Rows of equal start: by thread, then the longer duration first
    (starts ascend by their natural deltas). ``line``: that of the first row."""
    same = rows[1:, 2] == rows[:-1, 2]
    thread, dur = rows[:, 0], rows[:, 3]
    bad = np.flatnonzero(same & ((thread[1:] < thread[:-1]) |
                                 ((thread[1:] == thread[:-1]) & (dur[1:] > dur[:-1]))))
    if len(bad):
        raise r.fail(f"{what} rows of one start not by thread, then the longer first", line + 1 + int(bad[0]))


def _check_calls(r: _Reader, calls: np.ndarray, eps: np.ndarray, comms: List[str]) -> None:
    """The rules between a block's call rows and its tables: their order, and
    the communicators listed in order of first use by the calls and their
    endpoints (as the writers list them)."""
    _check_order(r, calls, r.line - len(calls) + 1, "call")
    used: dict = {}
    ends = np.split(eps[:, 5], np.searchsorted(eps[:, 0], np.arange(1, len(calls)))) if len(calls) else []
    for c, mine in zip(calls[:, 5].tolist(), ends):
        for x in [c, *mine.tolist()]:
            if x != NONE:
                used.setdefault(x, len(used))
    if list(used) != list(range(len(comms))):
        raise r.fail("communicators not listed once each in order of first use by the calls")


def _numeric_rows(region: bytes, n: int, width: int) -> bool:
    """Whether ``region`` is exactly ``n`` lines of ``width`` naturals
    separated by ``|``: the grammar of _EVENT_ROW, checked with array
    operations (a regular expression takes 4x as long)."""
    if n == 0:
        return not region
    b = np.frombuffer(region, np.uint8)
    sep = (b == ord("|")) | (b == ord("\n"))
    if not np.all(sep | ((b >= ord("0")) & (b <= ord("9")))):
        return False
    at = np.flatnonzero(sep)
    if len(at) != n * width:
        return False
    pattern = np.full(width, ord("|"), np.uint8)
    pattern[-1] = ord("\n")
    if not np.array_equal(b[at], np.tile(pattern, n)):
        return False
    starts = np.concatenate(([0], at[:-1] + 1))     # first digit of each field
    if np.any(at - starts < 1):                      # an empty field
        return False
    zero = starts[b[starts] == ord("0")]            # a leading zero: "0" then a digit
    return not np.any(~sep[zero + 1])


def _cumulative(r: _Reader, deltas: np.ndarray, line: int) -> np.ndarray:
    """Start times from their deltas; ``line``: that of the first row."""
    starts = np.cumsum(deltas)      # the deltas are naturals: an overflow turns negative
    if len(starts) and starts.min() < 0:
        raise r.fail("start times exceed 2^63-1", line + int(np.argmax(starts < 0)))
    return starts


def _call_rows_parse(r: _Reader, n: int, nthreads: int, ncomms: int, nlines: int,
                     nranks: int) -> Tuple[np.ndarray, List[str], np.ndarray]:
    calls = np.empty((n, 8), np.int64)
    ops: dict = {}
    eps: List[Tuple[int, int, int, int, int, int]] = []
    for i in range(n):
        text = r.next_line()
        m = _CALL_RE.fullmatch(text)
        if m is None:
            raise r.fail(f"bad call row {text[:60]!r}")
        t, ln, d, u, op, c, nbytes, root, ends = m.groups()
        row = (int(t), _opt_int(ln), int(d), int(u), ops.setdefault(op.decode(), len(ops)),
               _opt_int(c), int(nbytes), _opt_int(root))
        if row[0] >= nthreads or row[1] >= nlines or row[5] >= ncomms or row[7] >= nranks \
                or max(row) > _INT64_MAX:
            raise r.fail("call row names an unknown thread, line, communicator or rank")
        calls[i] = row
        for ep in ends.split(b",") if ends else ():
            e = _ENDPOINT_RE.fullmatch(ep)
            if e is None or int(e[2]) >= nranks or max(int(e[3]), int(e[4])) > _INT64_MAX \
                    or int(e[5]) >= ncomms:
                raise r.fail(f"bad endpoint {ep[:40]!r}")
            eps.append((i, SEND if e[1] == b"s" else RECV, int(e[2]), int(e[3]), int(e[4]),
                        int(e[5])))
    calls[:, 2] = _cumulative(r, calls[:, 2], r.line - n + 1)
    return calls, list(ops), np.array(eps, np.int64).reshape(-1, 6)


def _opt_int(token: Optional[bytes]) -> int:
    return NONE if token is None else int(token)
