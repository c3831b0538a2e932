"""Flower records <-> flat parameter vectors, and the partition id a ClientApp's reply carries."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

__all__ = ["with_partition_id", "partition_id", "PARTITION_KEY"]

# Flower's own node-config key for a simulated or deployed node's data partition.
PARTITION_KEY = "partition-id"
# The reply's ConfigRecord that names the client (one more record beside "arrays" and "metrics").
CLIENT_RECORD = "client"


def with_partition_id(content: RecordDict, context: Context) -> RecordDict:
    """Add the node's partition id to a ClientApp's reply `content`, and return it.

    The id is read from ``context.node_config["partition-id"]`` (the key Flower's
    simulation and ``flower-supernode --node-config`` use) and stored as the ConfigRecord
    ``content["client"]``, where :func:`partition_id` finds it. Flower's strategies only
    read the reply's ArrayRecord and MetricRecord, so the extra record changes nothing for
    them.

    Parameters
    ----------
    content : RecordDict
        The reply's content (e.g. ``{"arrays": ..., "metrics": ...}``).
    context : Context
        The ClientApp's context.

    Returns
    -------
    RecordDict
        `content`, with ``content["client"] = ConfigRecord({"partition-id": id})``.
    """
    if PARTITION_KEY not in context.node_config:
        raise ValueError(f"the node's config has no {PARTITION_KEY!r} (it has {sorted(context.node_config)}); start "
                         f"the node with --node-config \"{PARTITION_KEY}=<int> num-partitions=<int>\"")
    content[CLIENT_RECORD] = ConfigRecord({PARTITION_KEY: int(context.node_config[PARTITION_KEY])})
    return content


def partition_id(message: Message) -> int | None:
    """The partition id a reply carries (see :func:`with_partition_id`), or None."""
    if not message.has_content():
        return None
    record = message.content.config_records.get(CLIENT_RECORD)
    if record is None or PARTITION_KEY not in record:
        return None
    return int(record[PARTITION_KEY])


def the_array_record(message: Message) -> ArrayRecord:
    """The one ArrayRecord of a reply; ValueError naming the node if there is not exactly one."""
    records = message.content.array_records
    if len(records) != 1:
        raise ValueError(f"the reply of node {message.metadata.src_node_id} holds {len(records)} ArrayRecords "
                         f"({sorted(records)}); expected exactly one")
    return next(iter(records.values()))


def named_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The arrays of `record` as NumPy arrays, by name, in the record's order."""
    return {name: array.numpy() for name, array in record.items()}


def flatten(arrays: dict[str, np.ndarray], like: dict[str, np.ndarray], *, what: str) -> np.ndarray:
    """The arrays named as in `like` (the global model), raveled and concatenated in its order (float64).

    ValueError naming `what` (e.g. "the reply of node 3") if the names differ or an array's
    shape is not its shape in `like` (the same numbers in other shapes would be averaged
    coordinate by coordinate with the wrong ones); TypeError for an array that is not
    floating point (an aggregation rule averages real numbers)."""
    names = list(like)
    if sorted(arrays) != sorted(names):
        raise ValueError(f"{what} has arrays {sorted(arrays)}; expected {sorted(names)}")
    parts = []
    for name in names:
        a = np.asarray(arrays[name])
        if a.dtype.kind != "f":
            raise TypeError(f"{what}: array {name!r} has dtype {a.dtype}; only floating-point arrays can be "
                            "aggregated or recorded (send the model's parameters, e.g. "
                            "ArrayRecord(dict(model.named_parameters())), not integer buffers)")
        expected = tuple(np.shape(like[name]))
        if a.shape != expected:
            raise ValueError(f"{what}: array {name!r} has shape {a.shape}; the global model's {name!r} has shape "
                             f"{expected} (a client must send back the arrays it received, trained, in their shapes)")
        parts.append(a.astype(np.float64, copy=False).ravel())
    return np.concatenate(parts)


def unflatten(vector: np.ndarray, like: dict[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord with the names, shapes and dtypes of `like` filled from `vector`."""
    out, offset = {}, 0
    for name, a in like.items():
        size = int(np.prod(a.shape))
        out[name] = Array(np.ascontiguousarray(vector[offset:offset + size].reshape(a.shape).astype(a.dtype)))
        offset += size
    return ArrayRecord(out)
