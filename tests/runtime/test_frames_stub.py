"""tinyprof/runtime/_frames.pyi, what type checkers see of the _frames extension,
against the built module."""
import ast
from pathlib import Path

import pytest

_frames = pytest.importorskip("tinyprof.runtime._frames")


def _declared(body):
    return ({n.name for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} |
            {n.target.id for n in body if isinstance(n, ast.AnnAssign)})


def test_stub_declares_exactly_the_public_names():
    stub = ast.parse(Path(_frames.__file__).with_name("_frames.pyi").read_text())
    built = {n for n in vars(_frames) if not n.startswith("__")}
    if not _frames.sites_supported():       # Samples and sites_* exist only where frames are read
        built |= {"Samples", "sites_start", "sites_below", "sites_read"}
    assert _declared(stub.body) == built
    for cls in (n for n in stub.body if isinstance(n, ast.ClassDef) and hasattr(_frames, n.name)):
        members = _declared(cls.body)
        for member in members:
            assert hasattr(getattr(_frames, cls.name), member), (cls.name, member)
        public = {n for n in dir(getattr(_frames, cls.name)) if not n.startswith("_")}
        assert public <= members, cls.name
