"""Recording a Flower experiment as a ParameterDump: client = partition id, checkpoint = round."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run

from .._locking import WriterLock
from .._validation import check_int
from ..dumps import MANIFEST, DumpError, ParameterDump, layout_from_shapes, unwritten_dump_discarded
from .grid import SERVER_NODE_ID, LocalGrid
from .records import flatten, named_arrays, partition_id, the_array_record


class RunRecorder:
    """Every client's arrays at every checkpoint of one run, kept until the run is written.

    Checkpoint 0 is the model the clients receive in round 1 (the initial global model);
    checkpoint t >= 1 is the model a client sends back after training in round t. A run is
    complete when every client has every checkpoint, which needs every client in every
    round (Flower's ``fraction_train=1.0``).

    Parameters
    ----------
    clients : sequence of int or str
        The clients (partition ids); stored as strings, the dump's client names.
    rounds : int
        Number of training rounds: checkpoints ``0, 1, ..., rounds``.
    """

    def __init__(self, clients: Sequence[int | str], rounds: int) -> None:
        self.clients = [str(c) for c in clients]
        if not self.clients or len(set(self.clients)) != len(self.clients):
            raise ValueError(f"`clients` must name at least one client, each once; got {list(clients)}")
        self.checkpoints = list(range(check_int(rounds, "rounds", low=1) + 1))
        self.shapes: dict[str, tuple[int, ...]] | None = None
        self.samples: dict[str, np.ndarray] = {}
        self.filled = {c: np.zeros(len(self.checkpoints), dtype=bool) for c in self.clients}

    def record(self, client: int | str, checkpoint: int, arrays: ArrayRecord | Mapping[str, np.ndarray]) -> None:
        """Store `client`'s floating-point `arrays` (by name) at `checkpoint`.

        The first call fixes the layout (names and shapes, in order); later calls must
        match it. Recording a client's checkpoint twice is an error.
        """
        client = str(client)
        if client not in self.filled:
            raise ValueError(f"client {client!r} is not one of the recorded clients {self.clients}")
        if isinstance(checkpoint, bool) or not isinstance(checkpoint, (int, np.integer)) \
                or not 0 <= checkpoint < len(self.checkpoints):
            raise ValueError(f"`checkpoint` must be a round in 0-{len(self.checkpoints) - 1}; got {checkpoint!r}")
        if self.filled[client][checkpoint]:
            raise ValueError(f"client {client} at round {checkpoint} was already recorded: does a node train twice "
                             "in a round, or do two nodes have the same partition id?")
        arrays = named_arrays(arrays) if isinstance(arrays, ArrayRecord) else {k: np.asarray(v) for k, v in arrays.items()}
        what = f"client {client}'s arrays at round {checkpoint}"
        if self.shapes is None:
            flatten(arrays, list(arrays), what=what)  # floating point only, checked before anything is kept
            self.shapes = {name: tuple(a.shape) for name, a in arrays.items()}
        shapes = {name: tuple(np.shape(a)) for name, a in arrays.items()}
        if shapes != self.shapes:
            raise ValueError(f"{what} have shapes {shapes}; the run so far has {self.shapes}")
        vector = flatten(arrays, list(self.shapes), what=what)
        if client not in self.samples:
            self.samples[client] = np.zeros((len(self.checkpoints), vector.size), dtype=np.float32)
        self.samples[client][checkpoint] = vector
        self.filled[client][checkpoint] = True

    def record_exchange(self, checkpoint: int, sent: Iterable[Message], replies: Iterable[Message],
                        client_of: Callable[[Message], int | str]) -> None:
        """Record one round of training: each reply's arrays at `checkpoint` (and, in round
        1, the arrays sent to that node as checkpoint 0). Replies carrying an error are
        skipped (the run will then be incomplete)."""
        sent_to = {}
        for message in sent:
            node = message.metadata.dst_node_id
            if node in sent_to:
                raise ValueError(f"node {node} was sent two training messages in round {checkpoint}")
            sent_to[node] = message
        for reply in replies:
            if reply.has_error():
                continue
            client = client_of(reply)
            self.record(client, checkpoint, the_array_record(reply))
            node = reply.metadata.src_node_id
            if checkpoint == 1 and node in sent_to:
                self.record(client, 0, the_array_record(sent_to[node]))

    def missing(self) -> list[tuple[str, int]]:
        """(client, checkpoint) of every cell not recorded yet."""
        return [(c, int(t)) for c in self.clients for t in np.flatnonzero(~self.filled[c])]

    def complete_samples(self) -> dict[str, np.ndarray]:
        """{client: (n_checkpoints, n_params) float32}; ValueError naming what is missing."""
        missing = self.missing()
        if missing:
            shown = ", ".join(f"client {c} round {t}" for c, t in missing[:6]) + (" ..." if len(missing) > 6 else "")
            recorded = max((int(np.flatnonzero(f).max()) for f in self.filled.values() if f.any()), default=None)
            raise ValueError(f"the run is incomplete: {len(missing)} of {len(self.clients) * len(self.checkpoints)} "
                             f"(client, round) cells were not recorded ({shown}); the last round recorded is "
                             f"{recorded}, expected {len(self.checkpoints) - 1} rounds with every client "
                             "taking part (fraction_train=1.0) and no failed replies")
        return self.samples

    def layout(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of each recorded array, in the flattened order."""
        if self.shapes is None:
            raise ValueError("nothing was recorded")
        return list(self.shapes.items())


class RecordingGrid(Grid):
    """A Flower ``Grid`` that passes everything to `grid` and records the training rounds.

    Each call of :meth:`send_and_receive` that carries training messages (message type
    ``"train"`` or ``"train.<action>"``) is one round, counted from 1; every reply's arrays
    go to `recorder` at that round, and in round 1 the arrays each node was sent go to
    checkpoint 0. Works with any strategy that exchanges training messages through
    ``send_and_receive`` (all of Flower's do), :class:`mianalysis.flower.FedRule` or not.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid that delivers the messages (a :class:`LocalGrid`, or the one Flower gives
        a ServerApp in a deployment).
    recorder : RunRecorder
    client_of : callable, optional
        Message -> client (partition id) of a reply. By default the partition id the
        reply carries (:func:`mianalysis.flower.with_partition_id`), else, on a
        :class:`LocalGrid`, the partition of the node that sent it.
    """

    def __init__(self, grid: Grid, recorder: RunRecorder,
                 client_of: Callable[[Message], int | str] | None = None) -> None:
        if not isinstance(grid, Grid):
            raise TypeError(f"`grid` must be a flwr Grid; got {type(grid).__name__}")
        if not isinstance(recorder, RunRecorder):
            raise TypeError(f"`recorder` must be a RunRecorder; got {type(recorder).__name__}")
        self.grid = grid
        self.recorder = recorder
        self.client_of = client_of or self.default_client_of
        self.rounds_seen = 0

    def default_client_of(self, reply: Message) -> int:
        """The reply's partition id: the one it carries, else its LocalGrid node's."""
        pid = partition_id(reply)
        if pid is not None:
            return pid
        if isinstance(self.grid, LocalGrid):
            return self.grid.partition_of(reply.metadata.src_node_id)
        raise ValueError(f"the reply of node {reply.metadata.src_node_id} does not say which partition it comes "
                         "from: build the ClientApp's reply with mianalysis.flower.with_partition_id(content, "
                         "context), or give RecordingGrid a `client_of`")

    def set_run(self, run: Run) -> None:
        """Set the wrapped grid's run."""
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        """The wrapped grid's run."""
        return self.grid.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        """The wrapped grid's ``create_message``."""
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        """The wrapped grid's node ids."""
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """The wrapped grid's ``push_messages`` (not recorded: use send_and_receive)."""
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The wrapped grid's ``pull_messages``."""
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """The wrapped grid's ``send_and_receive``; a training exchange is recorded as the next round."""
        messages = list(messages)
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        if any(m.metadata.message_type.split(".")[0] == "train" for m in messages):
            self.rounds_seen += 1
            if self.rounds_seen >= len(self.recorder.checkpoints):
                raise ValueError(f"the app runs more training rounds than the {len(self.recorder.checkpoints) - 1} "
                                 "being recorded")
            self.recorder.record_exchange(self.rounds_seen, messages, replies, self.client_of)
        return replies


def write_run(path: str | os.PathLike, run: int, recorder: RunRecorder, *, n_runs: int,
              meta: dict[str, Any]) -> ParameterDump:
    """Write `recorder`'s complete run as run `run` of the dump at `path` (made by run 0).

    One chunk per run, in order (`run` must be the dump's number of completed runs), with
    :meth:`ParameterDump.open_or_create` and :meth:`ParameterDump.write_chunk`, under the
    dump's writer lock. This is the one place that writes: the chunked
    ``ParameterDump.writer`` can take its place without other change.
    """
    samples = recorder.complete_samples()
    with WriterLock(path), unwritten_dump_discarded(path):
        dump = ParameterDump.open_or_create(path, meta=meta, clients=recorder.clients,
                                            checkpoints=recorder.checkpoints, n_runs=n_runs,
                                            layout=layout_from_shapes(recorder.layout()))
        expected = [(e.name, tuple(e.shape)) for e in dump.layout]
        if expected != recorder.layout():
            raise DumpError(f"run {run} has arrays {recorder.layout()}; the dump {path} holds {expected}")
        dump.write_chunk(run, run + 1, {c: samples[c][:, None, :] for c in dump.clients})
    return dump


def completed_runs(path: str | os.PathLike, meta: dict[str, Any]) -> int:
    """Runs already in the dump at `path` if it was recorded with `meta` (0 if there is none);
    DumpError if it holds another recording."""
    path = Path(path)
    if not (path / MANIFEST).exists():
        return 0
    dump = ParameterDump.open(path)
    if dump.meta != meta:
        raise DumpError(f"{path} holds a dump with other settings ({dump.meta}); this recording has {meta}: "
                        "choose another folder")
    return dump.completed_runs


def record_runs(server_app: ServerApp, client_app: ClientApp, out: str | os.PathLike, *, num_partitions: int,
                rounds: int, seeds: Sequence[int], run_config: Mapping[str, Any] | None = None,
                seed_key: str = "seed", meta: Mapping[str, Any] | None = None) -> ParameterDump:
    """Run a Flower app once per seed, in this process, into a dump of ``len(seeds)`` runs.

    Run r gives the ServerApp and every ClientApp the run config ``{**run_config,
    seed_key: seeds[r]}`` and runs on a :class:`LocalGrid` of `num_partitions` nodes,
    wrapped in a :class:`RecordingGrid`: every client's arrays after each training round
    are recorded (client = partition id, checkpoint = round, 0 the initial model), and the
    run is written as run r of the dump at `out`. Runs are written in order as they finish;
    calling again with the same arguments resumes after the last completed run. The
    result is an ordinary dump: ``mianalysis analyze OUT`` measures MI and distances between
    the clients at every round.

    The app must make the seed decide everything random (initial model, data order) so
    that runs are independent replicates, train every client in every round
    (``fraction_train=1.0``), and run `rounds` training rounds.

    Parameters
    ----------
    server_app, client_app : flwr.serverapp.ServerApp, flwr.clientapp.ClientApp
    out : path
        The dump folder (new, empty, or a dump of this recording to resume).
    num_partitions : int
        Number of clients (nodes), partition ids ``0 .. num_partitions - 1``.
    rounds : int
        Training rounds the app runs.
    seeds : sequence of int
        One run per seed.
    run_config : mapping, optional
        The rest of the run config (e.g. ``{"num-server-rounds": 5, "lr": 0.05}``).
    seed_key : str, default="seed"
        The run-config key of the seed.
    meta : mapping, optional
        More entries for the dump's meta (JSON values).

    Returns
    -------
    ParameterDump
    """
    seeds = [check_int(s, "seeds", low=0) for s in seeds]
    if not seeds:
        raise ValueError("`seeds` must hold at least one seed")
    if not isinstance(server_app, ServerApp):
        raise TypeError(f"`server_app` must be a flwr.serverapp.ServerApp; got {type(server_app).__name__}")
    num_partitions = check_int(num_partitions, "num_partitions", low=1)
    rounds = check_int(rounds, "rounds", low=1)
    run_config = dict(run_config or {})
    meta = {**dict(meta or {}), "flower": {"num_partitions": num_partitions, "rounds": rounds, "seeds": seeds,
                                            "seed_key": seed_key, "run_config": run_config}}
    clients = list(range(num_partitions))
    for run in range(completed_runs(out, meta), len(seeds)):
        recorder = RunRecorder(clients, rounds)
        config = {**run_config, seed_key: seeds[run]}
        with LocalGrid(client_app, num_partitions, run_config=config, run_id=run + 1) as local:
            context = Context(run_id=run + 1, node_id=SERVER_NODE_ID, node_config={}, state=RecordDict(),
                              run_config=dict(config))
            server_app(RecordingGrid(local, recorder), context)
        write_run(out, run, recorder, n_runs=len(seeds), meta=meta)
    return ParameterDump.open(out)


__all__ = ["RunRecorder", "RecordingGrid", "record_runs", "write_run"]
