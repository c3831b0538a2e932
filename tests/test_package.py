import json
import os
import subprocess
import sys

import pytest


def run_python(code, env=None):
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_import_does_not_load_torch_or_matplotlib():
    loaded = json.loads(
        run_python(
            "import json, sys, mianalysis; "
            "print(json.dumps([m for m in ('torch', 'matplotlib', 'numba') if m in sys.modules]))"
        )
    )
    assert loaded == []


KSG_IN_SUBPROCESS = """
import json, numpy as np
from mianalysis import ksg_mi
from mianalysis.estimators import _kernels
rng = np.random.default_rng(0)
x = rng.standard_normal((300, 8)); y = 0.5 * x + rng.standard_normal((300, 8))
values = [ksg_mi(x, y, noise=0, distance_cache=cache) for cache in (True, False)]
kernels = [_kernels.symmetric_block_rows, _kernels.block_row_counts, _kernels.ksg_neighbour_counts]
hits = [sum(kernel.stats.cache_hits.values()) for kernel in kernels]
misses = [sum(kernel.stats.cache_misses.values()) for kernel in kernels]
print(json.dumps({"values": values, "hits": min(hits), "misses": sum(misses)}))
"""


def test_parallel_kernel_cache_is_reused_across_thread_counts(tmp_path):
    # Parallel kernels have had caching bugs when the number of threads changes between
    # the run that wrote the cache and the run that loads it: compile with one count, load
    # with another, and check the value and that no recompilation happened.
    runs = []
    for threads in ("2", "1", "2"):
        env = {"NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_NUM_THREADS": threads}
        runs.append(json.loads(run_python(KSG_IN_SUBPROCESS, env)))
    assert runs[0]["misses"] >= 1
    assert all(r["misses"] == 0 and r["hits"] >= 1 for r in runs[1:])
    assert len({value for r in runs for value in r["values"]}) == 1
    assert any(p.suffix == ".nbi" for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("name", ["gaussian_mi", "ksg_mi", "mi_permutation_test", "paired_distances", "mean_paired_distance"])
def test_public_api_is_documented(name):
    import mianalysis

    doc = getattr(mianalysis, name).__doc__
    assert "Parameters" in doc and "Returns" in doc
