"""The output directory: where the files of flushes and snapshots go.

``<outdir>/<stem>.<i>-of-<n>.tp`` is the set of the latest flush;
``<outdir>/snapshots/<k>/<stem>.<rank>-of-<P>.tp`` the files of snapshot k
(docs/format.md, "Files of a profile" and "Snapshots"). Every file is written
atomically; writers never raise ``OSError``: they return why they could not.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Dict, List, Optional, Tuple

from .encoding import FormatError, shown_path

SUFFIX = ".tp"
SNAPSHOTS = "snapshots"       # subdirectory of an output directory holding the snapshots
_SET_RE = re.compile(r"^(?P<name>.*)\.(?P<index>\d+)-of-(?P<count>\d+)" + re.escape(SUFFIX) + "$")


def file_name(name: str, index: int, count: int) -> str:
    """``<name>.<index>-of-<count>.tp``, index zero-padded to the width of count."""
    safe = re.sub(r"[^\w.+-]", "_", name) or "profile"
    return f"{safe}.{index:0{len(str(count))}d}-of-{count}{SUFFIX}"


def write_atomic(path: str, data: bytes) -> None:
    """One write to a temporary file, then rename: readers never see half a
    file, and a failure leaves no temporary file behind."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_file(directory: str, path: str, data: bytes) -> Optional[str]:
    """Create ``directory`` and write ``path`` in it atomically; why not, if it
    cannot (any ``OSError``: the callers warn, and the application goes on)."""
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomic(path, data)
    except OSError as e:
        return str(e.strerror or e)
    return None


def write_set_file(directory: str, stem: str, index: int, count: int,
                   data: bytes) -> Optional[str]:
    """Write file ``index`` of a ``count``-file set into ``directory``
    (atomically, creating the directory); ``"<path>: <why>"`` if it cannot."""
    path = set_file(directory, stem, index, count)
    failure = write_file(directory, path, data)
    return f"{shown_path(path)}: {failure}" if failure else None


def set_file(outdir: str, stem: str, index: int, count: int) -> str:
    """Path of file ``index`` of a ``count``-file set in ``outdir``."""
    return os.path.join(outdir, file_name(stem, index, count))


def profile_files(path: str) -> List[str]:
    """The files of the one profile set at ``path`` (an output directory, a
    snapshot directory, or one file of a set), in index order; FormatError if
    there is none, several, or a file is missing."""
    if os.path.isdir(path):
        sets: Dict[Tuple[str, int], List[str]] = {}
        for entry in sorted(os.listdir(path)):
            m = _SET_RE.match(entry)
            if m:
                sets.setdefault((m["name"], int(m["count"])), []).append(entry)
        if not sets:
            raise FormatError(path, None, f"no tinyprof profile (*{SUFFIX}) in this directory")
        if len(sets) > 1:
            names = ", ".join(sorted(f"{n} ({c} files)" for n, c in sets))
            raise FormatError(path, None, f"several profiles in this directory: {names}; "
                                          "pass one file of the one you want")
        (name, count), = sets
        directory = path
    else:
        if not os.path.exists(path):
            raise FormatError(path, None, "no such file or directory")
        m = _SET_RE.match(os.path.basename(path))
        if not m:
            return [path]           # a lone file under another name: read it alone
        name, count, directory = m["name"], int(m["count"]), os.path.dirname(path) or "."
    expected = [os.path.join(directory, file_name(name, i, count)) for i in range(count)]
    missing = [p for p in expected if not os.path.exists(p)]
    if missing:
        raise FormatError(missing[0], None, f"missing: profile has {count} files, "
                                            f"{len(missing)} not found")
    return expected


def complete_files(directory: str) -> Optional[List[str]]:
    """The files of the one whole profile in ``directory``, else None."""
    try:
        return profile_files(directory)
    except (FormatError, OSError):
        return None


def complete_snapshots(outdir: str) -> List[int]:
    """Numbers of the complete snapshots in ``outdir``, oldest first: all
    their files there, and the snapshots their deltas build on too."""
    memo: Dict[str, Optional[int]] = {}
    return [k for k in snapshot_numbers(outdir) if chain(outdir, k, memo) is not None]


def newest(path: str) -> Tuple[List[str], Optional[int]]:
    """Files of the newest complete profile at ``path``, and its snapshot number
    (None for the flushed set): whichever set was completed last, by the
    modification time of its newest file."""
    numbers = snapshot_numbers(path) if os.path.isdir(path) else []
    done = next((k for k in reversed(numbers) if chain(path, k) is not None), None)
    if done is None:
        return profile_files(path), None
    latest = complete_files(snapshot_dir(path, done))
    flushed = complete_files(path)
    if latest is None or (flushed is not None and _mtime(flushed) >= _mtime(latest)):
        return profile_files(path), None
    return latest, done


def chain(outdir: str, k: int, memo: Optional[Dict[str, Optional[int]]] = None
          ) -> Optional[List[int]]:
    """The snapshots that reading snapshot ``k`` takes, oldest first: ``k``
    and, for each of its files that is a delta (``set snapshot k over j``),
    the same file of ``j``, and so on down to a full one. None if a file is
    missing or unreadable. ``memo`` caches each file's base across calls."""
    files = complete_files(snapshot_dir(outdir, k))
    if files is None:
        return None
    memo = {} if memo is None else memo
    needed = {k}
    for path in files:
        name, number = os.path.basename(path), k
        while True:
            if path not in memo:
                memo[path] = _base(path)
            base = memo[path]
            if base == _BROKEN:
                return None
            if base is None:
                break
            if base >= number:      # the reader refuses it too; no endless walk
                return None
            needed.add(base)
            path, number = os.path.join(snapshot_dir(outdir, base), name), base
    return sorted(needed)


_BROKEN = -1
_SET_LINE = re.compile(rb"set snapshot [0-9]+(?: over ([0-9]+))?")


def _base(path: str) -> Optional[int]:
    """The ``over`` number of a snapshot file's ``set`` line (its 4th line),
    None for a full snapshot, ``_BROKEN`` if the file is missing or unlike one."""
    try:
        with open(path, "rb") as f:
            head = b""
            while head.count(b"\n") < 4 and len(head) < _HEAD_LIMIT:
                more = f.read(4096)
                if not more:
                    break
                head += more
    except OSError:
        return _BROKEN
    lines = head.split(b"\n", 4)
    m = _SET_LINE.fullmatch(lines[3]) if len(lines) > 4 else None
    if m is None:
        return _BROKEN
    return None if m[1] is None else int(m[1])


_HEAD_LIMIT = 1 << 20       # a header line longer than this is not a snapshot's


def _mtime(paths: List[str]) -> int:
    return max(os.stat(p).st_mtime_ns for p in paths)


def stale_sets(outdir: str, stem: str, count: int) -> List[str]:
    """Files of older sets of profile ``stem`` in ``outdir`` whose file count
    is not ``count``: they must go, or ``read(outdir)`` finds two profiles."""
    safe = file_name(stem, 0, 1)[:-len(".0-of-1" + SUFFIX)]
    try:
        entries = os.listdir(outdir)
    except OSError:
        return []
    matches = ((entry, _SET_RE.match(entry)) for entry in entries)
    return [os.path.join(outdir, entry) for entry, m in matches
            if m and m["name"] == safe and int(m["count"]) != count]


def remove(path: str) -> None:
    """Remove a file that another process may have removed already."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def snapshot_dir(outdir: str, k: int) -> str:
    """Directory of snapshot ``k``."""
    return os.path.join(outdir, SNAPSHOTS, f"{k:06d}")


def snapshot_is_complete(outdir: str, k: int) -> bool:
    return complete_files(snapshot_dir(outdir, k)) is not None


def snapshot_numbers(outdir: str) -> List[int]:
    """Numbers of the snapshot directories, complete or not, oldest first."""
    try:
        entries = os.listdir(os.path.join(outdir, SNAPSHOTS))
    except OSError:
        return []
    return sorted(int(e) for e in entries if e.isdigit())


def prune_snapshots(outdir: str) -> None:
    """keep="last": remove every snapshot older than the newest complete one
    that reading it does not take (its chain of deltas stays)."""
    import shutil  # here: importing it costs every Profiler() about 1 ms
    numbers = snapshot_numbers(outdir)
    for k in reversed(numbers):
        needed = chain(outdir, k)
        if needed is not None:
            for j in numbers:
                if j < k and j not in needed:
                    shutil.rmtree(snapshot_dir(outdir, j), ignore_errors=True)
            return
