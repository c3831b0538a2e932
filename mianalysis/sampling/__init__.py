"""ParameterSampler: retrain every client for one epoch many times, batched over runs."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._internal import memory as _memory
from .._internal.io import progress_bar
from .._internal.locking import WriterLock
from .._internal.seeding import replica_seed
from .._internal.validation import check_choice, check_int
from ..dumps import CENTRAL, OPTIMUM, DumpError, ParameterDump, layout_from_shapes, unwritten_dump_discarded
from ..tasks.base import INIT_MODES, ReplicaGenerators, check_shared
from ..tasks.optimizers import SGD, Adam  # imports no torch until one is made
from .knowledge import register_builtin_tasks

if TYPE_CHECKING:  # names used only in type hints
    import distributed
    import torch

    from ..tasks.base import Task

__all__ = ["ParameterSampler", "replica_seed", "task_optimizer", "ChunkResult", "ChunkMemoryError", "CENTRAL",
           "OPTIMUM", "REFERENCES", "GRAD_NORM"]

# The references the sampler can record beside the clients (dump conventions for the client's
# name): CENTRAL, trained per run; OPTIMUM, each run's exact theta* from the task.
REFERENCES = (CENTRAL, OPTIMUM)
# The metric that a dump sampled with reference="optimum" adds: the pooled objective's gradient
# norm at theta*, as the task's solver left it (float64); NaN (not recorded) for the clients.
GRAD_NORM = "grad_norm"


class ChunkMemoryError(MemoryError, ValueError):
    """A chunk of runs does not fit in memory: lower the sampler's `chunk_size`.

    A MemoryError, and a ValueError (a setting to change) that the command line prints as
    one line."""


def _generator(*words):
    import torch

    return torch.Generator().manual_seed(replica_seed(*words))


def _stream_word(stream):
    """The seed word of a random stream shared within a run: its name's CRC-32, so that a
    stream draws the same whatever other streams a task has or shares."""
    return zlib.crc32(stream.encode())


def task_optimizer(task: Task, params: Sequence[torch.Tensor]) -> Adam | SGD:
    """The optimiser that trains `params` for `task`.

    Adam with ``torch.optim.Adam``'s defaults (Kingma and Ba 2015), or plain steps
    p <- p - lr g (``torch.optim.SGD``) for a task whose ``optimizer`` is "sgd", at the
    task's learning rate: :class:`mianalysis.tasks.optimizers.Adam` and
    :class:`~mianalysis.tasks.optimizers.SGD`, the same bytes as PyTorch's (both its
    multi-tensor and its per-tensor implementation) without importing ``torch._dynamo``,
    which a ``torch.optim`` optimiser does when it is built. Every update is elementwise,
    so a replica's parameters are the same bytes whatever replicas it is stacked with.

    Parameters
    ----------
    task : mianalysis.tasks.Task
    params : list of torch.Tensor
        Leaf tensors that require gradients; ``step()`` reads their ``.grad``.

    Returns
    -------
    mianalysis.tasks.optimizers.Adam or mianalysis.tasks.optimizers.SGD
    """
    from ..tasks.optimizers import SGD, Adam

    if task.optimizer == "sgd":
        return SGD(params, lr=task.lr)
    if task.optimizer == "adam":
        return Adam(params, lr=task.lr)
    raise ValueError(f"`optimizer` of task {task.name!r} must be 'adam' or 'sgd'; got {task.optimizer!r}")


@dataclass
class ChunkResult:
    """Samples (n_clients, n_checkpoints, n_runs, n_params) and metrics
    (n_clients, n_metrics, n_checkpoints, n_runs) of a chunk of runs."""

    samples: np.ndarray
    metrics: np.ndarray


class ParameterSampler:
    """Retrain each client of a task for one epoch, many times, recording its parameters.

    For run r the initial parameters come from (seed, r) with ``init="per-run"`` (every
    client of a run starts from the same point; runs differ) or are one fixed point for
    all runs with ``init="fixed"``. Each client then trains for one epoch (a task's
    ``epochs``, each in a fresh order; one for the built-in tasks) with its own data
    order, augmentation and dropout randomness drawn from (seed, r, client), except the
    random streams named in `shared`: those draw from (seed, r, stream), the same for
    every client of run r. The flattened
    parameter vector is recorded at the initial state, after every `every` iterations and
    at the end of the epoch, with the task's metrics (loss, and accuracy where it applies).

    A chunk of `chunk_size` runs of all clients trains as one batched computation: every
    parameter tensor carries a leading replica dimension (runs x clients), the task's model
    is written over it, and the task's optimiser (Adam, or plain SGD for gaussian-sgd; see
    `task_optimizer`) updates all replicas at once. Runs do not interact, and
    a run's samples are the same bytes whatever chunk it was in and whatever the thread
    count, on a given CPU code path: every computation whose shape would otherwise follow
    the chunk (a task's data preparation) runs per replica, and a batch is never a single
    replica (PyTorch computes a batch of one by other kernels; a lone replica is trained
    beside a copy of itself). Tested for chunk sizes 1-8 and 1 or 2 threads under
    PyTorch's ``default``, ``avx2`` and native code paths and MKL's compatible and native
    ones. Samples made on different code paths (another instruction set) agree only to
    rounding, which training amplifies.

    Parameters
    ----------
    task : mianalysis.tasks.Task
    seed : int, default=0
    init : {"per-run", "fixed"}, default="per-run"
    every : int, default=1
        Record a checkpoint every this many iterations (the end of the epoch always is one).
    chunk_size : int, default=64
        Runs trained together. Memory grows with it; 32-64 is fastest for signal-rnn on 2 cores.
        :meth:`sample` refuses a chunk whose :meth:`chunk_bytes` exceed the memory this
        process can allocate before anything is written, and a chunk that runs out of
        memory in training, with a :class:`ChunkMemoryError` that suggests a smaller one.
    progress : bool, default=True
        Show a tqdm progress bar over runs.
    shared : sequence of str, default=()
        Random streams of the task (``task.streams``) that the clients of a run share:
        signal-rnn has "order" (minibatch order) and "dropout"; digits-lenet "order" and
        "augmentation"; gaussian-sgd "data" (the run's targets) and "noise" (gradient
        noise). With ``()`` every stream is the client's own and the samples are those of
        the sampler before streams could be shared. A non-empty `shared` is recorded in
        the dump's settings, so a dump is resumed only with the same sharing.
    reference : {None, "central", "optimum"}, default=None
        "central": also train, in every run, a reference client recorded in the dump as the
        client named "central" (after the task's clients), where the federation should be:
        see Notes. gaussian-sgd refuses it: it knows its exact reference.
        "optimum": also record, in every run and at every checkpoint, the client named
        "optimum": the run's exact theta* from the task (see Notes); a task that does not
        know theta* (``Task.optimum``; gaussian-sgd, softmax-regression and digits-head do)
        refuses it. Either is recorded in the dump's settings (``"reference": "central"`` or
        ``"optimum"``), so a dump is resumed only with the same reference.

    Notes
    -----
    **The central client.** It starts from the run's start (the same point as the run's
    clients) and takes the same number of optimiser steps as every client, with the task's
    optimiser and learning rate; its step t is on the *union* of the clients' batches of
    step t (client 0's examples, then client 1's, ...): the same examples in the same order
    as the clients together, each with the dropout mask it had in its client's batch. So it
    is a function of the run's own draws (start, data, order, masks) and of nothing else,
    and checkpoint i of every client and of the central client are both after i steps. For
    a task whose loss is a mean over the batch, its gradient at a step is the average of the
    clients' gradients there (the clients hold equal numbers of examples), taken at its own
    parameters: the centralised training (equivalently FedSGD with every client at every
    step) that averaging the clients' parameters tries to reach. K times as many steps of
    the clients' batch size would need an interleaving of the clients' batches that no
    stream of the run draws, and checkpoints on another grid. With one client the central
    client *is* that client, byte for byte. Its metrics are the task's metrics on each
    client's data, averaged over the clients. It trains beside the clients, in separate
    replicas (one per run, a batch of ``n_clients * batch_size``); the clients' samples are
    the same bytes with or without it, and its own the same whatever the chunk and thread
    count, as the clients' are (a chunk of one run trains beside a copy of itself).

    **The optimum client.** With ``reference="optimum"`` the task computes each run's theta*
    (``Task.optimum``): the minimiser of the pooled objective, every client's data with the
    run's draws and the clients weighted by their sizes, in float64 to a gradient norm of at
    most 1e-8. It is not trained: it is recorded as float32 (through the task's ``recorded``
    map, like every client) at every checkpoint, the same in all of a run's checkpoints. Its
    task metrics are the task's metrics at theta* on each client's data, averaged over the
    clients; the dump adds the metric :data:`GRAD_NORM` ("grad_norm"), the gradient norm at
    theta* as the task's solver left it (float64 before it is stored), which is NaN (not
    recorded) for the clients. The clients' samples are the same bytes with or without it.
    """

    def __init__(self, task: Task, *, seed: int = 0, init: str = "per-run", every: int = 1, chunk_size: int = 64,
                 progress: bool = True, shared: Sequence[str] = (), reference: str | None = None) -> None:
        self.task = task
        self.shared = check_shared(shared, task)
        if reference is not None:
            check_choice(reference, "reference", REFERENCES)
            if reference == CENTRAL:
                task.check_central()
            else:
                task.check_optimum()
        self.reference = reference
        self.seed = check_int(seed, "seed", low=0)
        self.init = check_choice(init, "init", INIT_MODES)
        self.every = check_int(every, "every", low=1)
        self.chunk_size = check_int(chunk_size, "chunk_size", low=1)
        self.progress = progress

    @property
    def checkpoints(self) -> list[int]:
        """Iteration numbers of the recorded checkpoints."""
        n = self.task.n_iterations
        its = [0] + [i for i in range(self.every, n + 1, self.every)]
        return its if its[-1] == n else its + [n]

    def settings(self, runs: int) -> dict:
        settings = {"task": self.task.name, "task_settings": self.task.settings, "seed": self.seed,
                    "init": self.init, "every": self.every, "chunk_size": self.chunk_size, "runs": runs}
        if self.shared:  # absent when nothing is shared: dumps made before sharing existed resume
            settings["shared"] = list(self.shared)
        if self.reference is not None:  # absent without a reference: dumps made before it existed resume
            settings["reference"] = self.reference
        return settings

    # ------------------------------------------------------------------ public
    def sample(self, runs: int, out: str | os.PathLike, *, scheduler: str | None = None,
               client: distributed.Client | None = None, timeout: float | None = None) -> ParameterDump:
        """Sample `runs` runs of every client into the dump folder `out` and return it.

        If `out` already holds a dump written with the same settings, sampling resumes: it
        samples the runs the dump does not hold yet (chunks written out of order by other
        workers included), cut on the same grid of `chunk_size` runs from run 0; the
        result, manifest included, is bit-identical to an uninterrupted run. A dump
        with other settings, or a non-empty folder that is not a dump, is an error and is
        left untouched. The dump's writer lock is held throughout: a second sampler (or any
        writer) of `out` gets a LockedError naming this process.

        Training that produces a non-finite parameter (NaN or infinity, e.g. with dropout 1
        or a learning rate that diverges) is a ValueError at the chunk where it happens,
        naming the client, the checkpoint (iteration) and the runs; nothing of that chunk is
        written, so the dump stays valid up to the chunk before. A non-finite loss or
        accuracy at finite parameters is recorded as it is: the parameters are valid
        samples, and a loss can overflow where the parameters do not.

        Parameters
        ----------
        runs : int
            Runs the dump holds when complete.
        out : path
            The dump folder.
        scheduler : str, optional
            Train the chunks on Dask workers (the ``dask`` extra): ``"local:N"`` (N worker
            processes on this machine, bound to the loopback interface),
            ``"tcp://HOST:PORT"`` or a scheduler file; see :mod:`mianalysis.scaleout`.
            Each worker trains whole chunks of `chunk_size` runs, single-threaded; this
            process writes every chunk as it comes back, in any order. The dump is the
            same bytes as one sampled here (same chunks, same checksums). A chunk whose
            worker dies is trained again by Dask; if this process stops, the same call
            resumes the chunks that are missing. A chunk that diverges (non-finite
            parameters) stops the sampling as above; chunks that other workers finished
            before it are kept.
        client : distributed.Client, optional
            An open Dask client to use instead of `scheduler` (it is left open).
        timeout : float, optional
            Seconds to reach the scheduler (default
            :data:`mianalysis.scaleout.CONNECT_TIMEOUT`); a scheduler that cannot be
            reached is a :class:`mianalysis.scaleout.SchedulerError` (an OSError), and
            nothing is written. A scheduler that has had no worker for as long, a lost
            connection to it, or a worker that cannot import the task's modules is a
            SchedulerError too, naming the runs the dump keeps (a rerun resumes).
        """
        runs = check_int(runs, "runs", low=1)
        if scheduler is None and client is None:
            self._check_chunk_fits(min(runs, self.chunk_size))  # Dask workers have memory of their own
            with WriterLock(out), unwritten_dump_discarded(out):  # failed before its first chunk: no empty dump left
                dump = self._open_dump(runs, out)
                self._write_chunks(dump, runs, self._chunks_here(dump))
            return dump
        from ..scaleout import CONNECT_TIMEOUT, SchedulerError, connect, run_unordered

        timeout = CONNECT_TIMEOUT if timeout is None else timeout
        with connect(scheduler, client=client, timeout=timeout) as dask:
            with WriterLock(out), unwritten_dump_discarded(out):
                dump = self._open_dump(runs, out)
                job = ChunkJob(self.task, seed=self.seed, init=self.init, every=self.every,
                               chunk_size=self.chunk_size, shared=self.shared, reference=self.reference)
                computed = run_unordered(dask, job, dump.missing_chunks(self.chunk_size), name="sample-chunk",
                                         timeout=timeout)
                try:
                    with closing(computed):  # an error stops the chunks still running
                        self._write_chunks(dump, runs, computed)  # in the order they complete
                except SchedulerError as exc:  # the cluster failed, not the training: what is written stays
                    kept = (f"the dump {dump.path} keeps the {dump.written_runs} runs written so far: rerun the same "
                            "command to resume" if dump.written_runs else "no run was written")
                    raise SchedulerError(f"{exc}; {kept}") from None
        return dump

    def _open_dump(self, runs, out):
        meta = self.settings(runs)
        recorded = _recorded_meta(out)
        if recorded is not None and recorded.get("task") == meta["task"]:
            try:
                meta["task_settings"] = self.task.resume_settings(recorded.get("task_settings"))
            except ValueError as exc:
                raise DumpError(f"{out} cannot be resumed: {exc}; nothing there was changed: sample into another "
                                "folder") from None
        return ParameterDump.open_or_create(
            out, meta=meta, clients=self.clients,
            checkpoints=self.checkpoints, n_runs=runs, layout=layout_from_shapes(self.task.parameter_shapes()),
            metric_names=self.metric_names, sketch=getattr(self.task, "sketch", None),  # recorded() applies it
        )

    @property
    def clients(self) -> list[str]:
        """The dump's client names: the task's clients "0", "1", ..., then "central" with
        ``reference="central"`` or "optimum" with ``reference="optimum"``."""
        return [str(c) for c in range(self.task.n_clients)] + ([self.reference] if self.reference else [])

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The dump's metrics: the task's, then :data:`GRAD_NORM` with ``reference="optimum"``."""
        return tuple(self.task.metric_names) + ((GRAD_NORM,) if self.reference == OPTIMUM else ())

    def chunk_bytes(self, chunk_runs: int) -> int:
        """A lower bound of the memory that training a chunk of `chunk_runs` runs takes: per
        replica (run x client, the central client included) and recorded parameter, 4 bytes
        for each of the parameters, their gradients, the optimiser's two moments and each
        checkpoint's sample twice (as recorded, then stacked; a sample is the sketch where the
        task records one)."""
        shapes = self.task.parameter_shapes()
        n_params = sum(int(np.prod(shape)) for _, shape in shapes)
        sketch = getattr(self.task, "sketch", None)
        n_sample = n_params if sketch is None else sum(sketch.sizes(shapes))
        return chunk_runs * len(self.clients) * 4 * (4 * n_params + 2 * len(self.checkpoints) * n_sample)

    def _check_chunk_fits(self, chunk_runs):
        """ChunkMemoryError, before anything is written, when :meth:`chunk_bytes` exceeds the
        memory this process can allocate (physical memory, cgroup limits, ``ulimit -v``)."""

        need, room = self.chunk_bytes(chunk_runs), _memory.available_memory_bytes()
        if room and need > room:
            fits = max(1, chunk_runs * room // (2 * need))
            raise ChunkMemoryError(
                f"a chunk of {chunk_runs} runs ({len(self.clients)} clients, {len(self.checkpoints)} checkpoints) "
                f"needs at least {need / 2**30:.3g} GiB, more than the {room / 2**30:.3g} GiB this process can "
                f"allocate: lower `chunk_size` (--chunk-size), e.g. to {fits}, or record fewer checkpoints (--every)")

    def _chunks_here(self, dump):
        for start, stop in dump.missing_chunks(self.chunk_size):  # on the grid of chunk_size from run 0
            try:
                result = self.train_chunk(range(start, stop))
            except (MemoryError, RuntimeError) as exc:
                if not isinstance(exc, MemoryError) and "can't allocate memory" not in str(exc):
                    raise
                raise ChunkMemoryError(
                    f"training runs {start}-{stop} ran out of memory ({type(exc).__name__}); lower `chunk_size` "
                    f"(--chunk-size, now {self.chunk_size}); the dump {dump.path} keeps its {dump.completed_runs} "
                    "completed runs") from None
            yield (start, stop), result

    def _write_chunks(self, dump, runs, results):
        """Check and write each ((start, stop), ChunkResult) of `results` as it comes."""
        bar = progress_bar(runs, initial=dump.written_runs, unit="run", desc="sampling", enabled=self.progress)
        clients = dump.clients
        for (start, stop), result in results:
            _check_finite(result, start, stop, dump)
            dump.write_chunk(start, stop, {c: result.samples[i] for i, c in enumerate(clients)},
                             {c: result.metrics[i] for i, c in enumerate(clients)})
            bar.update(stop - start)
        bar.close()

    def initial_params(self, run: int) -> list:
        """Initial parameter tensors of run `run`."""
        if self.init == "fixed":
            return self.task.fixed_params()
        return self.task.init_params(_generator(self.seed, run, 0))

    def data_generators(self, runs: Iterable[int], client: int) -> ReplicaGenerators:
        """The generators that the task's ``client_data`` gets for `client` in `runs`: one per
        run, fresh, from the task's data stream (the run's when it is shared, else the
        replica's own), as in training. A task recomputes a run's data from them (e.g.
        gaussian-sgd's targets, for :meth:`~mianalysis.tasks.GaussianSGDTask.central_parameters`).
        """
        runs = [int(r) for r in runs]
        client = check_int(client, "client", low=0, high=self.task.n_clients - 1)
        return self._stream(self.task.data_stream, [(client, r) for r in runs],
                            [_generator(self.seed, r, 1 + client) for r in runs])

    def _stream(self, name, pairs, own):
        """The generators of stream `name` (see ReplicaGenerators) for the replicas `pairs`
        ((client, run) each) whose own generators are `own`: the run's where the stream is
        shared, else the replica's own."""
        if name is None or name not in self.task.streams:
            return ReplicaGenerators(own, own)
        run = [_generator(self.seed, r, 0, _stream_word(name)) for _, r in pairs]
        return ReplicaGenerators(run if name in self.shared else own, run)

    def train_chunk(self, runs: Iterable[int], *, vectorised: bool = True) -> ChunkResult:
        """Train every client for the runs in `runs`; returns a ChunkResult.

        With ``vectorised=False`` each (run, client) trains alone, with the task's optimiser
        over its own tensors (see `task_optimizer`): the plain loop the
        batched computation is checked against (the central client of a run trains beside
        its run's clients, whose batches it needs, and alone among central clients).

        A task with ``sampling_threads`` set (digits-lenet: 1) trains on that many PyTorch
        threads whatever the caller's count, which is restored after; the samples are the
        same bytes on any thread count either way (see the class docstring).
        """
        threads = self.task.sampling_threads
        if threads is None:
            return self._train_chunk(runs, vectorised)
        from .._internal.threads import torch_threads

        with torch_threads(threads):
            return self._train_chunk(runs, vectorised)

    def _train_chunk(self, runs, vectorised):
        runs = list(runs)
        result = self._train_clients(runs, vectorised)
        return self._with_optimum(runs, result) if self.reference == OPTIMUM else result

    def _train_clients(self, runs, vectorised):
        """The ChunkResult of the clients in `runs` (and of the central client with ``reference="central"``)."""
        everyone = list(range(self.task.n_clients))
        central = self.reference == CENTRAL
        if not vectorised:
            n_c = self.task.n_clients
            parts = [self._train(runs=[r], clients=[c], vectorised=False)
                     for r in runs for c in everyone]
            centrals = [self._train(runs=[r], clients=everyone, vectorised=False, central=True)
                        for r in runs] if central else []
            samples = [np.concatenate([parts[i * n_c + c].samples[0] for i in range(len(runs))], axis=1)
                       for c in everyone]
            metrics = [np.concatenate([parts[i * n_c + c].metrics[0] for i in range(len(runs))], axis=2)
                       for c in everyone]
            if central:
                samples.append(np.concatenate([part.samples[-1] for part in centrals], axis=1))
                metrics.append(np.concatenate([part.metrics[-1] for part in centrals], axis=2))
            return ChunkResult(np.stack(samples), np.stack(metrics))
        return self._train(runs=runs, clients=everyone, vectorised=True, central=central)

    # ------------------------------------------------------------------ internals
    def _with_optimum(self, runs, result):
        """`result` with the optimum client after the clients, and the :data:`GRAD_NORM`
        metric (NaN for the clients)."""
        if len(runs) == 1:  # never a batch of one replica (see the class docstring)
            samples, metrics = self._optimum(runs * 2)
            samples, metrics = samples[:, :1], metrics[..., :1]
        else:
            samples, metrics = self._optimum(runs)
        clients, n_metrics, n_checkpoints, n_runs = result.metrics.shape
        unrecorded = np.full((clients, 1, n_checkpoints, n_runs), np.nan, dtype=np.float32)
        return ChunkResult(np.ascontiguousarray(np.concatenate([result.samples, samples[None]])),
                           np.ascontiguousarray(np.concatenate([np.concatenate([result.metrics, unrecorded], axis=1),
                                                                metrics[None]])))

    def _optimum(self, runs):
        """The optimum client of `runs`: samples (checkpoints, runs, P) and metrics (metrics,
        checkpoints, runs), float32, the same at every checkpoint (see Notes)."""
        import torch

        task, n = self.task, self.task.n_clients
        theta, grad_norm = task.optimum([self.data_generators(runs, c) for c in range(n)])
        n_params = sum(int(np.prod(shape)) for _, shape in task.parameter_shapes())
        theta = np.asarray(theta, dtype=np.float64)
        grad_norm = np.asarray(grad_norm, dtype=np.float64)
        if theta.shape != (len(runs), n_params) or grad_norm.shape != (len(runs),):
            raise ValueError(f"task {task.name!r}: optimum() must return theta* of shape ({len(runs)}, {n_params}) and "
                             f"gradient norms of shape ({len(runs)},); got {theta.shape} and {grad_norm.shape}")
        tensors, at = [], 0
        for _, shape in task.parameter_shapes():
            size = int(np.prod(shape))
            tensors.append(torch.from_numpy(theta[:, at:at + size].reshape(len(runs), *shape).copy()))
            at += size
        with torch.no_grad():
            recorded = torch.cat([p.reshape(len(runs), -1) for p in task.recorded(tensors)], 1).numpy()
            params = [p.float() for p in tensors]
            on = [task.evaluate(params, task.client_data(c, self.data_generators(runs, c))) for c in range(n)]
            values = [torch.stack([v[m].detach() for v in on]).mean(0).numpy() for m in task.metric_names]
        checkpoints = len(self.checkpoints)
        samples = np.broadcast_to(recorded.astype(np.float32), (checkpoints, len(runs), n_params))
        metrics = np.stack([*values, grad_norm]).astype(np.float32)[:, None, :]
        return samples, np.broadcast_to(metrics, (len(metrics), checkpoints, len(runs)))

    def _train(self, runs, clients, vectorised, central=False):
        """Train `clients` in `runs` (and, with `central`, the runs' central clients, last)."""
        import torch

        from ..tasks.base import ClientBatchData

        if vectorised and (len(runs) * len(clients) == 1 or (central and len(runs) == 1)):
            twice = self._train(runs * 2, clients, vectorised, central)  # see the class docstring
            return ChunkResult(twice.samples[:, :, :1].copy(), twice.metrics[..., :1].copy())
        task = self.task
        # Replica i = (client, run): client-major, so each client's runs are contiguous.
        pairs = [(c, r) for c in clients for r in runs]
        generators = [_generator(self.seed, r, 1 + c) for c, r in pairs]  # each replica's own

        def stream(name, replicas=slice(None)):
            return self._stream(name, pairs[replicas], generators[replicas])

        inits = {r: self.initial_params(r) for r in runs}
        params = [torch.stack([inits[r][j] for _, r in pairs]).clone().requires_grad_(True)
                  for j in range(len(inits[runs[0]]))]
        per_client = [task.client_data(c, stream(task.data_stream, slice(i * len(runs), (i + 1) * len(runs))))
                      for i, c in enumerate(clients)]
        inputs = torch.cat([d.inputs for d in per_client])
        targets = torch.cat([d.targets for d in per_client])
        data = ClientBatchData(inputs, targets, per_client[0].extra)
        n, b = task.n_examples, task.batch_size
        # (R, epochs * n): one permutation per epoch, drawn in turn from each replica's generator.
        order = torch.stack([torch.cat([torch.randperm(n, generator=g) for _ in range(task.epochs)])
                             for g in stream("order")])
        per_epoch = -(-n // b)
        mask_generators = stream(task.mask_stream)

        opt = task_optimizer(task, params)
        record_at = set(self.checkpoints)
        samples, metrics = [], []
        k = len(clients)
        if central:  # one replica per run, from the run's start (see the class Notes)
            central_params = [torch.stack([inits[r][j] for r in runs]).clone().requires_grad_(True)
                              for j in range(len(inits[runs[0]]))]
            central_opt = task_optimizer(task, central_params)
            central_samples, central_metrics = [], []

        def union(t):
            """(k * R, b, ...), client-major -> (R, k * b, ...): every run's union batch, client by client."""
            return t.reshape(k, len(runs), *t.shape[1:]).transpose(0, 1).reshape(len(runs), k * t.shape[1],
                                                                                 *t.shape[2:])

        def flat(tensors):
            return torch.cat([p.reshape(p.shape[0], -1) for p in task.recorded([p.detach() for p in tensors])], 1)

        def record():
            with torch.no_grad():
                samples.append(flat(params).numpy().copy())
                values = task.evaluate(params, data)
                metrics.append(np.stack([values[m].detach().numpy() for m in task.metric_names]))
                if central:  # its metrics on each client's data, averaged over the clients
                    central_samples.append(flat(central_params).numpy().copy())
                    on = [task.evaluate(central_params, d) for d in per_client]
                    central_metrics.append(np.stack([torch.stack([v[m].detach() for v in on]).mean(0).numpy()
                                                     for m in task.metric_names]))

        record()
        rows = torch.arange(len(pairs))[:, None]
        for it in range(task.n_iterations):
            epoch, step = divmod(it, per_epoch)
            start = epoch * n + step * b
            idx = order[:, start:min(start + b, (epoch + 1) * n)]
            xb = inputs[rows, idx]
            yb = targets[rows, idx]
            masks = task.draw_masks(mask_generators, idx.shape[1])
            for p, g in zip(params, task.gradients(params, xb, yb, masks)):
                p.grad = g
            opt.step()
            if central:
                for p, g in zip(central_params, task.gradients(central_params, union(xb), union(yb),
                                                               task.central_masks(masks, k))):
                    p.grad = g
                central_opt.step()
            if it + 1 in record_at:
                record()
        # samples: list over checkpoints of (R, P) -> (clients, checkpoints, runs, P)
        s = np.stack(samples).reshape(len(record_at), len(clients), len(runs), -1).transpose(1, 0, 2, 3)
        m = np.stack(metrics).reshape(len(record_at), len(task.metric_names), len(clients), len(runs)).transpose(2, 1, 0, 3)
        if central:  # the last client: (checkpoints, runs, P) and (checkpoints, metrics, runs)
            s = np.concatenate([s, np.stack(central_samples)[None]])
            m = np.concatenate([m, np.stack(central_metrics).transpose(1, 0, 2)[None]])
        return ChunkResult(np.ascontiguousarray(s, dtype=np.float32), np.ascontiguousarray(m, dtype=np.float32))


class ChunkJob:
    """What a Dask worker needs to train a chunk of runs: the task and the sampler's
    settings (never data; the task builds its data on the worker). Called with
    ``(start, stop)`` it returns the :class:`ChunkResult` of runs [start, stop), the same
    bytes as :meth:`ParameterSampler.train_chunk` in this process: it trains under one
    PyTorch thread. It reaches each worker once (:func:`mianalysis.scaleout.run_unordered`)
    and keeps its sampler there, so that a task's data (signal-rnn's examples,
    digits-lenet's pretrained network) are built once per worker.
    """

    def __init__(self, task, *, seed, init, every, chunk_size, shared, reference=None):
        self.task = task
        self.settings = {"seed": seed, "init": init, "every": every, "chunk_size": chunk_size,
                         "shared": tuple(shared), "reference": reference}
        self._sampler = None

    def __getstate__(self):
        return {"task": self.task, "settings": self.settings}  # the sampler is built where it runs

    def __setstate__(self, state):
        self.task, self.settings, self._sampler = state["task"], state["settings"], None

    def __call__(self, runs):
        from .._internal.threads import torch_threads

        start, stop = runs
        if self._sampler is None:
            self._sampler = ParameterSampler(self.task, progress=False, **self.settings)
        with torch_threads(1):
            return self._sampler.train_chunk(range(start, stop))


def _recorded_meta(out):
    """The settings recorded by the dump at `out`; None where there is none (or it cannot
    be read: opening it again reports that)."""
    if not os.path.isdir(out):
        return None
    try:
        return ParameterDump.open(out).meta
    except (DumpError, OSError):
        return None


def _check_finite(result, start, stop, dump):
    """ValueError if a chunk's training produced a non-finite parameter: the earliest
    checkpoint where one did, with its client and runs."""
    from ..dumps import find_nonfinite

    found = []
    for i, client in enumerate(dump.clients):
        where = find_nonfinite(result.samples[i], dump.checkpoints, first_run=start, layout=dump.layout)
        if where is not None:
            found.append((where.checkpoint, i, client, where))
    if not found:
        return
    _, _, client, where = min(found, key=lambda f: f[:2])
    others = [f"{f[2]!r}" for f in sorted(found, key=lambda f: f[1]) if f[2] != client]
    also = f" (clients {', '.join(others)} too)" if others else ""
    raise ValueError(
        f"training produced non-finite parameters (it diverged): client {client!r}{also}, {where.describe()}; "
        f"nothing of runs {start}-{stop} was written (the dump {dump.path} keeps its {dump.completed_runs} completed "
        "runs); these settings diverge (e.g. dropout 1, too high a learning rate): sample other settings into "
        "another folder")


# What the built-in tasks know beyond their samples (their streams, an exact MI, each run's
# exact optimum), where the analysis finds it from a dump's meta (mianalysis.dumps.knowledge).
register_builtin_tasks(ParameterSampler)
