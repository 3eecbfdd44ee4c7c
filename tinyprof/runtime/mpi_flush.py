"""The collective flush over MPI: the three phases of the paper (Section V).

1. Event synchronisation: every rank ends with the same ordered callpath list.
   Common callpaths are only checked (one small allreduce); the non-common
   ones travel, names as integer ids, in one allgather of equal-size buffers.
2. Aggregation: ranks form A contiguous groups; each group gathers its ranks'
   rows (encoded fields, then sections) end to end to its first rank, the
   aggregator.
3. File I/O: each aggregator joins the rows (``assemble.assemble_rows``) and
   writes its file with one atomic write.

The session hands everything down as data and nothing here calls back up.
Imported only when the application uses MPI (see ``session.Session.flush``),
so that ``import tinyprof`` never imports mpi4py. Design notes: docs/flush.md.
"""
from __future__ import annotations

import pickle
import time
import warnings
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

try:                    # CPython's own module: hashlib would load OpenSSL first (2.5 ms)
    from _blake2 import blake2b
except ImportError:     # another Python
    from hashlib import blake2b

import numpy as np
from mpi4py import MPI

from ..format import layout
from ..format.encoding import encode_consistent, encode_rank_field
from ..format.mpi_section import Section
from . import assemble, trace_block
from .assemble import SetLabel
from .collect import LocalEvent
from .settings import Settings, group_of
from .world import wait

Callpath = Tuple[str, ...]
Meta = Tuple[Callpath, int, bool]        # callpath, loop mode, is_common hint

_SEP = ord("|")
# A rank row starts with int64 (executions, fields' length, mpi length, trace length).
_ROW_HEAD = 32


@dataclass(frozen=True)
class FlushStats:
    """What one MPI flush did on this rank (tests and benchmarks): whether
    every file of the set was written, how phase 1 agreed (``"common"``: the
    hints held, ``"full"``: they did not), and the seconds spent copying and
    encoding the event map, then in each phase."""

    written: bool
    sync_path: str
    encode: float
    sync: float
    gather: float
    write: float


def flush(comm, settings: Settings, stem: str, label: SetLabel, events: List[LocalEvent],
          executions: int, groups: Dict[int, object], mpi: Optional[Section] = None,
          trace: Optional[trace_block.Records] = None) -> FlushStats:
    """The collective flush of this rank's ``events`` over ``comm``: the set of
    files ``<settings.outdir>/<stem>.<i>-of-<A>.tp``, labelled by ``label``.
    Consumes ``events``. ``groups`` caches the group communicator of each
    aggregator count: Split is collective and not free, so each grouping is
    made once per session. ``mpi`` is this rank's ``mpi`` section (lines:
    positions in ``events``), ``trace`` its trace records; a file has a
    section when any of its ranks has a part of it."""
    t0 = time.perf_counter()
    with_consistent = any(c for _, c in settings.metrics)
    meta, nodes, fields, consistent = _encode_local(events, settings.metrics)
    t_encoded = time.perf_counter()
    sync_path, order, loops = _synchronise(comm, meta)
    t1 = time.perf_counter()

    nranks, rank = comm.Get_size(), comm.Get_rank()
    naggs = settings.aggregator_count(nranks)
    index, first, size = group_of(rank, nranks, naggs)
    if naggs not in groups:
        groups[naggs] = comm.Split(index, rank)
    lines = {path: i for i, path in enumerate(order)} if mpi or trace else {}
    mine = [lines[path] for path, _, _ in meta] if lines else []
    del meta
    sections = (pickle.dumps(assemble.moved(mpi, mine), pickle.HIGHEST_PROTOCOL) if mpi else b"",
                trace_block.block(trace, {n: line for ids, line in zip(nodes, mine) for n in ids})
                if trace else b"")
    box = [_encode_row(order, fields, consistent if with_consistent else None, executions,
                       sections)]
    del sections
    gathered = _gather(groups[naggs], box)      # takes the row out of the box: freed once copied
    t2 = time.perf_counter()

    # [file written, no older set to remove], then the minimum over all ranks
    state = np.ones(2, np.int64)
    outdir = settings.outdir
    if gathered is not None:
        rows = [_Row(gathered, r, len(order), with_consistent) for r in range(size)]
        del gathered            # now the _Rows hold the buffer, and free it once encoded
        mpi_parts = [pickle.loads(row.mpi) for row in rows if len(row.mpi)]
        trace_parts = b"".join(row.trace for row in rows)
        header = label.header(nranks, first, size, index, naggs)
        data = assemble.assemble_rows(header, order, [loops[p] for p in order], rows,
                                      with_consistent, mpi_parts, trace_parts, label.tail(index))
        del rows, mpi_parts, trace_parts
        problem = layout.write_set_file(outdir, stem, index, naggs, data)
        if problem:
            warnings.warn(f"tinyprof: cannot write profile file {problem}; "
                          "the profile is incomplete", RuntimeWarning, stacklevel=3)
        state[0] = not problem
        if rank == 0 and state[0]:
            state[1] = not layout.stale_sets(outdir, stem, naggs)
    wait([comm.Iallreduce(MPI.IN_PLACE, state, op=MPI.MIN)])   # everyone knows: the set is complete
    if state[0] and not state[1]:
        if rank == 0:
            for path in layout.stale_sets(outdir, stem, naggs):
                layout.remove(path)
        wait([comm.Ibarrier()])  # no rank returns, and reads, before the old set is gone
    t3 = time.perf_counter()
    return FlushStats(bool(state[0]), sync_path, t_encoded - t0, t1 - t_encoded, t2 - t1,
                      t3 - t2)


def _encode_local(events: List[LocalEvent], metrics: Sequence[Tuple[str, bool]]
                  ) -> Tuple[List[Meta], List[List[int]], Dict[Callpath, bytes], Dict[Callpath, bytes]]:
    """This rank's callpaths ``(path, loop, common)`` in pre-order, their node
    ids, and its rank field and consistent field of each. Consumes
    ``events``: each copy of the event map is freed as soon as it is encoded."""
    consistent_keys = [k for k, c in metrics if c]
    inconsistent = [k for k, c in metrics if not c]
    meta: List[Meta] = []
    nodes: List[List[int]] = []     # the node ids each line stands for (sites: several)
    fields: Dict[Callpath, bytes] = {}
    consistent: Dict[Callpath, bytes] = {}
    events.reverse()
    while events:
        e = events.pop()
        meta.append((e.path, e.loop, e.common))
        nodes.append(getattr(e.node, "ids", [e.node.id]) if e.node is not None else [])
        fields[e.path] = encode_rank_field(e.times, e.execs, e.metric_columns(inconsistent))
        if consistent_keys:
            consistent[e.path] = encode_consistent(e.consistent, consistent_keys)
    return meta, nodes, fields, consistent


# -- phase 1: event synchronisation ---------------------------------------------

def _synchronise(comm, meta: Sequence[Meta]
                 ) -> Tuple[str, List[Callpath], Dict[Callpath, int]]:
    """How the ranks agreed (``FlushStats.sync_path``), the ordered callpath
    list of all ranks and each callpath's loop mode.

    Ranks that agree on the ordered common list (count and hash, minimum and
    maximum in one allreduce) exchange only their non-common callpaths; any
    disagreement, i.e. a wrong ``is_common`` hint, exchanges every callpath.
    """
    common_paths: Dict[Callpath, None] = {(): None}
    for path, _, is_common in meta:      # common only below common ancestors
        if is_common and path[:-1] in common_paths:
            common_paths[path] = None
    common = [(path, loop) for path, loop, _ in meta if path in common_paths]
    others = [(path, loop) for path, loop, _ in meta if path not in common_paths]
    known = [path for path, _ in common]
    base = list(dict.fromkeys(path[-1] for path in known))
    partial, full = _encode_paths(others, known, base), _encode_paths([m[:2] for m in meta], [], [])
    digest = _digest(common)
    stats = np.array([len(common), -len(common), digest, -digest, -len(partial), -len(full)],
                     dtype=np.int64)
    wait([comm.Iallreduce(MPI.IN_PLACE, stats, op=MPI.MIN)])
    if stats[0] == -stats[1] and stats[2] == -stats[3]:
        how, payload, size, loops = "common", partial, -int(stats[4]), dict(common)
    else:
        how, payload, size, loops = "full", full, -int(stats[5]), {}
        known, base = [], []
    send = np.zeros(size, np.uint8)
    send[:len(payload)] = np.frombuffer(payload, np.uint8)
    recv = np.empty(size * comm.Get_size(), np.uint8)
    wait([comm.Iallgather([send, MPI.BYTE], [recv, MPI.BYTE])])
    seen = set()
    for r in range(comm.Get_size()):     # lowest rank first, for merged_loop
        payload = recv[r * size:(r + 1) * size].tobytes()
        if payload not in seen:          # ranks alike send alike: decode each kind once
            seen.add(payload)
            for callpath, loop in _decode_paths(payload, known, base):
                loops[callpath] = assemble.merged_loop(loops.get(callpath), loop)
    return how, list(loops), loops


def _digest(paths: Sequence[Tuple[Callpath, int]]) -> int:
    """63-bit hash of the ordered (callpath, loop) list, a prefix-closed list in
    pre-order: ranks compare lists cheaply. Each callpath is hashed as (loop,
    parent's position, name), so the cost does not grow with the depth."""
    h = blake2b(digest_size=8)
    index: Dict[Callpath, int] = {}
    for path, loop in paths:
        parent = index[path[:-1]] if len(path) > 1 else -1
        index[path] = len(index)
        raw = path[-1].encode("utf-8", "surrogatepass")
        h.update(b"%d %d %d:" % (loop, parent, len(raw)) + raw)
    return int.from_bytes(h.digest(), "little") >> 1


def _encode_paths(paths: Sequence[Tuple[Callpath, int]], known: Sequence[Callpath],
                  base: Sequence[str]) -> bytes:
    """Callpaths and loop modes as int64 triples ``(loop, parent, name id)``:
    ``parent`` indexes the list ``known + paths`` (-1 for a root callpath),
    the name id the names ``base`` followed by the new names, which travel as
    UTF-8. A callpath costs the same whatever its depth.

    Layout: ``[new names, paths, len of each new name..., (loop, parent, id)
    per path...]`` in int64, then the new names' bytes.
    """
    index = {path: i for i, path in enumerate(known)}
    ids = {n: i for i, n in enumerate(base)}
    new: List[bytes] = []
    ints: List[int] = []
    for path, loop in paths:
        parent = index[path[:-1]] if len(path) > 1 else -1
        index[path] = len(index)
        i = ids.get(path[-1])
        if i is None:
            i = ids[path[-1]] = len(ids)
            new.append(path[-1].encode("utf-8", "surrogatepass"))
        ints += (loop, parent, i)
    head = [len(new), len(paths), *map(len, new)]
    return np.array(head + ints, dtype=np.int64).tobytes() + b"".join(new)


def _decode_paths(buf: bytes, known: Sequence[Callpath],
                  base: Sequence[str]) -> Iterator[Tuple[Callpath, int]]:
    """Invert :func:`_encode_paths` (``buf`` may carry padding after)."""
    nnew, npaths = np.frombuffer(buf, np.int64, 2).tolist()
    lens = np.frombuffer(buf, np.int64, nnew, 16).tolist()
    triples = np.frombuffer(buf, np.int64, 3 * npaths, 16 + 8 * nnew).reshape(-1, 3).tolist()
    names = list(base)
    pos = 16 + 8 * (nnew + 3 * npaths)
    for n in lens:
        names.append(buf[pos:pos + n].decode("utf-8", "surrogatepass"))
        pos += n
    paths = list(known)
    for loop, parent, i in triples:
        path = (paths[parent] if parent >= 0 else ()) + (names[i],)
        paths.append(path)
        yield path, loop


# -- phase 2: aggregation --------------------------------------------------------

def _encode_row(order: Sequence[Callpath], fields: Dict[Callpath, bytes],
                consistent: Optional[Dict[Callpath, bytes]], executions: int,
                sections: Tuple[bytes, bytes]) -> bytearray:
    """This rank's row: int64 (executions, fields' length, mpi length, trace
    length), then, with consistent metrics, a consistent field per callpath
    of ``order``, then a rank field per callpath, joined by ``|`` and empty
    where this rank lacks the callpath; then its ``mpi`` section (pickled, in
    the file's lines) and its trace block. Empties the dicts as it goes."""
    row = bytearray(_ROW_HEAD)
    if consistent is not None:
        for path in order:
            row += consistent.pop(path, b"")
            row += b"|"
    for i, path in enumerate(order):
        if i:
            row += b"|"
        row += fields.pop(path, b"")
    row[:_ROW_HEAD] = np.array([executions, len(row) - _ROW_HEAD, *map(len, sections)],
                               np.int64).tobytes()
    for payload in sections:
        row += payload
    return row


def _gather(group, box: List[bytearray]) -> Optional[Tuple[np.ndarray, List[int]]]:
    """The rows of the group, end to end in one uint8 array, and where each
    starts, on its first rank (None elsewhere): a Gather of the sizes, then
    one Gatherv, so no rank waits for the others before it sends. ``box``
    holds this rank's row and is emptied, so the row can be freed."""
    row = box.pop()
    size = np.array([len(row)], np.int64)
    if group.Get_rank() != 0:
        wait([group.Igather(size, None, root=0)])
        wait([group.Igatherv([row, MPI.BYTE], None, root=0)])
        return None
    sizes = np.empty(group.Get_size(), np.int64)
    wait([group.Igather(size, sizes, root=0)])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.empty(int(starts[-1]), np.uint8)
    rows[:len(row)] = np.frombuffer(row, np.uint8)
    del row                  # the last reference: freed before the gather
    wait([group.Igatherv(MPI.IN_PLACE, [rows, sizes, starts[:-1], MPI.BYTE], root=0)])
    return rows, starts.tolist()


class _Row:
    """One gathered row: its fields as zero-copy slices of the gather buffer.

    ``encode_file`` builds the file's lines in callpath order. Once it has
    taken the last rank field, the row drops the buffer, so the buffer is
    freed before ``encode_file`` joins the lines: an aggregator peaks near two
    file sizes (lines and file), not three. A later access fails loudly.
    """

    __slots__ = ("view", "starts", "ends", "offset", "last", "executions", "mpi", "trace")

    def __init__(self, gathered: Tuple[np.ndarray, List[int]], r: int, npaths: int,
                 with_consistent: bool) -> None:
        rows, starts = gathered
        start = starts[r]
        self.executions, used, mpi, trace = \
            np.frombuffer(rows[start:start + _ROW_HEAD], np.int64).tolist()
        begin, end = start + _ROW_HEAD, start + _ROW_HEAD + used
        seps = np.flatnonzero(rows[begin:end] == _SEP) + begin
        self.offset = npaths if with_consistent else 0
        if len(seps) != max(self.offset + npaths - 1, 0):
            raise RuntimeError(f"tinyprof: rank row {r} holds {len(seps) + 1} fields, "
                               f"expected {self.offset + npaths}")
        self.view = rows.data
        self.starts = [begin, *(seps + 1).tolist()]
        self.ends = [*seps.tolist(), end]
        self.last = self.offset + npaths - 1
        # Copied out: the buffer is freed once the last field is taken.
        self.mpi = rows[end:end + mpi].tobytes()
        self.trace = rows[end + mpi:end + mpi + trace].tobytes()

    def consistent(self, i: int) -> memoryview:
        """The consistent field of callpath ``i``."""
        return self.view[self.starts[i]:self.ends[i]]

    def __getitem__(self, i: int) -> memoryview:
        i += self.offset
        field = self.view[self.starts[i]:self.ends[i]]
        if i == self.last:
            self.view = memoryview(b"")     # the gathered buffer is freed with its last field
        return field
