"""The automatic KSG distance cache sizes itself from the memory this process can still
allocate -- physical memory, cgroup v2 and v1 limits, ``ulimit -v`` (RLIMIT_AS) -- and
falls back to the O(n) computation when the cache does not fit: under a real limit,
ksg_mi and analyze succeed with the values of ``distance_cache=False``."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mianalysis import ParameterDump, ksg_mi
from mianalysis.analysis import AnalysisTable
from mianalysis._internal import memory as _memory
from mianalysis.estimators._neighbours import symmetric_cache_bytes, use_distance_cache

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
MiB = 2**20
GiB = 2**30
UNLIMITED_V1 = 9223372036854771712  # what cgroup v1 reports for "no limit"


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def fake(tmp_path):
    """(cgroup root, /proc/self) folders to fill with fake files."""
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    root.mkdir()
    proc.mkdir()
    _write(proc / "status", "Name:\tpython\nVmPeak:\t  500000 kB\nVmSize:\t  409600 kB\nVmData:\t  102400 kB\n")
    return root, proc


# ------------------------------------------------------------------ cgroups
def test_cgroup_v2_limit_minus_usage_without_inactive_file_cache(fake):
    root, proc = fake
    _write(proc / "cgroup", "0::/user.slice/job\n")
    job = root / "user.slice" / "job"
    _write(job / "memory.max", f"{GiB}\n")
    _write(job / "memory.current", f"{300 * MiB}\n")
    _write(job / "memory.stat", f"anon {200 * MiB}\nfile {100 * MiB}\ninactive_file {60 * MiB}\n")
    assert _memory.cgroup_room_bytes(root, proc) == GiB - 240 * MiB


def test_cgroup_v2_the_tightest_ancestor_counts(fake):
    root, proc = fake
    _write(proc / "cgroup", "0::/user.slice/job\n")
    _write(root / "user.slice" / "job" / "memory.max", f"{4 * GiB}\n")
    _write(root / "user.slice" / "job" / "memory.current", f"{GiB}\n")
    _write(root / "user.slice" / "memory.max", f"{2 * GiB}\n")  # the whole slice: 2 GiB, 1.5 in use
    _write(root / "user.slice" / "memory.current", f"{3 * GiB // 2}\n")
    assert _memory.cgroup_room_bytes(root, proc) == GiB // 2


def test_cgroup_v2_without_limit(fake):
    root, proc = fake
    _write(proc / "cgroup", "0::/user.slice/job\n")
    _write(root / "user.slice" / "job" / "memory.max", "max\n")
    _write(root / "user.slice" / "job" / "memory.current", f"{GiB}\n")
    assert _memory.cgroup_room_bytes(root, proc) is None


def test_cgroup_v2_in_a_container_reads_the_mount_root(fake):
    root, proc = fake
    _write(proc / "cgroup", "0::/\n")  # a cgroup namespace: the container's cgroup is the mount's root
    _write(root / "memory.max", f"{1100 * 10**6}\n")
    _write(root / "memory.current", f"{900 * 10**6}\n")
    assert _memory.cgroup_room_bytes(root, proc) == 200 * 10**6


def test_cgroup_v2_path_not_visible_falls_back_to_the_mount_root(fake):
    root, proc = fake
    _write(proc / "cgroup", "0::/../elsewhere/job\n")
    _write(root / "memory.max", f"{GiB}\n")
    _write(root / "memory.current", "0\n")
    assert _memory.cgroup_room_bytes(root, proc) == GiB


def test_cgroup_v1_limit_in_bytes(fake):
    root, proc = fake
    _write(proc / "cgroup", "9:pids:/\n4:memory:/process_api/abc\n0::/\n")
    job = root / "memory" / "process_api" / "abc"
    _write(job / "memory.limit_in_bytes", f"{2 * GiB}\n")
    _write(job / "memory.usage_in_bytes", f"{3 * GiB // 2}\n")
    _write(job / "memory.stat", f"cache {GiB}\ntotal_inactive_file {GiB // 2}\n")
    _write(root / "memory" / "process_api" / "memory.limit_in_bytes", f"{UNLIMITED_V1}\n")
    _write(root / "memory" / "memory.limit_in_bytes", f"{UNLIMITED_V1}\n")
    _write(root / "memory" / "memory.usage_in_bytes", f"{10 * GiB}\n")
    assert _memory.cgroup_room_bytes(root, proc) == GiB


def test_cgroup_v1_combined_controllers_and_no_limit(fake):
    root, proc = fake
    _write(proc / "cgroup", "3:cpu,memory:/job\n")
    _write(root / "memory" / "job" / "memory.limit_in_bytes", f"{UNLIMITED_V1}\n")
    _write(root / "memory" / "job" / "memory.usage_in_bytes", f"{GiB}\n")
    assert _memory.cgroup_room_bytes(root, proc) == UNLIMITED_V1 - GiB  # no limit: physical memory decides


def test_no_cgroup_files(fake):
    root, proc = fake
    assert _memory.cgroup_room_bytes(root, proc) is None
    assert _memory.cgroup_room_bytes(root / "missing", proc / "missing") is None


def test_usage_above_the_limit_leaves_no_room(fake):
    root, proc = fake
    _write(proc / "cgroup", "0::/\n")
    _write(root / "memory.max", f"{GiB}\n")
    _write(root / "memory.current", f"{GiB + MiB}\n")
    assert _memory.cgroup_room_bytes(root, proc) == 0


# ------------------------------------------------------------------ rlimits and the minimum
def _fake_rlimits(monkeypatch, limits):
    real = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits.get(which, real(which)))


def test_rlimit_as_minus_the_virtual_size(fake, monkeypatch):
    _, proc = fake
    inf = resource.RLIM_INFINITY
    _fake_rlimits(monkeypatch, {resource.RLIMIT_AS: (GiB, inf), resource.RLIMIT_DATA: (inf, inf)})
    assert _memory.rlimit_room_bytes(proc) == GiB - 400 * MiB
    _fake_rlimits(monkeypatch, {resource.RLIMIT_AS: (GiB, inf), resource.RLIMIT_DATA: (300 * MiB, inf)})
    assert _memory.rlimit_room_bytes(proc) == 200 * MiB  # ulimit -d: the data size is 100 MiB
    _fake_rlimits(monkeypatch, {resource.RLIMIT_AS: (inf, inf), resource.RLIMIT_DATA: (inf, inf)})
    assert _memory.rlimit_room_bytes(proc) is None


def test_available_memory_is_the_least_of_all(fake, monkeypatch):
    root, proc = fake
    inf = resource.RLIM_INFINITY
    monkeypatch.setattr(_memory, "physical_memory_bytes", lambda: 16 * GiB)
    _fake_rlimits(monkeypatch, {resource.RLIMIT_AS: (inf, inf), resource.RLIMIT_DATA: (inf, inf)})
    assert _memory.available_memory_bytes(root, proc) == 16 * GiB
    _write(proc / "cgroup", "0::/\n")
    _write(root / "memory.max", f"{3 * GiB}\n")
    _write(root / "memory.current", f"{GiB}\n")
    assert _memory.available_memory_bytes(root, proc) == 2 * GiB
    _fake_rlimits(monkeypatch, {resource.RLIMIT_AS: (GiB, inf), resource.RLIMIT_DATA: (inf, inf)})
    assert _memory.available_memory_bytes(root, proc) == GiB - 400 * MiB
    monkeypatch.setattr(_memory, "physical_memory_bytes", lambda: 100 * MiB)
    assert _memory.available_memory_bytes(root, proc) == 100 * MiB


def test_use_distance_cache_follows_the_available_memory(monkeypatch):
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda *a, **k: 400 * MiB)
    assert use_distance_cache("auto", 200 * MiB) and not use_distance_cache("auto", 200 * MiB + 1)
    assert use_distance_cache(True, 10 * GiB) and not use_distance_cache(False, 1)
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda *a, **k: 0)
    assert not use_distance_cache("auto", 1)


def test_estimates_without_a_cache_do_not_read_the_memory(monkeypatch):
    """Checking the `distance_cache` argument reads no memory files (which cost ~0.5 ms per
    call, a tenth of a small estimate): only a cache's size is measured against the room."""
    from mianalysis import mi_permutation_test

    def refuse(*args, **kwargs):
        raise AssertionError("available memory read for an estimate that keeps no distances")

    monkeypatch.setattr(_memory, "available_memory_bytes", refuse)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 3))
    y = x + rng.standard_normal((200, 3))
    assert ksg_mi(x, y, random_state=0) > 0.5
    assert mi_permutation_test(x, y, estimator="gaussian", n_permutations=9, random_state=0).p_value == 0.1
    with pytest.raises(ValueError, match="distance_cache"):
        ksg_mi(x, y, distance_cache="always")
    with pytest.raises(AssertionError, match="memory read"):  # a cache's size is measured
        ksg_mi(rng.standard_normal((200, 60)), rng.standard_normal((200, 60)), random_state=0)


def test_this_process_sees_its_own_rlimit():
    code = ("import resource; from mianalysis._internal.memory import available_memory_bytes as a; "
            "print(a())")
    limited = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2 * GiB, 2 * GiB)))
    assert 0 < int(limited.stdout) < 2 * GiB


# ------------------------------------------------------------------ under a real limit
WARM_UP = """
import sys, numpy as np
from mianalysis import ksg_mi
rng = np.random.default_rng(0)
a, b = rng.standard_normal((300, 50)), rng.standard_normal((300, 50))
ksg_mi(a, b, random_state=0)                                  # compiles both kernels
ksg_mi(a, b, random_state=0, distance_cache=False)
def peak():
    return [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmPeak")][0]
"""


def _limited(limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    return set_limit


def _peak(command):
    """VmPeak of `command` (which prints it last), run twice: the first run fills Numba's
    on-disk cache, so that neither the second nor the limited run compiles (compiling
    takes far more address space than running)."""
    for _ in range(2):
        out = subprocess.run(command, env=ENV, capture_output=True, text=True, check=True)
    return int(out.stdout.splitlines()[-1])


HEADROOM = 120 * MiB  # above the warmed-up process: enough for O(n) work, not for the caches below


def test_ksg_mi_under_ulimit_v_falls_back_to_the_o_n_path(tmp_path):
    n = 8000
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, 50))
    y = 0.5 * x + rng.standard_normal((n, 50))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    assert symmetric_cache_bytes(n, "float64") > 1.4 * HEADROOM  # the cache cannot fit
    expected = ksg_mi(x, y, random_state=5, distance_cache=False)
    code = WARM_UP + f"""
x, y = np.load({str(tmp_path / 'x.npy')!r}), np.load({str(tmp_path / 'y.npy')!r})
print(repr(ksg_mi(x, y, random_state=5)))
"""
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True,
                         preexec_fn=_limited(_peak([sys.executable, "-c", WARM_UP + "print(peak())"]) + HEADROOM))
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout) == expected


def test_cli_analyze_under_ulimit_v_falls_back_to_the_o_n_path(tmp_path):
    n = 3000
    rng = np.random.default_rng(4)
    shared = rng.standard_normal((2, n, 20))
    ParameterDump.from_arrays(tmp_path / "big", {c: shared + rng.standard_normal((2, n, 20)) for c in "abc"})
    ParameterDump.from_arrays(tmp_path / "small", {c: shared[:, :300] + rng.standard_normal((2, 300, 20))
                                                   for c in "abc"})
    assert 3 * n * n * 8 > 1.4 * HEADROOM  # the clients' distance matrices cannot fit
    code = ("import sys\nfrom mianalysis.cli import main\nrc = main(sys.argv[1:])\n"
            "print([int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmPeak')][0])\n"
            "sys.exit(rc)\n")
    args = ["analyze", "--estimators", "ksg", "--metrics", "euclidean", "--permutations", "2", "--no-progress"]
    peak = _peak([sys.executable, "-c", code, *args, str(tmp_path / "small"), "--out", str(tmp_path / "small.csv")])
    free = subprocess.run([sys.executable, "-c", code, *args, str(tmp_path / "big"), "--out",
                           str(tmp_path / "free.csv"), "--no-distance-cache"], env=ENV, capture_output=True,
                          text=True, check=True)
    assert free.returncode == 0
    out = subprocess.run([sys.executable, "-c", code, *args, str(tmp_path / "big"), "--out",
                          str(tmp_path / "limited.csv")], env=ENV, capture_output=True, text=True,
                         preexec_fn=_limited(peak + HEADROOM))
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "limited.csv").read_bytes() == (tmp_path / "free.csv").read_bytes()
    assert len(AnalysisTable.read(tmp_path / "limited.csv")) == 2 * 3 * 2 + 3 * 2  # estimates, then 1 step of changes
