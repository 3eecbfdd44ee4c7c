"""MPI capture from Python: libtinyprof_mpi, hooked to mpi4py and the C core.

The library (``native/src/tinyprof_mpi.c``, built by ``pip install`` into
the package directory) wraps MPI calls and counts them per thread under the
caller's current callpath node, which it reads from the C core's thread-local
(``_core._source_address``). Python never runs on that path. This module
loads the library, redirects mpi4py's calls to it (``tinyprof_mpi_patch``:
works whenever a profiler starts, no ``LD_PRELOAD`` needed), pauses it around
tinyprof's own traffic and turns its tables into this rank's ``mpi`` section,
with the transport view (UCP operations, classified by the library) when asked.
Design: docs/mpi.md.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

from ..format import mpi_section
from ..format.mpi_section import NONE, Communicator

if TYPE_CHECKING:       # numpy is loaded by a flush, not when capture starts
    import numpy as np

LIBRARY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "libtinyprof_mpi.so")
ABI = 3                             # TINYPROF_MPI_ABI of native/include/tinyprof/tinyprof_mpi.h
_OP_FIELDS, _PEER_FIELDS, _COMM_FIELDS, _TR_FIELDS, _EP_FIELDS, _UCX_FIELDS = 7, 5, 4, 8, 6, 9
_SELFLIKE, _PRIVATE = 1, 2
_MPI4PY = "mpi4py/MPI"              # the path part of mpi4py's extension module


class Unavailable(Exception):
    """Capture cannot work here; the message says why and what to do."""


def not_built(library: str) -> str:
    """Why ``library`` (libtinyprof_mpi.so, libtinyprof_whole.so) is missing:
    its build's error as setup.py recorded it beside it at install (the first
    lines of the compiler's message; where to read it whole)."""
    record = library + ".build-error"
    try:
        with open(record, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return (f"{os.path.basename(library)} not built, and no record of its build ({record}): "
                "reinstall tinyprof with an MPI compiler (mpicc, mpicxx) on PATH or MPICC and MPICXX set")
    errors = list(dict.fromkeys(line for line in lines[1:] if "error" in line))[:3] or lines[1:4]
    more = f" (the compiler's whole message: {record})" if len(lines) > 1 + len(errors) else ""
    return "\n  ".join(lines[:1] + errors) + more


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    i64p, szp = ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_size_t)
    for name, res, args in (
            ("tinyprof_mpi_abi", ctypes.c_int, []),
            ("tinyprof_mpi_set_source", None, [ctypes.c_void_p]),
            ("tinyprof_mpi_enable", None, [ctypes.c_int]),
            ("tinyprof_mpi_pause", ctypes.c_int, [ctypes.c_int]),
            ("tinyprof_mpi_reset", None, []),
            ("tinyprof_mpi_patch", ctypes.c_int, [ctypes.c_char_p]),
            ("tinyprof_mpi_ops", i64p, [szp]),
            ("tinyprof_mpi_peers", i64p, [szp]),
            ("tinyprof_mpi_free", None, [ctypes.c_void_p]),
            ("tinyprof_mpi_comm_count", ctypes.c_int, []),
            ("tinyprof_mpi_comm_info", ctypes.c_int,
             [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, i64p]),
            ("tinyprof_mpi_comm_members", ctypes.c_int,
             [ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t]),
            ("tinyprof_mpi_op_name", ctypes.c_char_p, [ctypes.c_int]),
            ("tinyprof_mpi_trace", None, [ctypes.c_size_t]),
            ("tinyprof_mpi_trace_calls", i64p, [szp, ctypes.POINTER(i64p), szp, i64p]),
            ("tinyprof_ucx_enable", ctypes.c_int, [ctypes.c_int]),
            ("tinyprof_ucx_rows", i64p, [szp, ctypes.POINTER(ctypes.c_void_p), szp]),
            ("tinyprof_ucx_classify", ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int64,
                                                     ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
            ("tinyprof_ucx_op_name", ctypes.c_char_p, [ctypes.c_int])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_hooked: List[ctypes.CDLL] = []     # the library, once loaded and in mpi4py's path


def family(library_version: str) -> str:
    """The MPI family (whose ABI a library built against it needs) of an
    ``MPI_Get_library_version`` text."""
    if "Open MPI" in library_version:
        return "Open MPI"
    if any(name in library_version for name in ("MPICH", "Intel(R) MPI", "MVAPICH")):
        return "MPICH"
    return "unknown"


def _load() -> ctypes.CDLL:
    """The library, loaded, once it is known to be built for the MPI that
    mpi4py loaded (read from its file: loading one built for another would
    end the process); :class:`Unavailable` otherwise."""
    if not os.path.exists(LIBRARY):
        raise Unavailable(not_built(LIBRARY))
    from mpi4py import MPI
    loaded = " ".join(MPI.Get_library_version().split("\n")[0].split(",")[0].split())
    try:
        with open(LIBRARY, "rb") as f:
            found = re.search(rb"tinyprof-mpi-family:([^\0]*)\0", f.read())
    except OSError as e:
        raise Unavailable(f"cannot read {LIBRARY}: {e}") from None
    built = found[1].decode("ascii", "replace") if found else "unknown"
    if "unknown" not in (built, family(loaded)) and built != family(loaded):
        raise Unavailable(f"{LIBRARY} was built for {built}, but mpi4py loaded {loaded}: reinstall "
                          "tinyprof with this MPI's compiler (MPICC), docs/mpi.md")
    try:
        return _bind(ctypes.CDLL(LIBRARY))
    except (OSError, AttributeError) as e:
        raise Unavailable(f"cannot load {LIBRARY}: {e}") from None


def _hook() -> ctypes.CDLL:
    """The library, in the path of mpi4py's MPI calls: as it is if linked or
    LD_PRELOADed (its MPI_* are the ones everybody calls), else loaded and
    patched into mpi4py's extension module, once per process."""
    if _hooked:
        return _hooked[0]
    process = ctypes.CDLL(None)
    if hasattr(process, "tinyprof_mpi_abi"):
        lib = _check(_bind(process))
    else:
        lib = _check(_load())
        if lib.tinyprof_mpi_patch(_MPI4PY.encode()) <= 0:
            raise Unavailable("cannot redirect mpi4py's MPI calls to the capture library")
    _hooked.append(lib)
    return lib


def _check(lib: ctypes.CDLL) -> ctypes.CDLL:
    if lib.tinyprof_mpi_abi() != ABI:
        raise Unavailable(f"the capture library has interface version {lib.tinyprof_mpi_abi()}, "
                          f"this tinyprof needs {ABI}: reinstall tinyprof")
    return lib


def op_names() -> List[str]:
    """The operations the library counts ("Allreduce", "Isend", ...); none
    before mpi4py is loaded (loading the library loads MPI) or if it cannot be."""
    if not _hooked and "mpi4py.MPI" not in sys.modules:
        return []
    try:
        lib = _hooked[0] if _hooked else _load()
    except Unavailable:
        return []
    names: List[str] = []
    while True:
        raw = lib.tinyprof_mpi_op_name(len(names))
        if not raw:
            return names
        names.append(raw.decode())


def in_call_address() -> int:
    """The address of ``tinyprof_mpi_in_call`` (which counted MPI call a
    thread is inside) of the library in mpi4py's path, for the sampler; 0
    when MPI is not captured in this process (or the library predates it)."""
    if not _hooked:
        return 0
    try:
        return ctypes.cast(_hooked[0].tinyprof_mpi_in_call, ctypes.c_void_p).value or 0
    except AttributeError:
        return 0


@dataclass
class CallTrace:
    """The MPI calls traced so far (``tinyprof_mpi_trace_calls``), with names."""

    calls: np.ndarray               # (M, 8) int64: tid, node, start, dur, op, comm, bytes, root
    endpoints: np.ndarray           # (K, 6) int64: call, kind, peer, tag, bytes, comm record
    dropped: int
    ops: List[str]                  # name of each op code of the calls
    comms: Dict[int, str]           # communicator record -> name (non-private ones)


class Capture:
    """The loaded library, recording for this process."""

    def __init__(self, lib: ctypes.CDLL, source: Optional[int]) -> None:
        self.lib = lib
        self.source = source            # address of the C core's source function
        self.attributes = source is not None    # calls charged to callpaths, not all to none
        self._ops: Dict[int, str] = {}
        self.ucx: Optional[str] = None  # the transport view: "unused" (hooked) or "unavailable"

    @classmethod
    def start(cls) -> Capture:
        """Load, hook and enable the library; :class:`Unavailable` if it cannot work."""
        lib = _hook()
        from .. import annotate
        address = getattr(annotate.impl, "_source_address", None)
        source = address() if address is not None else None
        lib.tinyprof_mpi_set_source(source)
        lib.tinyprof_mpi_enable(1)
        return cls(lib, source)

    def start_ucx(self) -> Optional[str]:
        """Count UCP operations too; the reason they cannot be, or None."""
        hooked = self.lib.tinyprof_ucx_enable(1)
        self.ucx = "unused" if hooked > 0 else "unavailable"
        if hooked < 0:
            return "libucp is not in this process: this MPI does not use UCX, no transport view"
        if hooked == 0:
            return "no loaded library calls UCP operations: this MPI does not use UCX, no transport view"
        return None

    def stop(self) -> None:
        self.lib.tinyprof_mpi_enable(0)
        if self.ucx == "unused":
            self.lib.tinyprof_ucx_enable(0)

    def reset(self) -> None:
        """Forget every count (with a reset of the event map, whose nodes they name)."""
        self.lib.tinyprof_mpi_reset()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """tinyprof's own MPI traffic in this thread: never counted; the
        communicators it creates are private."""
        self.lib.tinyprof_mpi_pause(1)
        try:
            yield
        finally:
            self.lib.tinyprof_mpi_pause(0)

    def section(self, rank: int, lines: Dict[int, int]) -> mpi_section.Section:
        """What this rank recorded so far, as an ``mpi`` section of one rank:
        ``lines`` maps node ids to the file's event lines (others: NONE)."""
        comms, index = self._comms(lines)
        ops = [(rank, lines.get(node, NONE), index.get(comm, NONE), self._op(op), k, calls, nbytes, t)
               for node, comm, op, k, calls, nbytes, t in self._table("tinyprof_mpi_ops", _OP_FIELDS)]
        peers = [(rank, lines.get(node, NONE), index.get(comm, NONE), peer, messages, nbytes)
                 for node, comm, peer, messages, nbytes in self._table("tinyprof_mpi_peers", _PEER_FIELDS)]
        section = mpi_section.Section(comms, _summed(ops, 5), _summed(peers, 4))
        if self.ucx is not None:
            section.transport = self._transport(rank, lines)
            section.ucx = [(rank, "used" if section.transport else self.ucx)]
        return section

    def _transport(self, rank: int, lines: Dict[int, int]) -> List[mpi_section.TransportRow]:
        """The UCP operations counted so far, each with the protocol and
        transport UCX selects for its endpoint, operation and size (the library's)."""
        import numpy as np

        n, size, names = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_void_p()
        records = self.lib.tinyprof_ucx_rows(ctypes.byref(n), ctypes.byref(names), ctypes.byref(size))
        try:
            table = np.ctypeslib.as_array(records, (n.value, _UCX_FIELDS)).tolist() if records else []
            text = ctypes.string_at(names.value, size.value) if names.value else b""
        finally:
            self.lib.tinyprof_mpi_free(records)
            self.lib.tinyprof_mpi_free(names)

        def name(at: int) -> str:
            return text[at:text.index(b"\0", at)].decode("ascii", "replace")
        rows = [(rank, lines.get(node, NONE), self._op(op) if op >= 0 else "",
                 self.lib.tinyprof_ucx_op_name(code).decode(), name(protocol), name(transport), calls, nbytes)
                for node, op, code, _, _, calls, nbytes, protocol, transport in table]
        return _summed(rows, 6)

    def trace(self, limit: int) -> None:
        """Trace mode: keep up to ``limit`` calls with their messages; 0: off."""
        self.lib.tinyprof_mpi_trace(limit)

    def trace_calls(self) -> CallTrace:
        """The calls traced so far (not consumed)."""
        import numpy as np

        n, k, dropped = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_int64()
        eps = ctypes.POINTER(ctypes.c_int64)()
        calls = self.lib.tinyprof_mpi_trace_calls(ctypes.byref(n), ctypes.byref(eps),
                                                  ctypes.byref(k), ctypes.byref(dropped))
        try:
            rows = np.ctypeslib.as_array(calls, (n.value, _TR_FIELDS)).copy() if calls else \
                np.zeros((0, _TR_FIELDS), np.int64)
            ends = np.ctypeslib.as_array(eps, (k.value, _EP_FIELDS)).copy() if eps else \
                np.zeros((0, _EP_FIELDS), np.int64)
        finally:
            self.lib.tinyprof_mpi_free(calls)
            self.lib.tinyprof_mpi_free(eps)
        ops = [self._op(op) for op in range(int(np.max(rows[:, 4], initial=-1)) + 1)]
        comms, index = self._comms({})
        return CallTrace(rows, ends, dropped.value, ops,
                         {i: comms[pos].name for i, pos in index.items()})

    def _table(self, which: str, width: int) -> List[List[int]]:
        import numpy as np

        n = ctypes.c_size_t()
        records = getattr(self.lib, which)(ctypes.byref(n))
        if not records:
            return []
        try:
            return np.ctypeslib.as_array(records, (n.value, width)).tolist()
        finally:
            self.lib.tinyprof_mpi_free(records)

    def _op(self, op: int) -> str:
        name = self._ops.get(op)
        if name is None:
            raw = self.lib.tinyprof_mpi_op_name(op)
            name = self._ops[op] = raw.decode() if raw else f"Op{op}"
        return name

    def _comms(self, lines: Dict[int, int]) -> Tuple[List[Communicator], Dict[int, int]]:
        """The non-private communicators, and each one's position among them."""
        comms: List[Communicator] = []
        index: Dict[int, int] = {}
        by_name: Dict[str, int] = {}        # fallback names may repeat: one record each
        name = ctypes.create_string_buffer(256)
        info = (ctypes.c_int64 * _COMM_FIELDS)()
        for i in range(self.lib.tinyprof_mpi_comm_count()):
            if self.lib.tinyprof_mpi_comm_info(i, name, len(name), info) < 0 or info[3] & _PRIVATE:
                continue
            size, known, created = info[0], info[1], info[2]
            members: Tuple[int, ...] = ()
            if known and not info[3] & _SELFLIKE:
                out = (ctypes.c_int32 * known)()
                got = self.lib.tinyprof_mpi_comm_members(i, out, known)
                members = tuple(out[:max(got, 0)])
            if len(members) != size and not info[3] & _SELFLIKE:
                continue            # a communicator whose members could not be learnt
            text = name.value.decode("ascii", "replace")
            if text not in by_name:
                by_name[text] = len(comms)
                comms.append(Communicator(text, size, members, lines.get(created, NONE)))
            index[i] = by_name[text]
        return comms, index


def _summed(rows: List[tuple], key_len: int) -> List[tuple]:
    """The rows with the same key (the first ``key_len`` fields) summed into
    one: node ids that map to no line, and communicators that share a name."""
    out: Dict[tuple, List[int]] = {}
    for r in rows:
        acc = out.setdefault(r[:key_len], [0] * (len(r) - key_len))
        for i, v in enumerate(r[key_len:]):
            acc[i] += v
    return [key + tuple(values) for key, values in out.items()]
