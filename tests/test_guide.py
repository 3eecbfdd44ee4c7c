"""docs/guide.md's analysis section works as written: every ``sh`` command and
``python`` script in it runs on a fresh demo profile (``python -m tinyprof.demo
--run``, as ``make demo`` does), and what it prints has the words of the output
shown after it. ``tinyprof callflow`` serves: it must answer, then is stopped."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import urllib.request
from typing import List, Optional, Tuple

import pytest
from helpers.browser import free_port, serving

GUIDE = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "guide.md")
BIN = os.path.dirname(sys.executable)

for module in ("pandas", "plotly", "hatchet", "thicket"):
    pytest.importorskip(module)


def blocks(heading: str = "## Analysing a profile") -> List[Tuple[str, str, Optional[str]]]:
    """(language, code, the plain block that follows it, if any) in the section."""
    text = open(GUIDE, encoding="utf-8").read()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    found = re.findall(r"```(\w*)\n(.*?)```", text[start:end if end > 0 else None], re.S)
    return [(lang, code, after[1] if after and after[0] == "" else None)
            for (lang, code), after in zip(found, found[1:] + [None]) if lang in ("sh", "python")]


def words(text: str) -> set:
    return set(re.findall(r"[A-Za-z_]{3,}", text))


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory, mpiexec) -> str:
    where = tmp_path_factory.mktemp("guide")
    subprocess.run([sys.executable, "-m", "tinyprof.demo", "--run"], cwd=where, check=True,
                   stdout=subprocess.DEVNULL, timeout=300)
    return str(where)


def _serve(argv: List[str], cwd: str) -> str:
    """Run a serving command on a free port until it answers; its page."""
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    with serving(argv, port, cwd=cwd):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            return page.read().decode()


def _run(lang: str, code: str, cwd: str) -> str:
    if lang == "python":
        argv_list = [[sys.executable, "-c", code]]
    else:
        argv_list = [shlex.split(line) for line in code.splitlines()
                     if line.strip() and not line.startswith("#")]
    out = ""
    for argv in argv_list:
        if lang == "sh":
            assert os.access(os.path.join(BIN, argv[0]), os.X_OK), f"not a tinyprof command: {argv}"
            argv[0] = os.path.join(BIN, argv[0])
            if argv[1] == "callflow" and "--process-only" not in argv:
                out += _serve(argv, cwd)
                continue
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and "Traceback" not in done.stderr, \
            f"{' '.join(argv)[:200]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        out += done.stdout
    return out


def test_guide_has_its_examples():
    assert [lang for lang, _, _ in blocks()] == ["sh", "sh", "sh", "python", "sh", "sh", "python", "python"]


@pytest.mark.parametrize("lang,code,shown", blocks(),
                         ids=[code.split("\n")[0][:40] if lang == "sh" else f"python-{i}"
                              for i, (lang, code, _) in enumerate(blocks())])
def test_guide_analysis_runs(demo_dir, lang, code, shown):
    out = _run(lang, code, demo_dir)
    if shown is not None:
        missing = words(shown) - words(out)
        assert not missing, f"printed no {sorted(missing)}:\n{out}"
    for name in re.findall(r"[\w-]+\.html", code):      # the page it says it writes
        with open(os.path.join(demo_dir, name), encoding="utf-8") as f:
            assert "<html" in f.read(1000).lower(), name
