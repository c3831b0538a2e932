"""Provenance of an output: which code, on which machine and threads, from which command
line, and when.

:func:`collect` is the one entry point; dumps, analysis sidecars, ``federate``'s
settings.json and the experiments' and benchmarks' JSON records store what it returns
(:func:`utc_now` only stamps a start time to hand back to it at the end). Collecting
imports nothing heavy: package versions come from their installed metadata, and torch's
and numba's thread counts are read only if those modules are already imported.

Examples
--------
A script that writes its own record stamps the start, does its work, and collects at the
end:

>>> from mianalysis.provenance import collect, utc_now
>>> started = utc_now()
>>> record = collect(started, finished=True)
>>> record["started"] == started, record["ended"] is not None
(True, True)
>>> sorted(record)
['argv', 'cpu', 'ended', 'mianalysis', 'packages', 'platform', 'python', 'started', 'threads']
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from ._version import __version__

__all__ = ["collect", "utc_now"]

PACKAGES = ("numpy", "scipy", "torch", "numba")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "ATEN_CPU_CAPABILITY", "MKL_CBWR")
GIT_TIMEOUT = 2.0  # seconds per git call; a slow or hung git gives None, never an error


def utc_now() -> str:
    """The current time in UTC, ISO 8601 to the second.

    Returns
    -------
    str
        For example ``2025-01-31T12:00:00+00:00``; hand it to :func:`collect` as `started`
        when the session ends.
    """
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def collect(started: str | None = None, *, finished: bool = False) -> dict[str, Any]:
    """Provenance of the running session, as a JSON-serialisable dict.

    Parameters
    ----------
    started : str, optional
        When the session started (from :func:`utc_now` or an earlier record's
        ``started``); default now.
    finished : bool, default=False
        The session's output is complete: ``ended`` is now. Collecting at the end also
        records the thread counts of modules loaded meanwhile (torch, numba).

    Returns
    -------
    dict
        ``started`` and ``ended`` (UTC, ISO 8601; ``ended`` None unless `finished`),
        ``argv`` (the exact command line),
        ``mianalysis`` (version; ``git_commit`` and ``git_dirty`` of the source tree when
        it is a git checkout, else None), ``python``, ``packages`` (numpy, scipy, torch,
        numba versions; None where not installed), ``platform``, ``cpu`` (model name) and
        ``threads`` (``cpu_count``, the thread environment variables that are set, and
        torch's and numba's thread counts if those modules are loaded).
    """
    commit, dirty = _git_state()
    return {
        "started": started or utc_now(),
        "ended": utc_now() if finished else None,
        "argv": list(getattr(sys, "argv", [])),
        "mianalysis": {"version": __version__, "git_commit": commit, "git_dirty": dirty},
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "threads": _threads(),
    }


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _git_state():
    """(commit, dirty) of the git checkout holding this package, or (None, None).

    Cached: the code a process runs is the code it imported, whatever happens to the tree
    later. Only a checkout whose top level is the folder above the package counts, so an
    installed copy inside some other repository (a virtualenv in a project) gives None.
    ``dirty``: a tracked file is changed, or the package folder holds an untracked file
    (untracked files elsewhere, such as outputs, do not count)."""
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # no GIT_DIR redirection
    try:
        top, commit = _git(root, env, "rev-parse", "--show-toplevel", "HEAD").splitlines()
        if Path(top).resolve() != root:
            return None, None
        status = _git(root, env, "status", "--porcelain", "--untracked-files=all").splitlines()
        package = Path(__file__).parent.name + "/"
        dirty = any(not line.startswith("??") or line[3:].startswith(package) for line in status)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None, None
    return commit, dirty


def _git(root, env, *args):
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT,
                          env=env, check=True)
    return done.stdout.strip()


@functools.lru_cache(maxsize=1)
def _cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def _threads():
    threads: dict[str, int | str | None] = {"cpu_count": os.cpu_count()}
    threads.update({k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ})
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        threads["torch"] = torch.get_num_threads()
    numba = sys.modules.get("numba")
    if numba is not None and hasattr(numba, "config"):
        threads["numba_max"] = numba.config.NUMBA_NUM_THREADS
        parallel = sys.modules.get("numba.np.ufunc.parallel")
        if getattr(parallel, "_is_initialized", False):  # reading it earlier would launch the thread pool
            threads["numba"] = numba.get_num_threads()
    return threads
