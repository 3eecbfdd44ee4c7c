"""CallFlow's own environment (docs/convert.md): its Python, made on first
use if ``make install`` did not, and the frames it pickles, read there."""
from __future__ import annotations

import functools
import json
import subprocess
from typing import Any, Dict, List

from tinyprof.converters import callflow

# CallFlow's own frames: pandas 1.5 pickles of hatchet 1.4.1 Nodes, read by CallFlow's Python.
_READ_FRAME = ("import pandas as pd, sys; f = pd.read_pickle(sys.argv[1]); "
               "print(f.to_json(orient='records', default_handler=str, double_precision=15))")


@functools.cache
def callflow_python() -> str:
    """The Python of CallFlow's environment (made here only if make install did not)."""
    return callflow.environment()


def callflow_frame(path) -> List[Dict[str, Any]]:
    """The rows of a dataframe CallFlow pickled, read in CallFlow's environment."""
    done = subprocess.run([callflow_python(), "-I", "-c", _READ_FRAME, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)
