"""The one reading of tinyprof's boolean environment variables (docs/api.md,
"Environment variables"). A leaf, like ``_version``: the annotation layer
reads ``TINYPROF`` with it before anything else is loaded."""
from __future__ import annotations

import os
import warnings
from typing import Set

TRUE = ("1", "on", "true", "yes")
FALSE = ("0", "off", "false", "no")

_warned: Set[str] = set()


def flag(name: str, default: bool) -> bool:
    """Environment variable ``name`` as a boolean: on with 1, on, true or
    yes, off with 0, off, false or no (any case and spacing); ``default``
    when unset or empty. Any other value warns once and is ``default``:
    a job's environment never raises into the application."""
    value = os.environ.get(name, "").strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    if value and name not in _warned:
        _warned.add(name)
        warnings.warn(f"tinyprof: {name}={os.environ[name].strip()[:40]!r} is neither on (1, on, true, yes) "
                      f"nor off (0, off, false, no); taken as {'on' if default else 'off'}",
                      RuntimeWarning, stacklevel=2)
    return default
