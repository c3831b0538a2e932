"""Recording a Flower experiment as a ParameterDump: client = partition id, checkpoint = round."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run

from .._internal.io import progress_bar
from .._internal.validation import check_int
from ..dumps.writer import DumpWriter, layout_difference
from ..dumps import ParameterDump
from ..dumps.sketch import Sketch
from .grid import SERVER_NODE_ID, LocalGrid
from .records import named_arrays, partition_id, the_array_record
from .seeding import SERVER_STREAM, seeded_globals

# What a recorded dump's meta says every client of a run starts from (``init``) and shares
# (``shared``), as figure titles show them (mianalysis.report.plots.figure_title): checkpoint 0
# is the global model the server sends every client in round 1, and every round starts each
# client from the round's global model. record_runs seeds the global random generators apart
# for every ClientApp call; in a deployment the app seeds its own draws.
RECORDED_INIT = "global model of round 0, sent to every client"
_SHARED = "the global model of every round"
_SHARED_RUNS = [f"{_SHARED} (not the global random generators: seeded apart for each client call)"]
_SHARED_DEPLOYMENT = [f"{_SHARED} (random draws: as the app seeds them)"]


class RunRecorder:
    """Passes one run's records -- every client's arrays at every round -- to a dump writer.

    Checkpoint 0 is the model the clients receive in round 1 (the initial global model);
    checkpoint t >= 1 is the model a client sends back after training in round t, with the
    numbers of its reply's MetricRecord as the record's metrics. The run is written when
    every client has every checkpoint (the writer writes a chunk when it is complete), which
    needs every client in every round (Flower's ``fraction_train=1.0``);
    :meth:`check_complete` names what is missing otherwise. A writer made with a
    ``sketch=`` (:class:`mianalysis.dumps.Sketch`) records each client's sketch instead of
    its arrays.

    Parameters
    ----------
    writer : mianalysis.dumps.writer.DumpWriter
        An open writer (``with DumpWriter(...) as writer``) whose clients are the
        partition ids and whose checkpoints are the rounds ``0, 1, ..., R``.
    run : int
        The run these records belong to.
    """

    def __init__(self, writer: DumpWriter, run: int) -> None:
        if not isinstance(writer, DumpWriter):
            raise TypeError(f"`writer` must be a DumpWriter (mianalysis.DumpWriter(...)); got {type(writer).__name__}")
        if list(writer.checkpoints) != list(range(len(writer.checkpoints))):
            raise ValueError(f"the writer's checkpoints must be the rounds 0, 1, ..., R; got {writer.checkpoints}")
        self.writer = writer
        self.run = check_int(run, "run", low=0, high=writer.n_runs - 1)
        self.clients = list(writer.clients)
        self.checkpoints = list(writer.checkpoints)
        self.filled = {c: np.zeros(len(self.checkpoints), dtype=bool) for c in self.clients}

    def record(self, client: int | str, checkpoint: int, arrays: ArrayRecord | Mapping[str, np.ndarray],
               metrics: Mapping[str, float] | None = None) -> None:
        """Record `client`'s `arrays` (by name; floating-point ones are kept) at `checkpoint`.

        Recording a client's checkpoint twice is an error naming the likely cause.
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
        if isinstance(arrays, ArrayRecord):
            arrays = named_arrays(arrays)
        self.writer.record(run=self.run, client=client, checkpoint=int(checkpoint), params=dict(arrays),
                           metrics=metrics)
        self.filled[client][checkpoint] = True

    def record_exchange(self, checkpoint: int, sent: Iterable[Message], replies: Iterable[Message],
                        client_of: Callable[[Message], int | str]) -> None:
        """Record one round of training: each reply's arrays and metrics at `checkpoint`
        (and, in round 1, the arrays sent to that node as checkpoint 0). Replies carrying an
        error are skipped (the run will then be incomplete)."""
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
            self.record(client, checkpoint, the_array_record(reply), reply_metrics(reply))
            node = reply.metadata.src_node_id
            if checkpoint == 1 and node in sent_to:
                self.record(client, 0, the_array_record(sent_to[node]))

    def check_model(self, shapes: Iterable[tuple[str, Sequence[int]]], what: str = "the model") -> None:
        """Check a model's floating-point tensors (`shapes`, (name, shape) pairs) before it trains.

        ValueError naming the problem if the writer records its tensors already (a resumed
        dump, or an earlier run) and `shapes` are not those tensors, or if the writer's
        sketch would keep every tensor whole (the dump would hold the parameters, not a
        sketch of them). :class:`RecordingGrid` checks the model it sends in round 1.
        """
        shapes = [(str(n), tuple(int(d) for d in s)) for n, s in shapes]
        sketch, layout = self.writer.sketch, self.writer.layout
        if layout is not None:
            expected = [(e.name, e.shape) for e in layout]
            diff = layout_difference(shapes, expected)
            if diff and not diff.endswith("another order"):  # the writer records the layout's order whatever the dict's
                of = f"the tensors the sketch of {self.writer.path} was taken of" if sketch is not None \
                    else f"the tensors {self.writer.path} records"
                raise ValueError(f"{what} {diff}, compared with {of}, {expected}: every run of a dump records the same "
                                 "model; record this one into another folder")
        if sketch is not None and shapes and sketch.sizes(shapes) == [math.prod(s) for _, s in shapes]:
            rows = "rows per tensor" if sketch.split == "tensor" else "rows in all"
            largest = max(math.prod(s) for _, s in shapes)
            held = (f"its largest tensor has {largest} values" if sketch.split == "tensor"
                    else f"its {sum(math.prod(s) for _, s in shapes)} values")
            raise ValueError(f"`sketch` ({sketch.describe()}) keeps every tensor of {what} whole ({held}, the sketch "
                             f"{sketch.size} {rows}): the dump would hold the parameters, not a sketch of them; give a "
                             "Sketch of fewer rows, or no sketch")

    def missing(self) -> list[tuple[str, int]]:
        """(client, checkpoint) of every record not given yet."""
        return [(c, int(t)) for c in self.clients for t in np.flatnonzero(~self.filled[c])]

    def check_complete(self) -> None:
        """Raise a ValueError naming the missing (client, round) records, if any."""
        missing = self.missing()
        if missing:
            shown = ", ".join(f"client {c} round {t}" for c, t in missing[:6]) + (" ..." if len(missing) > 6 else "")
            recorded = max((int(np.flatnonzero(f).max()) for f in self.filled.values() if f.any()), default=None)
            raise ValueError(f"run {self.run} is incomplete: {len(missing)} of "
                             f"{len(self.clients) * len(self.checkpoints)} (client, round) records are missing "
                             f"({shown}); the last round recorded is {recorded}, expected "
                             f"{len(self.checkpoints) - 1} rounds with every client taking part (fraction_train=1.0) "
                             "and no failed replies")


def reply_metrics(reply: Message) -> dict[str, float]:
    """The numbers (not lists) of a reply's one MetricRecord ({} if it has not exactly one)."""
    records = reply.content.metric_records
    if len(records) != 1:
        return {}
    return {k: float(v) for k, v in next(iter(records.values())).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


class RecordingGrid(Grid):
    """A Flower ``Grid`` that passes everything to `grid` and records the training rounds.

    Each call of :meth:`send_and_receive` that carries training messages (message type
    ``"train"`` or ``"train.<action>"``) is one round, counted from 1; every reply's arrays
    go to `recorder` at that round, and in round 1 the arrays each node was sent go to
    checkpoint 0. Works with any strategy that exchanges training messages through
    ``send_and_receive`` (all of Flower's do), :class:`mianalysis.flower.FedRule` or not.
    Before round 1 is sent, the model it carries is checked (:meth:`RunRecorder.check_model`):
    a model unlike the one the dump records, or one the writer's sketch would keep whole,
    is an error before any client trains.

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
        training = [m for m in messages if m.metadata.message_type.split(".")[0] == "train"]
        if training and self.rounds_seen == 0:
            records = training[0].content.array_records  # the model of round 1 (its checkpoint 0)
            if len(records) == 1:  # otherwise the_array_record names the problem when it is recorded
                arrays = next(iter(records.values()))
                self.recorder.check_model([(n, a.shape) for n, a in arrays.items() if "float" in a.dtype],
                                          "the model sent in round 1")
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        if training:
            self.rounds_seen += 1
            if self.rounds_seen >= len(self.recorder.checkpoints):
                raise ValueError(f"the app runs more training rounds than the {len(self.recorder.checkpoints) - 1} "
                                 "being recorded")
            self.recorder.record_exchange(self.rounds_seen, messages, replies, self.client_of)
        return replies


def repeated_seeds(seeds: Mapping[int, Any]) -> dict[Any, list[int]]:
    """The seeds that more than one run of a dump has: the check :func:`record_runs` (its
    `seeds`) and :func:`record_deployment` (the seeds of the runs written, and this one's)
    apply, as a repeated seed records the same run twice.

    Parameters
    ----------
    seeds : mapping of run -> seed
        The seed of each run (None: not known, never a repeat).

    Returns
    -------
    dict of seed -> list of int
        Each repeated seed with its runs, in increasing order; seeds sorted (by their text
        where they are not comparable). Empty if no seed repeats.

    Examples
    --------
    >>> from mianalysis.flower.recorder import repeated_seeds
    >>> repeated_seeds({0: 3, 1: 1, 2: 3, 3: 1, 4: 2})
    {1: [1, 3], 3: [0, 2]}
    """
    runs: dict[Any, list[int]] = {}
    for run, seed in seeds.items():
        if seed is not None:
            runs.setdefault(seed, []).append(int(run))
    repeated = [seed for seed, of in runs.items() if len(of) > 1]
    try:
        repeated.sort()
    except TypeError:  # seeds of several types (a run config's values)
        repeated.sort(key=repr)
    return {seed: sorted(runs[seed]) for seed in repeated}


def _seeds_written(writer: DumpWriter) -> dict[int, Any]:
    """run -> seed of the written runs of the writer's dump that record_deployment recorded,
    from their sessions' provenance records (``"flower": {"run": r, "seed": s}``)."""
    found: dict[int, Any] = {}
    sessions: list[dict] = writer.dump.provenance if writer.dump is not None else []
    for session in sessions:
        entry = session.get("flower")
        if not isinstance(entry, dict) or "seed" not in entry:
            continue
        run = entry.get("run")
        if isinstance(run, int) and not isinstance(run, bool) and 0 <= run < writer.n_runs \
                and writer.is_written(run):
            found[run] = entry["seed"]
    return found


def record_runs(server_app: ServerApp, client_app: ClientApp, out: str | os.PathLike, *, num_partitions: int,
                rounds: int, seeds: Sequence[int], run_config: Mapping[str, Any] | None = None,
                seed_key: str = "seed", meta: Mapping[str, Any] | None = None, verbose: bool = False,
                progress: bool = False, sketch: Sketch | None = None) -> ParameterDump:
    """Run a Flower app once per seed, in this process, into a dump of ``len(seeds)`` runs.

    Run r gives the ServerApp and every ClientApp the run config ``{**run_config,
    seed_key: seeds[r]}`` and runs on a :class:`LocalGrid` of `num_partitions` nodes,
    wrapped in a :class:`RecordingGrid`: every client's arrays after each training round
    are recorded (client = partition id, checkpoint = round, 0 the initial model), and the
    run is written as run r of the dump at `out` (through :class:`~mianalysis.DumpWriter`, one
    chunk per run) as soon as it finishes; calling again with the same arguments runs only
    the runs not written yet. The
    result is an ordinary dump: ``mianalysis analyze OUT`` measures MI and distances between
    the clients at every round.

    The seed reaches the app in two ways, so an app needs no change to be recorded:

    - Python's ``random``, NumPy's global generator and PyTorch's CPU generator are
      seeded from (seed, "server") for the ServerApp and from (seed, partition, message
      number) for each ClientApp call (see :class:`LocalGrid`), and restored afterwards:
      an app that draws from them (PyTorch's default initialisation, ``DataLoader(shuffle=True)``)
      without reading any seed gets a different, reproducible run for every seed.
    - ``context.run_config[seed_key]`` holds the seed, for an app that makes its own
      generators (Flower has no convention for a seed; in a deployment this is the way,
      ``flwr run --run-config "seed=3"``).

    The app must draw everything random from one of these (the same seed then gives the
    same dump, byte for byte), train every client in every round (``fraction_train=1.0``),
    and run `rounds` training rounds.

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
        One run per seed, each seed once.
    run_config : mapping, optional
        The rest of the run config (e.g. ``{"num-server-rounds": 5, "lr": 0.05}``).
    seed_key : str, default="seed"
        The run-config key of the seed.
    meta : mapping, optional
        More entries for the dump's meta (JSON values). The meta says what the clients of
        a run start from and share, as the figures' titles show them: ``"init"``
        (:data:`RECORDED_INIT`, the global model of round 0) and ``"shared"`` (the global model of
        every round; the global random generators are seeded apart for each client call);
        entries of `meta` with these keys replace them (an app whose clients also share
        draws of its own generators, e.g. one data split drawn from the run's seed).
    verbose : bool, default=False
        Keep Flower's INFO messages (several lines per round and client: thousands for a
        recording of many runs). By default the "flwr" logger shows warnings and errors only
        while the recording runs, and its level is restored afterwards.
    progress : bool, default=False
        A progress bar over runs on stderr (runs written earlier counted as done).
    sketch : mianalysis.dumps.Sketch, optional
        Record each client's sketch instead of its arrays (models of millions of
        parameters): the writer's `sketch` (:class:`~mianalysis.DumpWriter`), so the
        dump's layout is the sketch's (``NAME[sketch]`` tensors) and its manifest holds the
        sketch, seed and size included; a dump is resumed only with the same sketch. The
        same projection for every client, round and run: distances between the clients
        are the parameters' within the Johnson-Lindenstrauss error of
        :class:`~mianalysis.dumps.Sketch`, and MI between sketches is at most the MI
        between the parameters (data processing). A sketch that would keep every tensor
        of the model whole is an error before any client trains.

    Returns
    -------
    ParameterDump
    """
    seeds = [check_int(s, "seeds", low=0) for s in seeds]
    if not seeds:
        raise ValueError("`seeds` must hold at least one seed")
    repeated = repeated_seeds(dict(enumerate(seeds)))
    if repeated:
        raise ValueError(f"`seeds` must not repeat a seed (a repeated seed records the same run twice); "
                         f"{', '.join(map(str, repeated))} {'is' if len(repeated) == 1 else 'are'} repeated in {seeds}")
    if not isinstance(server_app, ServerApp):
        raise TypeError(f"`server_app` must be a flwr.serverapp.ServerApp; got {type(server_app).__name__}")
    num_partitions = check_int(num_partitions, "num_partitions", low=1)
    rounds = check_int(rounds, "rounds", low=1)
    run_config = dict(run_config or {})
    meta = {"init": RECORDED_INIT, "shared": _SHARED_RUNS, **dict(meta or {}),
            "flower": {"num_partitions": num_partitions, "rounds": rounds, "seeds": seeds, "seed_key": seed_key,
                       "run_config": run_config}}
    # One chunk per run: each run is written as soon as its last record comes.
    clients = [str(p) for p in range(num_partitions)]  # the partition ids, as the writer names clients
    with _flower_messages(verbose), DumpWriter(out, clients=clients, checkpoints=range(rounds + 1), runs=len(seeds),
                                               chunk_size=1, meta=meta, sketch=sketch) as writer:
        todo = writer.missing_runs()
        bar = progress_bar(len(seeds), initial=len(seeds) - len(todo), unit="run", desc="recording", enabled=progress)
        for run in todo:
            recorder = RunRecorder(writer, run)
            config = {**run_config, seed_key: seeds[run]}
            with LocalGrid(client_app, num_partitions, run_config=config, run_id=run + 1, seed=seeds[run]) as local, \
                    seeded_globals(seeds[run], SERVER_STREAM):
                context = Context(run_id=run + 1, node_id=SERVER_NODE_ID, node_config={}, state=RecordDict(),
                                  run_config=dict(config))
                server_app(RecordingGrid(local, recorder), context)
            recorder.check_complete()
            bar.update(1)
        bar.close()
    return ParameterDump.open(out)


# The run-config entries a deployed ServerApp reads to record its run (record_deployment);
# an app declares them, with these defaults (recording off), in its pyproject.toml's
# [tool.flwr.app.config.mianalysis] table so that `flwr run --run-config` may set them.
DEPLOYMENT_CONFIG = {"mianalysis.dump": "", "mianalysis.run": 0, "mianalysis.runs": 1}


@contextlib.contextmanager
def record_deployment(grid: Grid, context: Context, *, rounds: int, seed_key: str = "seed",
                      meta: Mapping[str, Any] | None = None, sketch: Sketch | None = None) -> Iterator[Grid]:
    """Record one run of a deployed ServerApp (``flwr run`` with a SuperLink) as run r of a dump.

    Inside a ServerApp's main function, around the strategy: the grid it yields records
    every client's arrays at every round, as :func:`record_runs` does in-process, when the
    run config asks for it, and is `grid` itself otherwise:

    - ``"mianalysis.dump"``: the dump folder, an absolute path (the ServerApp runs in a
      process and folder of Flower's choosing); ``""`` (the default) records nothing;
    - ``"mianalysis.run"``: r, the run of the dump this ``flwr run`` fills;
    - ``"mianalysis.runs"``: how many runs the dump holds.

    Each ``flwr run`` (with its own seed and run index) writes its run into the same dump
    (clients = the partition ids ``0 .. K - 1`` of the grid's K nodes, checkpoints = the
    rounds ``0 .. rounds``, one chunk per run). Nothing seeds the app's global generators
    in a deployment, so it writes the same samples as :func:`record_runs` on a
    :class:`LocalGrid` for the same seeds only when the app seeds every draw from
    ``context.run_config`` itself (docs/flower.md, "In a Flower deployment", point 2); the
    draws of an app relying on the global generators (which record_runs seeds) are not
    reproducible here. The dump's meta is `meta`
    plus the settings (nodes, rounds, and the run config without the seed and these
    entries): every run of one dump must have the same ones. As for :func:`record_runs`,
    it says what the clients of a run start from and share (``"init"``: :data:`RECORDED_INIT`;
    ``"shared"``: the global model of every round, random draws as the app seeds them),
    unless `meta` has these keys. Each run's seed (the run
    config's `seed_key`) is kept in the provenance record of the session that wrote it
    (``"flower": {"run": r, "seed": s}``), and a ``flwr run`` whose seed is that of a
    written run is refused before it trains (two runs of one seed would be the same run
    twice); a run config without `seed_key` is not checked. The ClientApp's replies must
    carry their partition id (:func:`mianalysis.flower.with_partition_id`), and every
    node must take part in every round.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid Flower gives the ServerApp.
    context : flwr.app.Context
        The ServerApp's context (its ``run_config`` holds the entries above).
    rounds : int
        Training rounds the app runs.
    seed_key : str, default="seed"
        The run-config key of the seed (left out of the dump's meta: it differs by run).
    meta : mapping, optional
        More entries for the dump's meta (JSON values).
    sketch : mianalysis.dumps.Sketch, optional
        Record each client's sketch instead of its arrays, as :func:`record_runs` does
        (give every ``flwr run`` of one dump the same sketch: another one is refused
        before the app trains).

    Yields
    ------
    flwr.serverapp.Grid
        A :class:`RecordingGrid` around `grid`, or `grid` when ``"mianalysis.dump"`` is
        absent or empty.

    Raises
    ------
    ValueError
        For a relative dump path, a run out of range or already written, a seed that a
        written run of the dump already has (as :func:`record_runs` refuses a repeated
        seed), a model sent in round 1 unlike the one the dump records or that `sketch`
        would keep whole (:meth:`RunRecorder.check_model`), and (after the strategy) a run
        with a missing (client, round) record, naming them; all but the last before the
        app trains.

    Examples
    --------
    In the ServerApp's main function::

        with record_deployment(grid, context, rounds=num_rounds) as grid:
            strategy.start(grid, initial_arrays, num_rounds=num_rounds)

    and, one ``flwr run`` per seed (the keys declared in pyproject.toml)::

        flwr run . local --run-config 'seed=3 mianalysis.dump="/data/dump" mianalysis.run=3 mianalysis.runs=40'
    """
    config = dict(context.run_config)
    out = config.get("mianalysis.dump", "")
    if not isinstance(out, str):
        raise TypeError(f"the run config's 'mianalysis.dump' must be a folder path (a string); got {out!r}")
    if not out:
        yield grid
        return
    if not os.path.isabs(out):
        raise ValueError(f"the run config's 'mianalysis.dump' must be an absolute path (the ServerApp runs in a "
                         f"process and folder of Flower's choosing); got {out!r}")
    runs = check_int(config.get("mianalysis.runs", 1), "mianalysis.runs", low=1)
    run = check_int(config.get("mianalysis.run", 0), "mianalysis.run", low=0, high=runs - 1)
    rounds = check_int(rounds, "rounds", low=1)
    num_partitions = len(list(grid.get_node_ids()))
    if num_partitions == 0:
        raise ValueError("the grid has no nodes: start the SuperNodes before `flwr run`")
    settings = {k: v for k, v in config.items() if k != seed_key and not k.startswith("mianalysis.")}
    meta = {"init": RECORDED_INIT, "shared": _SHARED_DEPLOYMENT, **dict(meta or {}),
            "flower": {"num_partitions": num_partitions, "rounds": rounds, "seed_key": seed_key,
                       "run_config": settings, "deployment": True}}
    seed = config.get(seed_key)  # None: the run config has no seed, so nothing to compare
    # The seed goes with this session's provenance record (meta is the same for every run).
    clients = [str(p) for p in range(num_partitions)]  # the partition ids, as the writer names clients
    with DumpWriter(out, clients=clients, checkpoints=range(rounds + 1), runs=runs, chunk_size=1,
                    meta=meta, provenance={"flower": {"run": run, "seed": seed}}, sketch=sketch) as writer:
        if writer.is_written(run):
            raise ValueError(f"run {run} of the dump {out} is already written: give this `flwr run` another "
                             f"'mianalysis.run' (runs not written yet: {writer.missing_runs()})")
        same = repeated_seeds({**_seeds_written(writer), run: seed}).get(seed, []) if seed is not None else []
        if same:  # as record_runs refuses a repeated seed
            other = next(r for r in same if r != run)
            raise ValueError(f"the run config's {seed_key!r} {seed!r} is the seed of run {other} of the dump {out}, "
                             f"already written (a repeated seed records the same run twice): give this `flwr run` "
                             f"another seed")
        recorder = RunRecorder(writer, run)
        yield RecordingGrid(grid, recorder)
        recorder.check_complete()


@contextlib.contextmanager
def _flower_messages(verbose):
    """Flower's logger at WARNING (unless `verbose`) inside the block, restored after it."""
    log = logging.getLogger("flwr")
    level = log.level
    if not verbose:
        log.setLevel(max(logging.WARNING, level))
    try:
        yield
    finally:
        log.setLevel(level)


__all__ = ["RunRecorder", "RecordingGrid", "record_runs", "record_deployment", "repeated_seeds", "DEPLOYMENT_CONFIG",
           "RECORDED_INIT"]
