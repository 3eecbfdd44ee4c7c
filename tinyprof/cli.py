"""``python -m tinyprof.cli``: the ``tinyprof`` command (tinyprof/commands/, where
the console scripts ``tinyprof`` and ``tinyprof-convert`` point)."""
import sys

from .commands import convert_main, main

__all__ = ["main", "convert_main"]

if __name__ == "__main__":
    sys.exit(main())
