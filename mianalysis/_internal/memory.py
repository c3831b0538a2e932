"""How much memory this process can still allocate: physical memory, cgroup limits (v2 and
v1) and resource limits. Shared by the estimators (whether a distance cache fits) and the
sampler (whether a chunk fits)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["physical_memory_bytes", "cgroup_room_bytes", "rlimit_room_bytes", "available_memory_bytes"]


def physical_memory_bytes():
    """Total physical memory of this machine (0 where unknown)."""

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


CGROUP_ROOT = "/sys/fs/cgroup"
PROC_SELF = "/proc/self"


def _read_int(path):
    """The integer in the file `path`, or None (missing, unreadable, "max" for no limit)."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _read_fields(path):
    """``key value`` lines of the file `path` (memory.stat, /proc/self/status) as a dict of ints."""
    fields: dict[str, int] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return fields
    for line in lines:
        parts = line.replace(":", " ").split()
        if len(parts) >= 2:
            try:
                fields[parts[0]] = int(parts[1]) * (1024 if parts[2:3] == ["kB"] else 1)
            except ValueError:
                pass
    return fields


def _cgroup_dirs(mount, relative):
    """The folder of this process's cgroup under `mount` and its ancestors up to `mount`
    (`mount` alone where the cgroup's own folder is not visible, as in a container)."""
    mount = Path(mount)
    here = mount / relative.lstrip("/")
    if not here.is_dir():
        here = mount
    dirs = [here]
    while here != mount and mount in here.parents:
        here = here.parent
        dirs.append(here)
    return dirs


def cgroup_room_bytes(cgroup_root=CGROUP_ROOT, proc_self=PROC_SELF):
    """Memory left under the memory limits of this process's cgroup and of its ancestors
    (None where there is no limit): for cgroup v2 ``memory.max - memory.current``, for v1
    ``memory.limit_in_bytes - memory.usage_in_bytes``, the usage without the inactive file
    cache (``memory.stat``), which the kernel reclaims before it fails an allocation."""
    try:
        lines = (Path(proc_self) / "cgroup").read_text().splitlines()
    except OSError:
        lines = []
    v2, v1 = [], []  # this process's cgroup in the unified (v2) and in the v1 memory hierarchy
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            v2.append(parts[2])
        elif len(parts) == 3 and "memory" in parts[1].split(","):
            v1.append(parts[2])
    root = Path(cgroup_root)
    candidates = []  # (limit file, usage file, inactive-file key in memory.stat)
    for relative in v2 or ["/"]:
        for mount in (root, root / "unified"):
            candidates += [(d / "memory.max", d / "memory.current", d / "memory.stat", "inactive_file")
                           for d in _cgroup_dirs(mount, relative)]
    for relative in v1 or ["/"]:
        candidates += [(d / "memory.limit_in_bytes", d / "memory.usage_in_bytes", d / "memory.stat",
                        "total_inactive_file") for d in _cgroup_dirs(root / "memory", relative)]
    room = None
    for limit_file, usage_file, stat_file, inactive_key in candidates:
        limit = _read_int(limit_file)
        if limit is None:
            continue
        usage = _read_int(usage_file) or 0
        usage -= min(usage, _read_fields(stat_file).get(inactive_key, 0))
        left = max(0, limit - usage)
        room = left if room is None else min(room, left)
    return room


def rlimit_room_bytes(proc_self=PROC_SELF):
    """Memory left under this process's address-space and data limits (``ulimit -v``,
    ``ulimit -d``): each soft limit minus the current virtual (data) size; None without limits."""
    import resource

    sizes = _read_fields(Path(proc_self) / "status")
    room = None
    for name, key in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        soft = resource.getrlimit(getattr(resource, name))[0] if hasattr(resource, name) else resource.RLIM_INFINITY
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        left = max(0, soft - sizes.get(key, 0))
        room = left if room is None else min(room, left)
    return room


def available_memory_bytes(cgroup_root=CGROUP_ROOT, proc_self=PROC_SELF):
    """Memory this process can still allocate: the least of the physical memory, the room
    under its cgroup's memory limits (v2 and v1, see :func:`cgroup_room_bytes`) and the
    room under RLIMIT_AS and RLIMIT_DATA (see :func:`rlimit_room_bytes`). 0 where none is known.

    The load of other processes (MemAvailable) is deliberately left out: what is in memory
    may be swapped or reclaimed, and the decisions taken from this value (whether to keep
    a distance cache) should not change from one run to the next on one machine."""
    known = [m for m in (cgroup_room_bytes(cgroup_root, proc_self), rlimit_room_bytes(proc_self)) if m is not None]
    physical = physical_memory_bytes()
    if physical:
        known.append(physical)
    return min(known) if known else 0
