"""Scale-out on Dask: reach a scheduler and run independent tasks on its workers.

Dask only distributes work here; it never writes. The sampler sends chunks of runs to the
workers and writes every chunk itself as it comes back (one writer, the dump's writer
lock held throughout); the analysis sends checkpoints and assembles the table itself.
Every task runs single-threaded on its worker (:func:`mianalysis._threads.single_threaded`),
so a result is the same bytes as the same call in a single-threaded local process.

A scheduler is named by a string:

``local:N``
    A new cluster of N worker processes on this machine (``LocalCluster`` with one thread
    per worker), bound to the loopback interface, without a dashboard; it is closed when
    the work is done.
``tcp://HOST:PORT`` or ``tls://HOST:PORT``
    A running scheduler. TLS settings come from Dask's configuration
    (``distributed.comm.tls.*``) or the `security` argument (a
    ``distributed.security.Security``).
anything else
    A scheduler file, as written by ``dask scheduler --scheduler-file PATH``.

The module imports ``distributed`` only when a scheduler is used (the ``dask`` extra).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._threads import single_threaded
from ._validation import check_real

if TYPE_CHECKING:  # names used only in type hints (the dask extra)
    import distributed
    import distributed.security

__all__ = ["SchedulerError", "parse_scheduler", "connect", "run_unordered", "CONNECT_TIMEOUT"]

CONNECT_TIMEOUT = 10.0  # seconds to reach a scheduler (and for it to have a worker)
LOCAL_PREFIX = "local:"


class SchedulerError(OSError):
    """A Dask scheduler cannot be used: not reachable, no workers, a bad name, or Dask
    not installed. The message is one line."""


def parse_scheduler(scheduler: str | os.PathLike) -> tuple[str, int | str]:
    """What a scheduler string names: ``("local", n_workers)``, ``("address", address)``
    or ``("file", path)`` (see the module docstring); ValueError for a bad one.

    Examples
    --------
    >>> from mianalysis.scaleout import parse_scheduler
    >>> parse_scheduler("local:2")
    ('local', 2)
    >>> parse_scheduler("tcp://10.0.0.5:8786")
    ('address', 'tcp://10.0.0.5:8786')
    >>> parse_scheduler("scheduler.json")
    ('file', 'scheduler.json')
    """
    if not isinstance(scheduler, (str, os.PathLike)):
        raise TypeError(f"`scheduler` must be a string (local:N, tcp://HOST:PORT or a scheduler file); "
                        f"got {type(scheduler).__name__}")
    text = os.fspath(scheduler)
    if not text:
        raise ValueError("`scheduler` is empty; give local:N, tcp://HOST:PORT or a scheduler file")
    if text.startswith(LOCAL_PREFIX):
        count = text[len(LOCAL_PREFIX):]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"`scheduler` {text!r}: local:N needs a number of workers N >= 1, e.g. local:2")
        return "local", int(count)
    if "://" in text:
        return "address", text
    return "file", text


def _distributed():
    try:
        import distributed
    except ImportError:
        raise SchedulerError("a Dask scheduler needs the `distributed` package: pip install 'mianalysis[dask]'") \
            from None
    return distributed


def _first_line(exc):
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


@contextmanager
def connect(scheduler: str | os.PathLike | None = None, *, client: distributed.Client | None = None,
            timeout: float = CONNECT_TIMEOUT, security: distributed.security.Security | None = None
            ) -> Iterator[distributed.Client]:
    """A ``distributed.Client`` for `scheduler` (see the module docstring) while the block runs.

    Parameters
    ----------
    scheduler : str, optional
        ``local:N``, a scheduler address or a scheduler file.
    client : distributed.Client, optional
        Use this client instead (it is left open); `scheduler` must then be None.
    timeout : float, default=CONNECT_TIMEOUT
        Seconds to reach the scheduler and for it to have at least one worker.
    security : distributed.security.Security, optional
        TLS settings for a ``tls://`` scheduler (default: Dask's configuration).

    Raises
    ------
    SchedulerError
        One line naming the scheduler: it cannot be reached within `timeout`, it has no
        worker, its scheduler file does not exist, or ``distributed`` is not installed.
    """
    if client is not None:
        if scheduler is not None:
            raise ValueError("give `scheduler` or `client`, not both")
        yield client
        return
    kind, value = parse_scheduler(scheduler)
    timeout = check_real(timeout, "timeout", low=0, low_open=True)
    distributed = _distributed()
    if kind == "local":
        import logging

        cluster = distributed.LocalCluster(n_workers=value, threads_per_worker=1, processes=True,
                                           host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR)
        try:
            with distributed.Client(cluster, timeout=timeout) as local:
                yield local
        finally:
            cluster.close()
        return
    if kind == "file" and not Path(value).is_file():
        hint = f" (an address needs its scheme: tcp://{value})" if ":" in value and "/" not in value else ""
        raise SchedulerError(f"scheduler file {value} does not exist{hint}; give local:N, tcp://HOST:PORT or the "
                             "file written by `dask scheduler --scheduler-file`")
    where = value if kind == "address" else f"of scheduler file {value}"
    try:
        remote = (distributed.Client(value, timeout=timeout, security=security) if kind == "address" else
                  distributed.Client(scheduler_file=value, timeout=timeout, security=security))
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerError(f"cannot reach the Dask scheduler {where} within {timeout:g} s ({_first_line(exc)}); "
                             "is it running, and is the address (and its TLS settings) right?") from None
    try:
        try:
            remote.wait_for_workers(1, timeout=timeout)
        except (OSError, TimeoutError) as exc:
            raise SchedulerError(f"the Dask scheduler {where} has no worker after {timeout:g} s "
                                 f"({_first_line(exc)}); start workers with `dask worker ADDRESS --nthreads 1`") \
                from None
        yield remote
    finally:
        remote.close()


def _call_single_threaded(function, item):
    """`function(item)` on a worker, every thread pool limited to one thread."""
    with single_threaded():
        return function(item)


def _identity(value):
    return value


def run_unordered(client: distributed.Client, function: Callable[[Any], Any], items: Iterable[Any], *,
                  window: int | None = None, name: str = "mianalysis") -> Iterator[tuple[Any, Any]]:
    """Run ``function(item)`` for every item on the cluster; yield ``(item, result)`` in
    the order results complete.

    At most `window` tasks are submitted at a time (default twice the workers' threads,
    at least 2), so that neither the scheduler nor the caller holds more than that many results.
    `function` is pickled once, as a task of its own whose result every worker fetches
    once and keeps while the loop runs (and that Dask computes again if it is lost with
    a worker); each item travels with its task: keep items small (ranges, indices). A
    task that fails raises its exception here; a task whose worker dies is run again by
    Dask on another worker (``distributed.scheduler.allowed-failures`` times). Leaving the
    loop early cancels the tasks still pending.
    """
    distributed = _distributed()
    items = list(items)
    if window is None:
        window = max(2, 2 * sum(client.nthreads().values()))
    pending = iter(enumerate(items))
    prefix = f"{name}-{uuid.uuid4().hex[:12]}"
    shipped = client.submit(_identity, function, key=f"{prefix}-function", pure=False)
    futures = {}

    def submit(index, item):
        future = client.submit(_call_single_threaded, shipped, item, key=f"{prefix}-{index}", pure=False)
        futures[future] = item
        return future

    running = distributed.as_completed([submit(i, item) for i, item in itertools.islice(pending, window)])
    try:
        for future in running:
            item = futures.pop(future)
            result = future.result()
            future.release()
            following = next(pending, None)
            if following is not None:
                running.add(submit(*following))
            yield item, result
    finally:
        for future in futures:
            future.cancel()
        shipped.release()
