"""_internal.scaling.column_ranges: the columns' minima and maxima, the same as NumPy's."""

import numpy as np
import pytest

from mianalysis._internal import scaling
from mianalysis._internal.scaling import column_ranges


@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (2000, 10), (50, 64), (5, 300)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_column_ranges_equal_numpys(shape, dtype):
    a = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    low, high = column_ranges(a)
    np.testing.assert_array_equal(low, a.min(axis=0))
    np.testing.assert_array_equal(high, a.max(axis=0))
    assert low.dtype == a.dtype and high.dtype == a.dtype


def test_column_ranges_over_blocks_and_layouts(monkeypatch):
    monkeypatch.setattr(scaling, "RANGE_ROWS", 16)  # several blocks and a short last one
    rng = np.random.default_rng(1)
    a = rng.standard_normal((50, 4))
    a[37, 2] = -9.0  # the minimum of column 2 in the third block
    a[3, 0] = np.nan  # NaN propagates as NumPy's does
    for view in (a, np.asfortranarray(a), a[::2]):
        low, high = column_ranges(view)
        np.testing.assert_array_equal(low, view.min(axis=0))
        np.testing.assert_array_equal(high, view.max(axis=0))
    assert column_ranges(a)[0][2] == -9.0 and np.isnan(column_ranges(a)[1][0])
