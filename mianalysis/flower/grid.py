"""LocalGrid: a Flower Grid whose nodes are ClientApp calls in this process."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from typing import Any

from flwr.app import Context, Message, Metadata, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from .._internal.validation import check_int
from .records import PARTITION_KEY
from .seeding import CLIENT_STREAM, seeded_globals

SERVER_NODE_ID = 1  # the node id Flower gives the server side (SuperLink)
FIRST_NODE_ID = 1000  # partition p is node FIRST_NODE_ID + p: never a partition id itself


class LocalGrid(Grid):
    """A Flower ``Grid`` that delivers each message by calling a ClientApp in this process.

    Partition p (``0 <= p < num_partitions``) is one node, node id ``1000 + p``, with its
    own :class:`flwr.app.Context` kept for the whole run: ``node_config`` holds
    ``"partition-id": p`` and ``"num-partitions"`` (the keys Flower's simulation sets), and
    ``run_config`` the given `run_config`. Messages are delivered one node at a time in
    the order they are pushed, each as a copy (a ClientApp that changes what it receives
    cannot change what another node receives), and the ClientApp's reply is what
    :meth:`pull_messages` returns. Nothing is started: no SuperLink, no SuperNode, no
    simulation engine, no network. An exception in the ClientApp is raised here (Flower's
    runtime would turn it into an error reply), so a failing client stops the run at once.

    Use it as a context manager around the server side: inside ``with``, this process has
    the identity Flower's runtime gives a ServerApp (run id, the server's node id), which
    Flower's ``Message`` constructor reads; the previous identity is restored on exit.

    Parameters
    ----------
    client_app : flwr.clientapp.ClientApp
        The app every node runs.
    num_partitions : int
        Number of nodes (clients).
    run_config : mapping, optional
        The run's config, seen by the ClientApp as ``context.run_config`` (give the
        ServerApp the same values in its own Context).
    node_config : mapping, optional
        More entries for every node's ``context.node_config``.
    run_id : int, default=1
    seed : int, optional
        The run's seed. When given, every ClientApp call runs with Python's ``random``,
        NumPy's global generator and PyTorch's CPU generator seeded from (`seed`,
        partition, how many messages the node received before), and the caller's states
        restored afterwards: an app that draws from those generators without reading a
        seed gets a different, reproducible stream for every seed, node and message, as
        a deployed node's fresh ClientApp process would get a fresh one.

    Examples
    --------
    Run a strategy, or a ServerApp, on three local clients::

        with LocalGrid(client_app, 3) as grid:
            result = strategy.start(grid, initial_arrays, num_rounds=5)
            # or: server_app(grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={}))

    :func:`mianalysis.flower.record_runs` does this once per seed.
    """

    def __init__(self, client_app: ClientApp, num_partitions: int, *, run_config: Mapping[str, Any] | None = None,
                 node_config: Mapping[str, Any] | None = None, run_id: int = 1, seed: int | None = None) -> None:
        if not isinstance(client_app, ClientApp):
            raise TypeError(f"`client_app` must be a flwr.clientapp.ClientApp; got {type(client_app).__name__}")
        num_partitions = check_int(num_partitions, "num_partitions", low=1)
        self.client_app = client_app
        self.run_config = dict(run_config or {})
        self.seed = None if seed is None else check_int(seed, "seed", low=0)
        self._run = Run.create_empty(check_int(run_id, "run_id", low=0))
        self.contexts = {
            FIRST_NODE_ID + p: Context(run_id=self._run.run_id, node_id=FIRST_NODE_ID + p,
                                       node_config={**dict(node_config or {}), PARTITION_KEY: p,
                                                    "num-partitions": num_partitions},
                                       state=RecordDict(), run_config=dict(self.run_config))
            for p in range(num_partitions)}
        self._replies: dict[str, Message] = {}
        self._sent = 0
        self._received = dict.fromkeys(self.contexts, 0)  # messages delivered to each node
        self._saved_identity: list[tuple[int | None, int | None, int | None]] = []

    def __enter__(self) -> LocalGrid:
        saved = []
        for name in ("task_id", "run_id", "node_id"):
            try:
                saved.append(getattr(TaskIdentity, name))
            except RuntimeError:  # not set: this process is no Flower task yet
                saved.append(None)
        self._saved_identity.append(tuple(saved))
        TaskIdentity.task_id = 1
        TaskIdentity.run_id = self._run.run_id
        TaskIdentity.node_id = SERVER_NODE_ID
        return self

    def __exit__(self, *exc_info: object) -> None:
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = self._saved_identity.pop()

    def partition_of(self, node_id: int) -> int:
        """The partition id of node `node_id`."""
        if node_id not in self.contexts:
            raise ValueError(f"no node {node_id} in this grid (nodes {min(self.contexts)}-{max(self.contexts)})")
        return int(self.contexts[node_id].node_config[PARTITION_KEY])

    def set_run(self, run: Run) -> None:
        """Set the run this grid operates in."""
        if not isinstance(run, Run):
            raise TypeError(f"`run` must be a flwr Run; got {type(run).__name__}")
        self._run = run

    @property
    def run(self) -> Run:
        """The run this grid operates in."""
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        """A new message to node `dst_node_id` (Flower's ``Message`` constructor does the same)."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        """The node ids, in partition order."""
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Deliver each message to its node's ClientApp now; returns the ids to pull the replies with."""
        ids = []
        for message in messages:
            if not isinstance(message, Message):
                raise TypeError(f"expected flwr Messages; got {type(message).__name__}")
            node = message.metadata.dst_node_id
            if node not in self.contexts:
                raise ValueError(f"message to node {node}, which is not in this grid (nodes "
                                 f"{min(self.contexts)}-{max(self.contexts)})")
            self._sent += 1
            message_id = f"local-{self._sent}"
            delivered = Message(content=copy.deepcopy(message.content), metadata=Metadata(
                run_id=self._run.run_id, message_id=message_id, src_node_id=SERVER_NODE_ID, dst_node_id=node,
                reply_to_message_id="", group_id=message.metadata.group_id, created_at=time.time(),
                ttl=message.metadata.ttl, message_type=message.metadata.message_type))
            reply = self._call(delivered, node)
            if not isinstance(reply, Message):
                raise TypeError(f"the ClientApp returned {type(reply).__name__} for a "
                                f"{message.metadata.message_type!r} message; expected a flwr Message")
            self._replies[message_id] = reply
            ids.append(message_id)
        return ids

    def _call(self, message: Message, node: int) -> Message:
        """The ClientApp's reply to `message` on `node` (with the global generators seeded, given a seed)."""
        count, self._received[node] = self._received[node], self._received[node] + 1
        if self.seed is None:
            return self.client_app(message, self.contexts[node])
        with seeded_globals(self.seed, CLIENT_STREAM, self.partition_of(node), count):
            return self.client_app(message, self.contexts[node])

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The replies to the messages `message_ids` (each returned once)."""
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Deliver `messages` and return the replies, in the order sent (`timeout` is not needed)."""
        return self.pull_messages(self.push_messages(messages))


__all__ = ["LocalGrid"]
