"""The errors tinyprof raises to its callers, and the helpers that quote
user data in any message. A leaf, like ``_version``: every layer may import
it (tests/test_imports.py), and it imports nothing of tinyprof's."""
from __future__ import annotations

from typing import Optional, Union


def excerpt(text: Union[str, bytes], limit: int = 80) -> str:
    """``text`` quoted for a message, as ``repr`` quotes it (control
    characters escaped: nothing reaches a terminal raw), cut to ``limit``
    characters with its length said: a 10 MB name makes no 10 MB message."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} {'bytes' if isinstance(text, bytes) else 'characters'})"


def shown_path(path: str, limit: int = 512) -> str:
    """``path`` for a message: as it is when plain, else as :func:`excerpt`
    (a file name from a listed directory, or one made of a profile's name,
    may hold control characters or be long)."""
    return path if path.isprintable() and len(path) <= limit else excerpt(path, limit)


class FormatError(ValueError):
    """A profile file is truncated, corrupted, not a tinyprof profile, or too new."""

    def __init__(self, path: str, line: Optional[int], problem: str) -> None:
        self.path, self.line, self.problem = path, line, problem
        shown = shown_path(str(path))
        super().__init__(f"{shown}:{line}: {problem}" if line else f"{shown}: {problem}")


class ConvertError(ValueError):
    """A profile that the chosen view or target cannot hold as it is."""
