"""Scale-out on Dask: reach a scheduler and run independent tasks on its workers.

Dask only distributes work here; it never writes. The sampler sends chunks of runs to the
workers and writes every chunk itself as it comes back (one writer, the dump's writer
lock held throughout); the analysis sends checkpoints and assembles the table itself.
Every task runs single-threaded on its worker (:func:`mianalysis._internal.threads.single_threaded`),
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
import json
import logging
import os
import pickle
import sys
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.threads import single_threaded
from .._internal.validation import check_real

if TYPE_CHECKING:  # names used only in type hints (the dask extra)
    import distributed
    import distributed.security

__all__ = ["SchedulerError", "parse_scheduler", "connect", "run_unordered", "CONNECT_TIMEOUT"]

CONNECT_TIMEOUT = 10.0  # seconds to reach a scheduler (and for it to have a worker, or to have one again)
LOCAL_PREFIX = "local:"
POLL = 0.5  # seconds between looks at the workers while no task completes


class SchedulerError(OSError):
    """A Dask scheduler cannot be used: not reachable, no workers, a bad name, or Dask
    not installed. The message is one line."""


def parse_scheduler(scheduler: object) -> tuple[str, int | str]:
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
        cluster = _local_cluster(distributed, value)
        try:
            with distributed.Client(cluster, timeout=timeout) as local:
                from .dask_worker import ImportPaths

                # What this process imports from (its working folder too: a factory there), on every worker.
                local.register_plugin(ImportPaths(_import_paths()), name="mianalysis-import-paths")
                yield local
        finally:
            _close_quietly(cluster)
        return
    address = value if kind == "address" else _scheduler_file_address(value)
    where = value if kind == "address" else f"{address} of scheduler file {value}"
    try:
        remote = distributed.Client(address, timeout=timeout, security=security)
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
        with _quiet_distributed():  # a client that lost its scheduler logs its reconnection's traceback
            remote.close(timeout=timeout)


@contextmanager
def _quiet_distributed():
    """Hold back the log lines of ``distributed`` (every logger under it) and asyncio's
    while the block runs: a client that loses a worker or its scheduler, or a cluster that
    an interruption stopped, logs warnings and tracebacks (of its own pending tasks) that
    say nothing the one line of the error does not."""
    names = ["distributed", "asyncio"] + [n for n in list(logging.root.manager.loggerDict)
                                          if n.startswith("distributed.")]
    loggers = [logging.getLogger(n) for n in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _local_cluster(distributed, n_workers):
    """A LocalCluster of `n_workers` single-threaded processes on loopback. One whose start
    fails or is interrupted (Ctrl-C) is closed here, quietly, and forgotten, so that Dask
    does not try again at exit and print the tracebacks of its half-started workers."""
    import multiprocessing

    from distributed.deploy.spec import SpecCluster

    before = set(SpecCluster._instances)
    children = set(multiprocessing.active_children())
    try:
        return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                        dashboard_address=None, silence_logs=logging.ERROR)
    except BaseException:
        # First the worker processes this start spawned: one still unpickling its start-up
        # state when the cluster's semaphores are removed fails loudly, and its traceback
        # (on the stderr it shares) would follow the command's one line. SIGTERM ends it
        # silently; processes that were there before are not touched. Distributed starts a
        # worker's process from a thread of its own, which may still do so after the first
        # pass and even after the cluster is closed: so again after closing, until no new
        # process has appeared for a moment.
        # Its loop's reports of start-up tasks left failing are dropped before anything is
        # terminated: a worker process ended while its Nanny starts fails that task at once.
        started = set(SpecCluster._instances) - before
        for cluster in started:
            _drop_unretrieved_task_errors(cluster)
        _terminate_spawned(children)
        for cluster in started:
            _close_quietly(cluster)
        _terminate_spawned(children, settle=SPAWN_SETTLE_S)
        raise


# After an interrupted cluster start: how long no new worker process may appear before the
# start counts as over, and the most the wait may take.
SPAWN_SETTLE_S = 0.5
SPAWN_SETTLE_LIMIT_S = 10.0


def _terminate_spawned(before, *, settle=0.0, limit=SPAWN_SETTLE_LIMIT_S):
    """Terminate and reap the multiprocessing children of this process that are not in
    `before`, passing again until none has appeared for `settle` seconds (or `limit`
    seconds have gone by)."""
    import multiprocessing

    start = quiet_since = time.monotonic()
    while True:
        spawned = set(multiprocessing.active_children()) - set(before)
        now = time.monotonic()
        if spawned:
            _terminate(spawned)
            quiet_since = time.monotonic()
        elif now - quiet_since >= settle:
            return
        if now - start >= limit:
            return
        time.sleep(0.02)


def _terminate(processes):
    """Terminate `processes` (multiprocessing children) and reap them, 5 s each at most."""
    for process in processes:
        try:
            process.terminate()
        except (OSError, ValueError):  # already gone, or closed
            pass
    for process in processes:
        try:
            process.join(timeout=5)
        except (OSError, ValueError, AssertionError):
            pass


def _drop_unretrieved_task_errors(cluster):
    """Keep the event loop of a cluster whose start was interrupted from reporting the
    errors of its own start-up tasks that nobody awaits any more (a worker's Nanny failing
    to start: "Task exception was never retrieved"). asyncio reports them when the task is
    collected, which may be after the command's one line and after distributed's loggers
    are restored; the cluster is abandoned, so what its loop reports says nothing more."""
    loop = getattr(getattr(cluster, "loop", None), "asyncio_loop", None)
    if loop is not None:
        _drop_loop_reports(loop, lambda context: "exception" in context
                           and "never retrieved" in str(context.get("message", "")))


def _close_quietly(cluster):
    """Close a LocalCluster (its workers, its scheduler, its event loop) with distributed's
    log lines held back; one that cannot close cleanly (half started) is closed as far as
    it goes, and its error is not shown: the command's own line says what happened."""
    from distributed.deploy.spec import SpecCluster

    with _quiet_distributed():
        try:
            cluster.close(timeout=CONNECT_TIMEOUT)
        except Exception:  # e.g. workers interrupted while they started (Dask asserts on their status)
            pass
        finally:
            SpecCluster._instances.discard(cluster)  # nothing left for Dask's atexit hook
            runner = getattr(cluster, "_loop_runner", None)
            if runner is not None:
                runner.stop()


def _scheduler_file_address(path):
    """The scheduler address that the scheduler file `path` holds; SchedulerError naming the
    file if it does not exist, cannot be read, is empty, is not JSON or names no address."""
    file = Path(path)
    usage = "give local:N, tcp://HOST:PORT or the file written by `dask scheduler --scheduler-file`"
    if not file.is_file():
        hint = f" (an address needs its scheme: tcp://{path})" if ":" in str(path) and "/" not in str(path) else ""
        raise SchedulerError(f"scheduler file {path} does not exist{hint}; {usage}")
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SchedulerError(f"cannot read the scheduler file {path} ({_first_line(exc)}); {usage}") from None
    if not text.strip():
        raise SchedulerError(f"scheduler file {path} is empty; {usage}")
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise SchedulerError(f"scheduler file {path} is not JSON ({_first_line(exc)}); {usage}") from None
    address = record.get("address") if isinstance(record, dict) else None
    if not isinstance(address, str) or "://" not in address:
        raise SchedulerError(f"scheduler file {path} names no scheduler address (no \"address\": \"tcp://HOST:PORT\" "
                             f"in it); {usage}")
    return address


def _import_paths():
    """This process's module search path, absolute, and its working folder last (where
    :func:`mianalysis.tasks.module.load_factory` finds a factory that is not installed)."""
    paths = [os.path.abspath(p or os.curdir) for p in sys.path] + [os.getcwd()]
    return list(dict.fromkeys(paths))


def _call_single_threaded(function, item):
    """`function(item)` on a worker, every thread pool limited to one thread."""
    with single_threaded():
        return function(item)


def _identity(value):
    return value


def run_unordered(client: distributed.Client, function: Callable[[Any], Any], items: Iterable[Any], *,
                  window: int | None = None, name: str = "mianalysis", timeout: float = CONNECT_TIMEOUT
                  ) -> Generator[tuple[Any, Any], None, None]:
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

    Raises
    ------
    SchedulerError
        One line: a worker cannot import what `function` needs (the module named, checked
        on every worker before the first task, and for any ImportError of a task); the
        scheduler has had no worker for `timeout` seconds; the connection to the scheduler
        is lost; or a task's workers keep dying (Dask's ``KilledWorker``). Results
        already yielded stay valid.
    """
    distributed = _distributed()
    timeout = check_real(timeout, "timeout", low=0, low_open=True)
    items = list(items)
    if client.scheduler is None:  # a Client made with asynchronous=True and never awaited
        raise SchedulerError("the Dask client is not connected to a scheduler; connect it first (see connect)")
    where = f"the Dask scheduler {client.scheduler.address}"
    if window is None:
        window = max(2, 2 * sum(client.nthreads().values()))
    _check_importable(client, function, where)
    _ignore_abandoned_fetches(client)
    pending = iter(enumerate(items))
    prefix = f"{name}-{uuid.uuid4().hex[:12]}"
    shipped = client.submit(_identity, function, key=f"{prefix}-function", pure=False)
    futures = {}

    def submit(index, item):
        future = client.submit(_call_single_threaded, shipped, item, key=f"{prefix}-{index}", pure=False)
        futures[future] = item

    for i, item in itertools.islice(pending, window):
        submit(i, item)
    alone_since = None  # when the scheduler was last seen without a worker (None: it has one)
    try:
        with _quiet_distributed():  # what goes wrong here is raised as one line
            while futures:
                done = _wait_first(distributed, client, list(futures), where)
                if not done:
                    alone_since = _watch_workers(client, alone_since, timeout, where)
                    continue
                alone_since = None
                for future in done:
                    item = futures.pop(future)
                    result = _result(distributed, client, future, where, timeout)
                    future.release()
                    following = next(pending, None)
                    if following is not None:
                        submit(*following)
                    yield item, result
    finally:
        for future in futures:
            future.cancel()
        shipped.release()


def _ignore_abandoned_fetches(client):
    """Keep the client's event loop from reporting, when it is collected (at exit), the
    fetches that :func:`_result` gave up after POLL seconds and that ended with the client
    (``distributed.client.AllExit``): asyncio would print each as a traceback."""
    from distributed.client import AllExit

    loop = client.loop.asyncio_loop
    if loop.get_exception_handler() is None:
        _drop_loop_reports(loop, lambda context: isinstance(context.get("exception"), AllExit))


def _drop_loop_reports(loop, drop):
    """Have `loop` pass every report (error of a task or callback) to asyncio's default
    handler except those whose context `drop` matches."""

    def handler(loop, context):
        if not drop(context):
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def _lost(where, exc):
    return SchedulerError(f"lost the connection to {where} ({_first_line(exc)}): the scheduler stopped or cannot "
                          "be reached")


def _wait_first(distributed, client, futures, where):
    """The futures among `futures` that are done within POLL seconds (maybe none)."""
    from distributed.utils import CancelledError

    if client.status not in ("running", "newly-created"):
        raise SchedulerError(f"lost the connection to {where} (the client is {client.status}): the scheduler "
                             "stopped or cannot be reached")
    try:
        return distributed.wait(futures, timeout=POLL, return_when="FIRST_COMPLETED").done
    except TimeoutError:
        return set()
    except (OSError, CancelledError) as exc:
        raise _lost(where, exc) from None


def _watch_workers(client, alone_since, timeout, where):
    """When the scheduler was first seen without a worker (None: it has one); SchedulerError
    once it has had none for `timeout` seconds."""
    try:
        workers = client.scheduler_info(n_workers=-1)["workers"]
    except OSError as exc:
        raise _lost(where, exc) from None
    if workers:
        return None
    now = time.monotonic()
    if alone_since is None:
        return now
    if now - alone_since >= timeout:
        raise SchedulerError(f"{where} has had no worker for {timeout:g} s (the last one stopped or was killed); "
                             "start workers with `dask worker ADDRESS --nthreads 1`")
    return alone_since


def _result(distributed, client, future, where, timeout):
    """A done future's result, with what the cluster (not the task) did wrong as one line.
    Fetching it waits, watching the workers, while its worker is lost and it is computed
    again (SchedulerError after `timeout` seconds without a worker)."""
    from distributed.utils import CancelledError

    alone_since = None
    try:
        while True:
            try:
                return future.result(timeout=POLL)
            except TimeoutError:
                if future.status == "error":  # the task's own TimeoutError
                    raise
                alone_since = _watch_workers(client, alone_since, timeout, where)
    except SchedulerError:  # from _watch_workers
        raise
    except ImportError as exc:  # in the task: a module the worker lacks
        raise SchedulerError(_import_message(exc)) from None
    except distributed.KilledWorker as exc:
        raise SchedulerError(f"the workers of {where} died while running a task, again and again "
                             f"({_first_line(exc)}); check their memory and logs") from None
    except CancelledError as exc:
        raise _lost(where, exc) from None
    except OSError as exc:
        if future.status == "error":  # the task's own OSError
            raise
        raise _lost(where, exc) from None


def _import_message(exc):
    module = f"the module {exc.name!r}" if getattr(exc, "name", None) else "a module"
    return (f"a Dask worker cannot import {module} ({_first_line(exc)}): install it on the workers (the same "
            "environment as this process) or put its folder on their PYTHONPATH")


def _check_importable(client, function, where):
    """SchedulerError naming the module if a worker cannot unpickle `function` (and this
    module, which runs it): checked out of band on every worker, where a failure is an
    error that comes back, not a task that Dask cannot deserialize and retries forever."""
    from distributed.protocol.pickle import dumps

    payload = dumps((function, _call_single_threaded))
    try:
        client.run(_loaded, payload)
    except ImportError as exc:
        raise SchedulerError(_import_message(exc)) from None
    except OSError as exc:
        raise _lost(where, exc) from None


def _loaded(payload):
    """Unpickle `payload` and return nothing (a worker then sends nothing back)."""
    pickle.loads(payload)
