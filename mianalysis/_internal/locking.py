"""One writer at a time: an exclusive lock held by whoever writes a dump or an analysis table.

The lock of a target ``DIR/NAME`` (a dump folder, an analysis table, a federate output
folder) is the hidden file ``DIR/.NAME.lock`` beside it, locked with ``fcntl.flock``.

It lives beside the target, not inside it, because a dump is built in the hidden sibling
``DIR/.NAME.creating`` and renamed into place: a lock on the target must exist before the
target does, survive that rename, and cover the staging folder; and readers of a dump never
see it among the dump's files. The operating system releases a flock when its holder
exits or is killed, so a lock file left behind by a killed process blocks nobody; while
held, the file records the holder's pid, host and command line for the error a second
writer gets. A holder removes the file when it is done.

Within one process the lock is re-entrant (a sampler holds it while the dump it writes
takes it again for each chunk); it does not separate threads of one process. A writing
session that keeps records of its own between chunks (a DumpWriter, an export) takes it
with ``session=True``: a second session of the same target in the same process is refused
with the LockedError another process would get, since the two would write over each other.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import shlex
import socket
import sys
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: not a target, but say so clearly
    fcntl = None  # type: ignore[assignment]  # the usual optional-module idiom

HOLDER_WAIT_S = 1.0  # how long a refused writer waits for the holder to record who it is


class LockedError(OSError):
    """Another process holds the writer lock of a dump or table: it is being written."""


_held: dict[Path, list] = {}  # lock file path -> [file descriptor, depth, whether a session holds it]
_guard = threading.Lock()


def lock_path(target):
    """The lock file of `target`: ``DIR/.NAME.lock`` for ``DIR/NAME`` (symlinks resolved).

    Parameters
    ----------
    target : str or Path
        A dump folder or an output file; it need not exist yet.

    Returns
    -------
    pathlib.Path
    """
    resolved = Path(target).resolve()
    if not resolved.name:
        raise ValueError(f"cannot lock {target} for writing: it is a file system root; choose a folder inside it")
    return resolved.with_name(f".{resolved.name}.lock")


class WriterLock:
    """Exclusive writer lock of a dump folder or an output file, as a context manager.

    Parameters
    ----------
    target : str or Path
        What is about to be written; the lock file is :func:`lock_path` of it.
    session : bool, default=False
        Taken by a writing session (a DumpWriter, an export): at most one session per
        target in this process holds the lock, nested plain acquisitions (the chunks it
        writes) are fine.

    Raises
    ------
    LockedError
        On entry, if another process holds the lock, or with `session` if another
        session of this process holds it. The message names that process (pid and
        command line): "DUMP is being written by process 1234 (mianalysis sample ...);
        wait for it to finish or stop it".
    OSError
        On entry, if this platform has no ``fcntl`` or the lock file cannot be created
        or locked.

    Examples
    --------
    >>> with WriterLock("runs/rnn"):          # doctest: +SKIP
    ...     dump = ParameterDump.open_or_create("runs/rnn", ...)
    """

    def __init__(self, target, *, session=False):
        self.target = target
        self.path = lock_path(target)
        self.session = bool(session)

    def acquire(self):
        """Take the lock (again, if this process already holds it); return self."""
        with _guard:
            held = _held.get(self.path)
            if held is not None:
                if self.session and held[2]:
                    raise LockedError(f"{self.target} is already being written by a writer of this process "
                                      f"(process {os.getpid()}); close that writer first (two writers of one "
                                      "target would write over each other)")
                held[1] += 1
                held[2] = held[2] or self.session
            else:
                _held[self.path] = [_take(self.path, self.target), 1, self.session]
        return self

    def release(self):
        """Give back one acquisition; the last one unlocks and removes the lock file."""
        with _guard:
            held = _held[self.path]
            held[1] -= 1
            if self.session:
                held[2] = False
            if held[1] == 0:
                _give_up(self.path, held[0])
                del _held[self.path]  # after giving up: an interruption in between leaves it to _give_up_all

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc_info):
        self.release()


def _take(path, target):
    """Open, flock and return a descriptor of the lock file `path`, recording this process in it."""
    if fcntl is None:
        raise OSError(f"cannot lock {target} for writing: writer locks need the fcntl module (Linux, macOS), "
                      "which this Python does not have")
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        try:  # never through a link: the holder's record would be written into the link's target
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OSError(f"the lock file {path} is a symbolic link; locks are never taken through links: "
                              f"remove it and rerun (nothing was written to {target})") from None
            raise OSError(f"cannot create the lock file {path} to write {target} ({exc})") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockedError(f"{target} is being written by {holder}; wait for it to finish or stop it") from None
        except OSError as exc:
            os.close(fd)
            raise OSError(f"cannot lock {path} to write {target} ({exc}); "
                          "the file system may not support file locks") from exc
        if _is_current(fd, path):
            _record_holder(fd)
            return fd
        os.close(fd)  # its holder removed it between our open and flock: lock the current file
    raise OSError(f"cannot lock {path} to write {target}: the lock file keeps being replaced")


def _is_current(fd, path):
    """Whether `path` still names the file open as `fd` (holders remove their lock file)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def _record_holder(fd):
    info = {"pid": os.getpid(), "host": socket.gethostname(), "command": command_line()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)


def _read_holder(fd):
    """'process PID (COMMAND)' from a held lock file, waiting briefly for a holder that has
    just taken the lock to record itself."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        try:
            info = json.loads(os.pread(fd, 1 << 16, 0).decode())
            pid = int(info["pid"])
            break
        except (ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return "another process (it has not recorded its pid)"
            time.sleep(0.02)
    where = f" on host {info['host']}" if info.get("host") not in (None, socket.gethostname()) else ""
    command = f" ({info['command']})" if info.get("command") else ""
    return f"process {pid}{where}{command}"


@atexit.register
def _give_up_all():
    """At exit, give up the locks this process still holds. Normally there are none; but a
    Ctrl-C (KeyboardInterrupt) that lands inside `acquire` or `release` of a nested
    acquisition leaves the count one too high, and the lock file would stay behind."""
    with _guard:
        for path, (fd, *_) in list(_held.items()):
            try:
                _give_up(path, fd)
            except OSError:
                pass  # already closed by an interrupted release
        _held.clear()


def _give_up(path, fd):
    try:
        if _is_current(fd, path):
            os.unlink(path)
    except OSError:
        pass  # a lock file that cannot be removed blocks nobody once it is unlocked
    finally:
        os.close(fd)  # releases the flock


def command_line(argv=None, main_module=None):
    """This process's command line as a user would type it ("mianalysis sample --runs 8 ..."),
    at most 200 characters.

    Parameters
    ----------
    argv : list of str, optional
        Default ``sys.argv``.
    main_module : str, optional
        Name the ``__main__`` module was run as (``python -m NAME``); default this process's.
    """
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    if main_module is None:
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        main_module = spec.name if spec is not None else None
    prog = argv[0]
    if main_module == "mianalysis.cli" or os.path.basename(prog) == "mianalysis":
        prog = "mianalysis"
    elif prog == "-c":
        prog = "python -c"
    else:
        prog = os.path.basename(prog)
    text = " ".join([prog] + [shlex.quote(a) for a in argv[1:]])
    return text if len(text) <= 200 else text[:197] + "..."
