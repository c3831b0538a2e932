import json
import os
import posixpath
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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


def test_version_command_exits_zero_without_loading_torch_or_matplotlib():
    out = subprocess.run(
        [sys.executable, "-c", "import json, sys; from mianalysis.cli import main; code = main(['--version']); "
         "print(json.dumps([code, [m for m in ('torch', 'matplotlib') if m in sys.modules]]))"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    version_line, result = out.stdout.splitlines()
    import mianalysis

    assert version_line == f"mianalysis {mianalysis.__version__}"
    assert json.loads(result) == [0, []]


def test_pyproject_metadata():
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = meta["project"]
    # One source of truth for the version: mianalysis.__version__, read at build time.
    assert "version" not in project and "version" in project["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mianalysis._version.__version__"}
    # PEP 639 licence metadata, and the file it names.
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]
    assert (REPO / "LICENSE").read_text().startswith("BSD 3-Clause License\n")
    assert "setuptools>=77" in meta["build-system"]["requires"]
    # The package states what it needs; this machine's torch build is a constraint, not a cap.
    assert "torch>=2.1" in project["dependencies"]
    assert "torch==2.13.0" in (REPO / "constraints.txt").read_text().splitlines()


KSG_IN_SUBPROCESS = """
import json, numpy as np
from mianalysis import ksg_mi
from mianalysis.estimators import _checked_kernels, _kernels
rng = np.random.default_rng(0)
x = rng.standard_normal((600, 8)); y = 0.5 * x + rng.standard_normal((600, 8))
# 600 runs of 16 features: float64 data take the checked float32 kernels (every parallel kernel of ksg_mi's two
# routes but the float64 row counts, which compile and cache the same way)
values = [ksg_mi(x, y, noise=0, distance_cache=cache) for cache in (True, False)]
kernels = [_kernels.symmetric_block_rows, _checked_kernels.checked_block_row_counts,
           _checked_kernels.checked_neighbour_counts]
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
    assert all(r["values"] == runs[0]["values"] for r in runs)
    assert runs[0]["values"][0] == runs[0]["values"][1]
    assert any(p.suffix == ".nbi" for p in tmp_path.rglob("*"))


KERNEL_TYPES_IN_SUBPROCESS = """
import json, numba, numpy as np
from mianalysis import MarginalDistances, ksg_mi, mi_permutation_test
from mianalysis.estimators import _kernels, _neighbour_lists
rng = np.random.default_rng(0)
x = rng.standard_normal((1200, 2)); y = x + rng.standard_normal((1200, 2))
dx, dy = MarginalDistances.of(x, random_state=1), MarginalDistances.of(y, random_state=2)
ksg_mi(dx, dy)
mi_permutation_test(dx, dy, n_permutations=9, random_state=0)  # neighbour lists from 1,000 samples
mi_permutation_test(dx, dy, n_permutations=3, random_state=0)  # brute force over rows
kernels = [f for module in (_kernels, _neighbour_lists) for f in vars(module).values()
           if isinstance(f, numba.core.registry.CPUDispatcher)]
used = [(f.__name__, sig) for f in kernels for sig in f.signatures]
readonly = [name for name, sig in used if any(isinstance(t, numba.types.Array) and not t.mutable for t in sig)]
print(json.dumps({"signatures": len(used), "readonly": readonly}))
"""


def test_distance_matrices_reach_the_kernels_writable():
    # MarginalDistances.matrix is read-only to its users; the kernels get the writable array it was made
    # from, since Numba compiles every kernel again for a read-only argument type.
    result = json.loads(run_python(KERNEL_TYPES_IN_SUBPROCESS))
    assert result["signatures"] >= 3 and result["readonly"] == []


@pytest.mark.parametrize("name", ["gaussian_mi", "ksg_mi", "mi_permutation_test", "paired_distances", "mean_paired_distance"])
def test_public_api_is_documented(name):
    import mianalysis

    doc = getattr(mianalysis, name).__doc__
    assert "Parameters" in doc and "Returns" in doc



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
    # A committed link from benchmarks/.peers-venv to a folder outside the checkout broke
    # compare_peers.py on every fresh clone.
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    top = git(REPO, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != REPO:
        pytest.skip(f"{REPO} is not the root of a git checkout")
    assert links_outside(REPO) == []
