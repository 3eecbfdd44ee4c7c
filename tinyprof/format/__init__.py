"""The file format (docs/format.md): codecs of every section, the output
directory's layout and the reader. Pure functions and files; it imports
nothing else of tinyprof, so the writer (runtime/), the reader (analysis/)
and the C++ header share one contract."""
from ..errors import FormatError
from .encoding import FORMAT_VERSION, Header

__all__ = ["FORMAT_VERSION", "FormatError", "Header"]
