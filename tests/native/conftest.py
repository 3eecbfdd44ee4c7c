"""The native (C++) tests: every test here is in the ``native`` tier, and the
programs they run are compiled once per session (helpers/native.py)."""
from __future__ import annotations

import pytest
from helpers.native import Builder, require_mpicxx


@pytest.fixture(scope="session")
def build(tmp_path_factory) -> Builder:
    require_mpicxx()
    return Builder(tmp_path_factory.mktemp("native-build"))
