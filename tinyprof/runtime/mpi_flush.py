"""The collective flush over MPI: the three phases of the paper (Section V).

1. Event synchronisation: every rank ends with the same ordered callpath list.
   Common callpaths are only checked (one small allreduce); the non-common
   ones, names as integer ids, are merged up a binomial tree of point-to-point
   messages and the whole list broadcast: a rank holds the distinct callpaths,
   never one payload per rank.
2. Aggregation: ranks form A contiguous groups; each rank sends its row
   (encoded fields, then sections) to its group's first rank, the aggregator,
   point to point: no group communicator to split.
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

from ..format import output_dir
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
# Message tags on the session's private communicator: a size, then the bytes (tag + 1).
_TREE, _ROW = 21, 23
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
          executions: int, mpi: Optional[Section] = None,
          trace: Optional[trace_block.Records] = None) -> FlushStats:
    """The collective flush of this rank's ``events`` over ``comm``: the set of
    files ``<settings.outdir>/<stem>.<i>-of-<A>.tp``, labelled by ``label``.
    Consumes ``events``. ``comm`` is tinyprof's own (the session's ``Dup``),
    so its point-to-point messages never match the application's. ``mpi`` is
    this rank's ``mpi`` section (lines: positions in ``events``), ``trace``
    its trace records; a file has a section when any of its ranks has a part
    of it."""
    t0 = time.perf_counter()
    with_consistent = any(c for _, c in settings.metrics)
    meta, nodes, fields, consistent = _encode_local(events, settings.metrics)
    t_encoded = time.perf_counter()
    sync_path, order, loops = _synchronise(comm, meta)
    t1 = time.perf_counter()

    nranks, rank = comm.Get_size(), comm.Get_rank()
    naggs = settings.aggregator_count(nranks)
    index, first, size = group_of(rank, nranks, naggs)
    lines = {path: i for i, path in enumerate(order)} if mpi or trace else {}
    mine = [lines[path] for path, _, _ in meta] if lines else []
    del meta
    sections = (pickle.dumps(assemble.moved(mpi, mine), pickle.HIGHEST_PROTOCOL) if mpi else b"",
                trace_block.block(trace, {n: line for ids, line in zip(nodes, mine) for n in ids})
                if trace else b"")
    box = [_encode_row(order, fields, consistent if with_consistent else None, executions,
                       sections)]
    del sections
    gathered = _gather(comm, first, size, box)     # takes the row out of the box: freed once copied
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
        problem = output_dir.write_set_file(outdir, stem, index, naggs, data)
        if problem:
            warnings.warn(f"tinyprof: cannot write profile file {problem}; "
                          "the profile is incomplete", RuntimeWarning, stacklevel=3)
        state[0] = not problem
        if rank == 0 and state[0]:
            state[1] = not output_dir.stale_sets(outdir, stem, naggs)
    wait([comm.Iallreduce(MPI.IN_PLACE, state, op=MPI.MIN)])   # everyone knows: the set is complete
    if state[0] and not state[1]:
        if rank == 0:
            for path in output_dir.stale_sets(outdir, stem, naggs):
                output_dir.remove(path)
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
    The lists are merged up a binomial tree: rank r merges those of ranks
    r + 1, r + 2, r + 4, ... below its lowest set bit, i.e. ranks r to
    r + 2^k - 1 in order, so rank 0 ends with every rank's list in rank order,
    each callpath at its first occurrence; then it broadcasts the list.
    """
    common_paths: Dict[Callpath, None] = {(): None}
    for path, _, is_common in meta:      # common only below common ancestors
        if is_common and path[:-1] in common_paths:
            common_paths[path] = None
    common = [(path, loop) for path, loop, _ in meta if path in common_paths]
    known = [path for path, _ in common]
    base = list(dict.fromkeys(path[-1] for path in known))
    digest = _digest(common)
    stats = np.array([len(common), -len(common), digest, -digest], dtype=np.int64)
    wait([comm.Iallreduce(MPI.IN_PLACE, stats, op=MPI.MIN)])
    if stats[0] == -stats[1] and stats[2] == -stats[3]:
        how, loops = "common", dict(common)
        mine = [(path, loop) for path, loop, _ in meta if path not in common_paths]
    else:
        how, loops, known, base = "full", {}, [], []
        mine = [(path, loop) for path, loop, _ in meta]
    shared = len(loops)
    loops.update(mine)
    nranks, rank = comm.Get_size(), comm.Get_rank()
    children, step = [], 1
    while step < nranks and not rank & step:
        if rank + step < nranks:
            children.append(rank + step)
        step <<= 1
    lists, starts = _receive(comm, children, _TREE)
    for i in range(1, len(children) + 1):    # lowest ranks first, for merged_loop
        _merge(loops, lists[starts[i]:starts[i + 1]].tobytes(), known, base)
    del lists
    merged = _encode_paths(list(loops.items())[shared:], known, base)    # this rank's subtree
    if rank:
        _send(comm, rank & (rank - 1), _TREE, merged)
    size = np.array([len(merged)], np.int64)
    wait([comm.Ibcast(size, root=0)])
    whole = np.frombuffer(merged, np.uint8).copy() if rank == 0 else np.empty(int(size[0]), np.uint8)
    wait([comm.Ibcast([whole, MPI.BYTE], root=0)])
    if rank:
        loops = dict(list(loops.items())[:shared])
        _merge(loops, whole.tobytes(), known, base)
    return how, list(loops), loops


def _merge(loops: Dict[Callpath, int], buf: bytes, known: Sequence[Callpath],
           base: Sequence[str]) -> None:
    """Add the callpaths of one :func:`_encode_paths` buffer after those of
    ``loops`` (the lists of lower ranks)."""
    for callpath, loop in _decode_paths(buf, known, base):
        loops[callpath] = assemble.merged_loop(loops.get(callpath), loop)


def _send(comm, dest: int, tag: int, data) -> None:
    """``data`` to ``dest``: its size (tag ``tag``), then its bytes (``tag + 1``)."""
    size = np.array([len(data)], np.int64)
    wait([comm.Isend(size, dest, tag), comm.Isend([data, MPI.BYTE], dest, tag + 1)])


def _receive(comm, sources: Sequence[int], tag: int, first: bytes | bytearray = b""
             ) -> Tuple[np.ndarray, List[int]]:
    """``first``, then what each of ``sources`` sent with :func:`_send`, end
    to end in one uint8 array, and where each part starts (and the end)."""
    sizes = np.empty(len(sources) + 1, np.int64)
    sizes[0] = len(first)
    wait([comm.Irecv(sizes[i:i + 1], source, tag) for i, source in enumerate(sources, 1)])
    starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    out = np.empty(starts[-1], np.uint8)
    out[:len(first)] = np.frombuffer(first, np.uint8)
    del first               # the caller's last reference (a row): freed before the others arrive
    wait([comm.Irecv([out[starts[i]:starts[i + 1]], MPI.BYTE], source, tag + 1)
          for i, source in enumerate(sources, 1)])
    return out, starts


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


def _gather(comm, first: int, size: int, box: List[bytearray]
            ) -> Optional[Tuple[np.ndarray, List[int]]]:
    """The rows of the group of ranks ``first`` to ``first + size - 1``, end to
    end in one uint8 array, and where each starts, on its first rank (None
    elsewhere), sent point to point. ``box`` holds this rank's row and is
    emptied, so the row can be freed."""
    if comm.Get_rank() != first:
        _send(comm, first, _ROW, box.pop())
        return None
    return _receive(comm, range(first + 1, first + size), _ROW, first=box.pop())


class _Row(assemble.Row):
    """One gathered row: its fields as zero-copy slices of the gather buffer.

    ``encode_file`` takes the rank fields once each, in line order
    (``format.encoding.Fields``). Once it has taken the last one, the row
    drops the buffer, so the buffer is freed before ``encode_file`` joins the
    lines: an aggregator peaks near two file sizes (lines and file), not
    three. A later access is an IndexError, never an empty field.
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
        if i == self.last:      # the gathered buffer is freed with its last field
            self.view, self.starts, self.ends = memoryview(b""), [], []
        return field
