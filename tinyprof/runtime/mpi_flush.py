"""The collective flush over MPI: the three phases of the paper (Section V).

1. Event synchronisation: every rank ends with the same ordered callpath list.
   Common callpaths are only checked (one small allreduce); the non-common
   ones travel, names as integer ids, in one allgather of equal-size buffers.
2. Aggregation: ranks form A contiguous groups; each group gathers its ranks'
   encoded rows (equal-size uint8 buffers) to its first rank, the aggregator.
3. File I/O: each aggregator writes its file with one atomic write.

Imported only when the application uses MPI (see ``_session.Session.flush``),
so that ``import tinyprof`` never imports mpi4py. Design notes: docs/flush.md.
"""
from __future__ import annotations

import time
import warnings
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

try:                    # CPython's own module: hashlib would load OpenSSL first (2.5 ms)
    from _blake2 import blake2b
except ImportError:     # another Python
    from hashlib import blake2b

import numpy as np
from mpi4py import MPI

from ..format import layout, mpi_section
from ..format.encoding import Header, encode_consistent, encode_file, encode_rank_field
from . import assemble
from .assemble import HeaderMaker
from .collect import LocalEvent
from .settings import Settings

Callpath = Tuple[str, ...]
Meta = Tuple[Callpath, int, bool]        # callpath, loop mode, is_common hint
# A rank's part of a section for the file lines given (callpath -> line):
# its payload, b"" when it has none.
Part = Callable[[Dict[Callpath, int]], bytes]
SECTIONS = ("mpi", "trace")             # in file order

_SEP = ord("|")
_ROW_HEAD = 16          # a rank row starts with int64 (used length, executions)

# How phase 1 agreed in the last flush: "common" (hints held) or "full" (tests).
last_sync = ""
# Seconds this rank spent in the last flush (benchmarks): "encode" (copy and
# encode the event map), then the phases "sync", "gather" and "write".
last_timings: Dict[str, float] = {}


def flush(comm, settings: Settings, stem: str, make_header: HeaderMaker,
          events: List[LocalEvent], executions: int, groups: Dict[int, object],
          parts: Optional[Dict[str, Part]] = None) -> bool:
    """The collective flush of this rank's ``events`` over ``comm``: the set of
    files ``<settings.outdir>/<stem>.<i>-of-<A>.tp``; whether every file of
    it was written (the same on all ranks). Consumes ``events``. ``groups``
    caches the group communicator of each aggregator count: Split is
    collective and not free, so each grouping is made once per session.
    ``parts`` gives this rank's parts of the sections (``SECTIONS``) it has;
    a section is written when any rank of the file has a part of it."""
    t0 = time.perf_counter()
    keys = [k for k, c in settings.metrics if c]
    meta, fields, consistent = _encode_local(events, settings.metrics)
    t_encoded = time.perf_counter()
    order, loops = _synchronise(comm, meta)
    del meta
    t1 = time.perf_counter()

    nranks, rank = comm.Get_size(), comm.Get_rank()
    naggs = settings.aggregator_count(nranks)
    index, first, size = group_of(rank, nranks, naggs)
    if naggs not in groups:
        groups[naggs] = comm.Split(index, rank)
    group = groups[naggs]
    box = [_encode_row(order, fields, consistent if keys else None, executions)]
    rows = _gather(group, box)                  # takes the row out of the box: freed once copied
    gathered_parts = _gather_parts(comm, group, parts or {}, order)
    t2 = time.perf_counter()

    # [file written, no older set to remove], then the minimum over all ranks
    state = np.ones(2, np.int64)
    outdir = settings.outdir
    if rows is not None:
        ranks = [_Row(rows, r, len(order), bool(keys)) for r in range(size)]
        del rows                # now the _Rows hold the buffer, and free it once encoded
        header = make_header(nranks, first, size, index, naggs)
        sections = _sections(gathered_parts, header, len(order))
        state[0] = _write(outdir, stem, header, ranks, order, loops, sections)
        if rank == 0 and state[0]:
            state[1] = not layout.stale_sets(outdir, stem, naggs)
    comm.Allreduce(MPI.IN_PLACE, state, op=MPI.MIN)   # everyone knows: the new set is complete
    if state[0] and not state[1]:
        if rank == 0:
            for path in layout.stale_sets(outdir, stem, naggs):
                layout.remove(path)
        comm.Barrier()          # no rank returns, and reads, before the old set is gone
    t3 = time.perf_counter()
    last_timings.clear()
    last_timings.update(encode=t_encoded - t0, sync=t1 - t_encoded, gather=t2 - t1, write=t3 - t2)
    return bool(state[0])


def _encode_local(events: List[LocalEvent], metrics: Sequence[Tuple[str, bool]]
                  ) -> Tuple[List[Meta], Dict[Callpath, bytes], Dict[Callpath, bytes]]:
    """This rank's callpaths ``(path, loop, common)`` in pre-order, and its rank
    field and consistent field of each. Consumes ``events``: each copy of the
    event map is freed as soon as it is encoded."""
    consistent_keys = [k for k, c in metrics if c]
    inconsistent = [k for k, c in metrics if not c]
    meta: List[Meta] = []
    fields: Dict[Callpath, bytes] = {}
    consistent: Dict[Callpath, bytes] = {}
    events.reverse()
    while events:
        e = events.pop()
        meta.append((e.path, e.loop, e.common))
        fields[e.path] = encode_rank_field(e.times, e.execs, e.metric_columns(inconsistent))
        if consistent_keys:
            consistent[e.path] = encode_consistent(e.consistent, consistent_keys)
    return meta, fields, consistent


def group_of(rank: int, nranks: int, naggs: int) -> Tuple[int, int, int]:
    """``(index, first rank, size)`` of the group of ``rank`` when ``nranks``
    ranks form ``naggs`` contiguous groups whose sizes differ by at most one."""
    small, extra = divmod(nranks, naggs)        # the first `extra` groups hold one more
    edge = extra * (small + 1)
    index = rank // (small + 1) if rank < edge else extra + (rank - edge) // small
    return index, index * small + min(index, extra), small + (index < extra)


# -- phase 1: event synchronisation ---------------------------------------------

def _synchronise(comm, meta: Sequence[Meta]) -> Tuple[List[Callpath], Dict[Callpath, int]]:
    """The ordered callpath list of all ranks and each callpath's loop mode.

    Ranks that agree on the ordered common list (count and hash, minimum and
    maximum in one allreduce) exchange only their non-common callpaths; any
    disagreement, i.e. a wrong ``is_common`` hint, exchanges every callpath.
    """
    global last_sync
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
    comm.Allreduce(MPI.IN_PLACE, stats, op=MPI.MIN)
    if stats[0] == -stats[1] and stats[2] == -stats[3]:
        last_sync, payload, size, loops = "common", partial, -int(stats[4]), dict(common)
    else:
        last_sync, payload, size, loops = "full", full, -int(stats[5]), {}
        known, base = [], []
    send = np.zeros(size, np.uint8)
    send[:len(payload)] = np.frombuffer(payload, np.uint8)
    recv = np.empty(size * comm.Get_size(), np.uint8)
    comm.Allgather([send, MPI.BYTE], [recv, MPI.BYTE])
    seen = set()
    for r in range(comm.Get_size()):     # lowest rank first, for merged_loop
        payload = recv[r * size:(r + 1) * size].tobytes()
        if payload not in seen:          # ranks alike send alike: decode each kind once
            seen.add(payload)
            for path, loop in _decode_paths(payload, known, base):
                loops[path] = assemble.merged_loop(loops.get(path), loop)
    return list(loops), loops


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
                consistent: Optional[Dict[Callpath, bytes]], executions: int) -> bytearray:
    """This rank's row: int64 (used length, executions), then, with consistent
    metrics, a consistent field per callpath of ``order``, then a rank field
    per callpath, joined by ``|``; empty where this rank lacks the callpath
    (the padding that makes rows alike). Empties the dicts as it goes."""
    row = bytearray(_ROW_HEAD)
    if consistent is not None:
        for path in order:
            row += consistent.pop(path, b"")
            row += b"|"
    for i, path in enumerate(order):
        if i:
            row += b"|"
        row += fields.pop(path, b"")
    row[:_ROW_HEAD] = np.array([len(row), executions], np.int64).tobytes()
    return row


def _gather(group, box: List[bytearray]) -> Optional[np.ndarray]:
    """Rows of the group, one per line of a uint8 array, on its first rank
    (None elsewhere): one allreduce for the size, one Gather of equal sizes.
    ``box`` holds this rank's row and is emptied, so the row can be freed."""
    row = box.pop()
    size = np.array([len(row)], np.int64)
    group.Allreduce(MPI.IN_PLACE, size, op=MPI.MAX)
    width = int(size[0])
    if group.Get_rank() != 0:
        row += bytes(width - len(row))
        group.Gather([row, MPI.BYTE], None, root=0)
        return None
    rows = np.empty((group.Get_size(), width), np.uint8)
    rows[0, :len(row)] = np.frombuffer(row, np.uint8)
    del row                  # the last reference: freed before the gather
    group.Gather(MPI.IN_PLACE, [rows, MPI.BYTE], root=0)
    return rows


class _Row:
    """One gathered row: its fields as zero-copy slices of the gather buffer.

    ``encode_file`` builds the file's lines in callpath order. Once it has
    taken the last rank field, the row drops the buffer, so the buffer is
    freed before ``encode_file`` joins the lines: an aggregator peaks near two
    file sizes (lines and file), not three. A later access fails loudly.
    """

    __slots__ = ("view", "starts", "ends", "offset", "last", "executions")

    def __init__(self, rows: np.ndarray, r: int, npaths: int, with_consistent: bool) -> None:
        used, self.executions = np.frombuffer(rows[r, :_ROW_HEAD], np.int64).tolist()
        seps = np.flatnonzero(rows[r, _ROW_HEAD:used] == _SEP) + _ROW_HEAD
        self.offset = npaths if with_consistent else 0
        if len(seps) != max(self.offset + npaths - 1, 0):
            raise RuntimeError(f"tinyprof: rank row {r} holds {len(seps) + 1} fields, "
                               f"expected {self.offset + npaths}")
        base = r * rows.shape[1]
        self.view: Optional[memoryview] = memoryview(rows.reshape(-1))
        self.starts = np.concatenate([[_ROW_HEAD], seps + 1]) + base
        self.ends = np.concatenate([seps, [used]]) + base
        self.last = self.offset + npaths - 1

    def consistent(self, i: int) -> memoryview:
        """The consistent field of callpath ``i``."""
        return self.view[self.starts[i]:self.ends[i]]

    def __getitem__(self, i: int) -> memoryview:
        i += self.offset
        field = self.view[self.starts[i]:self.ends[i]]
        if i == self.last:
            self.view = None
        return field


# -- phase 3: file I/O ---------------------------------------------------------------

def _gather_parts(comm, group, parts: Dict[str, Part], order: Sequence[Callpath]
                  ) -> Dict[str, List[bytes]]:
    """On the aggregator, each section's parts from its group's ranks, in rank
    order. Every rank takes part in the gather of every section some rank
    has (an allreduce of the flags first), so ranks that differ never hang."""
    flags = np.array([name in parts for name in SECTIONS], np.int64)
    comm.Allreduce(MPI.IN_PLACE, flags, op=MPI.MAX)
    lines = {path: i for i, path in enumerate(order)} if parts else {}
    out: Dict[str, List[bytes]] = {}
    for name, wanted in zip(SECTIONS, flags.tolist()):
        if not wanted:
            continue
        payload = parts[name](lines) if name in parts else b""
        gathered = _gather(group, [bytearray(np.int64(len(payload)).tobytes() + payload)])
        if gathered is not None:
            out[name] = [bytes(row[8:8 + int(np.frombuffer(row[:8], np.int64)[0])])
                         for row in gathered]
    return out


def _sections(parts: Dict[str, List[bytes]], header: Header,
              nlines: int) -> List[Tuple[str, bytes]]:
    """The file's sections from its ranks' parts: the ``mpi`` rows merged, the
    ``trace`` blocks (one per rank, in rank order) concatenated. A section no
    rank of the file has a part of is not written."""
    out = []
    mpi = [p for p in parts.get("mpi", ()) if p]
    if mpi:
        first, count, where = header.first_rank, header.rank_count, "rank payload"
        merged = mpi_section.merge([mpi_section.parse(p, where, 1, nlines, first, count,
                                                      header.nranks) for p in mpi])
        out.append(("mpi", mpi_section.encode_section(merged)))
    trace = b"".join(parts.get("trace", ()))
    if trace:
        out.append(("trace", trace))
    return out


def _write(outdir: str, stem: str, header: Header, ranks: List[_Row],
           order: Sequence[Callpath], loops: Dict[Callpath, int],
           sections: Sequence[Tuple[str, bytes]] = ()) -> bool:
    """Assemble and write this aggregator's file; False (and a warning) if it cannot."""
    n = len(order)
    header.executions = [row.executions for row in ranks]
    consistent = [_merge_consistent(ranks, i) if ranks[0].offset else b"" for i in range(n)]
    names, parents, ids = assemble.name_table(order)
    data = encode_file(header, names, parents, ids, [loops[p] for p in order], consistent, ranks,
                       sections)
    path = layout.set_file(outdir, stem, header.file_index, header.file_count)
    failure = layout.write_file(outdir, path, data)
    if failure:
        warnings.warn(f"tinyprof: cannot write profile file {path}: {failure}; "
                      "the profile is incomplete", RuntimeWarning, stacklevel=2)
    return not failure


def _merge_consistent(ranks: Sequence[_Row], i: int) -> bytes:
    """Callpath ``i``'s consistent field: per metric, the lowest rank's value."""
    merged: List[bytes] = []
    for row in ranks:
        given = row.consistent(i)
        if len(given):
            for k, token in enumerate(bytes(given).split(b",")):
                if k == len(merged):
                    merged.append(token)
                elif not merged[k]:
                    merged[k] = token
    return b",".join(merged)
