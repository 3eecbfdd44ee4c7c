"""The output directory: where the files of flushes and snapshots go.

``<outdir>/<stem>.<i>-of-<n>.tp`` is the set of the latest flush;
``<outdir>/snapshots/<k>/<stem>.<rank>-of-<P>.tp`` the files of snapshot k
(docs/format.md, "Files of a profile" and "Snapshots"). Every file is written
atomically; writers never raise ``OSError``: they return why they could not.
"""
from __future__ import annotations

import os
import shutil
from typing import List, Optional

from ._format import SUFFIX, file_name, write_atomic
from ._profile import _SET_RE, SNAPSHOTS, _complete


def write_file(directory: str, path: str, data: bytes) -> Optional[str]:
    """Create ``directory`` and write ``path`` in it atomically; why not, if it
    cannot (any ``OSError``: the callers warn, and the application goes on)."""
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomic(path, data)
    except OSError as e:
        return str(e.strerror or e)
    return None


def set_file(outdir: str, stem: str, index: int, count: int) -> str:
    """Path of file ``index`` of a ``count``-file set in ``outdir``."""
    return os.path.join(outdir, file_name(stem, index, count))


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
    return _complete(snapshot_dir(outdir, k)) is not None


def snapshot_numbers(outdir: str) -> List[int]:
    """Numbers of the snapshot directories, complete or not, oldest first."""
    try:
        entries = os.listdir(os.path.join(outdir, SNAPSHOTS))
    except OSError:
        return []
    return sorted(int(e) for e in entries if e.isdigit())


def prune_snapshots(outdir: str, k: int) -> None:
    """keep="last": once snapshot ``k`` is complete, remove every older one.
    Each rank checks after its own write (one directory listing), so the rank
    that completes ``k`` removes ``k - 1``; until then ``k - 1`` stays readable."""
    if not snapshot_is_complete(outdir, k):
        return
    for j in snapshot_numbers(outdir):
        if j < k:
            shutil.rmtree(snapshot_dir(outdir, j), ignore_errors=True)


def link_into(path: str, directory: str) -> None:
    """Make the file ``path`` also appear in ``directory`` (a hard link: one
    metadata operation, no copy); nothing if it cannot (the directory went)."""
    target = os.path.join(directory, os.path.basename(path))
    try:
        if not os.path.exists(target):
            tmp = f"{target}.tmp{os.getpid()}"
            os.link(path, tmp)
            os.replace(tmp, target)
    except OSError:
        pass
