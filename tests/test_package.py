import json
import os
import posixpath
import shutil
import subprocess
import sys
from pathlib import Path

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


REPO = Path(__file__).resolve().parents[1]


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)


def links_outside(root):
    """Tracked symbolic links (mode 120000) of the git checkout `root` whose target lies outside it.

    The target is the link's committed blob, resolved relative to the link's folder; an
    absolute target always counts as outside (a fresh clone elsewhere cannot have it).
    """
    listing = git(root, "ls-files", "-s", "-z")
    assert listing.returncode == 0, listing.stderr
    outside = []
    for entry in listing.stdout.split("\0"):
        if not entry.startswith("120000 "):
            continue
        meta, path = entry.split("\t", 1)
        target = git(root, "cat-file", "blob", meta.split()[1]).stdout
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        if posixpath.isabs(target) or resolved == ".." or resolved.startswith("../"):
            outside.append(f"{path} -> {target}")
    return outside


def test_links_outside_finds_absolute_and_escaping_links(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    assert git(tmp_path, "init", "-q").returncode == 0
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "file").write_text("x")
    os.symlink("/tmp/elsewhere", tmp_path / "absolute")
    os.symlink("../../outside", tmp_path / "sub" / "escaping")
    os.symlink("../file", tmp_path / "sub" / "up-and-back")  # repo/file: inside, though dangling
    os.symlink("file", tmp_path / "sub" / "inside")
    assert git(tmp_path, "add", "-A").returncode == 0
    assert sorted(links_outside(tmp_path)) == ["absolute -> /tmp/elsewhere", "sub/escaping -> ../../outside"]


def test_no_tracked_link_points_outside_the_repository():
    # A committed link to an absolute path (benchmarks/.peers-venv -> /tmp/peers-venv) broke
    # compare_peers.py on every fresh clone.
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    top = git(REPO, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != REPO:
        pytest.skip(f"{REPO} is not the root of a git checkout")
    assert links_outside(REPO) == []
