"""``analysis.compare.history``'s fast path: the flags decided against the
critical value of t are those of the exact p-values."""
from __future__ import annotations

import numpy as np
import pytest

from tinyprof.analysis.compare import _t_columns, _t_critical, _t_two_sided


@pytest.mark.parametrize("df", [1.0, 3.0, 7.0, 79.0, 1e6])
def test_the_critical_value_has_the_p_value_alpha(df):
    assert _t_two_sided(_t_critical(df, 0.05), 1.0, df) == pytest.approx(0.05, rel=1e-9)


def test_p_values_below_alpha_are_exact_and_the_others_not_below():
    rng = np.random.default_rng(7)
    n = 4000
    diff = rng.normal(0, 1, n) * rng.choice([0.0, 1.0, 3.0], n)
    se = np.abs(rng.normal(0, 1, n)) * rng.choice([0.0, 1.0], n, p=[0.05, 0.95])
    df = np.full(n, 7.0)
    wanted = rng.random(n) < 0.7
    exact = _t_columns(diff, se, df, wanted)
    fast = _t_columns(diff, se, df, wanted, alpha=0.05)
    assert np.array_equal(np.isnan(exact), ~wanted) and np.array_equal(np.isnan(fast), ~wanted)
    below = exact < 0.05
    assert 100 < below.sum() < wanted.sum() - 100            # both kinds are there
    assert np.array_equal(fast < 0.05, below)
    assert np.array_equal(fast[below], exact[below])
