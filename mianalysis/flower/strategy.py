"""FedRule: Flower's FedAvg with the clients' updates combined by a mianalysis aggregation rule."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from .._internal.validation import check_flag
from ..federated.aggregation import check_hessian_size
from ..federated.registry import SIDE_INFORMATION, Rule, get_rule, rule_names
from .records import flatten, named_arrays, partition_id, the_array_record, unflatten

LOG = logging.getLogger("flwr")


def reply_order(message: Message) -> tuple:
    """Sort key of a reply: by partition id when it carries one, then by node id."""
    pid = partition_id(message)
    return (pid is None, -1 if pid is None else pid, message.metadata.src_node_id)


def _reply_of(message: Message) -> str:
    """"the reply of node N" (with its client, the partition id, when it carries one)."""
    pid = partition_id(message)
    client = "" if pid is None else f" (client {pid})"
    return f"the reply of node {message.metadata.src_node_id}{client}"


class FedRule(FedAvg):
    """Federated training whose server step is a :mod:`mianalysis.federated.aggregation` rule.

    Every round the server sends the global model x (``configure_train``, as FedAvg); each
    client k trains and replies with its model x_k and its number of examples n_k. The
    server combines the updates d_k = x_k - x with the rule and steps:
    ``x_new = x + rule([d_1, ..., d_K], weights=[n_1, ..., n_K])``. All floating-point arrays
    of the model are flattened into one vector first, so a rule that looks at the whole
    update (the AND-mask's rescaling by the fraction of kept coordinates) sees all of it,
    as in :class:`mianalysis.federated.FederatedSimulation`.

    With ``rule="fedavg"`` this is Flower's FedAvg (the weighted mean of the models, up to
    rounding); ``"median"`` and ``"trimmed_mean"`` are the coordinate-wise robust rules
    (weighted by examples, unlike Flower's FedMedian and FedTrimmedAvg);
    ``"and_mask"`` and ``"geometric_mask"`` keep only the coordinates where the clients'
    updates agree in sign. The curvature rules ``"fisher"`` and ``"inverse_variance"``
    need one more array per client: each reply then carries, beside its model, a second
    ArrayRecord under `side_key` (default ``"fisher"``: the client's diagonal Fisher;
    ``"variances"``: the variance of its local iterates) with the model's array names and
    shapes, and the rule weights each coordinate of the updates by it. The full-curvature
    rules ``"fisher_full"`` and ``"newton_merge"`` (models of at most
    :data:`~mianalysis.federated.aggregation.MAX_HESSIAN_PARAMS` parameters) need the
    client's exact Hessian of its own objective at its trained model, the ArrayRecord
    ``"hessian"`` holding one (P, P) array over the flattened model (its floating-point
    arrays in the global model's order, each raveled), and ``"newton_merge"`` also its
    gradient there, the ArrayRecord ``"gradient"`` with the model's array names and shapes;
    :func:`mianalysis.flower.curvature_records` computes both for a PyTorch model. Both
    rules give the same model applied to the updates as to the models (their matrix weights
    sum to the identity; the gradients stay those at the clients' models).

    Replies are put in a fixed order (partition id, see
    :func:`mianalysis.flower.with_partition_id`, then node id) before they are combined, so
    the result does not depend on the order in which they arrive. Replies that carry an
    error are left out (and logged), as in FedAvg.

    Parameters
    ----------
    rule : str, default="fedavg"
        A rule of :mod:`mianalysis.federated.registry` (:func:`~mianalysis.federated.registry.rule_names`):
        "fedavg", "fedsgd", "median", "trimmed_mean", "and_mask", "geometric_mask", "fisher",
        "inverse_variance", "fisher_full", "newton_merge", or one registered with
        :func:`~mianalysis.federated.registry.register_rule`.
    rule_params : dict, optional
        The rule's settings, e.g. ``{"threshold": 0.5}`` for "and_mask" or
        ``{"beta": 0.2}`` for "trimmed_mean"; checked when the strategy is made.
    weighted : bool, default=True
        Weight each client by the value of `weighted_by_key` in its reply's MetricRecord
        (its number of examples), as FedAvg does; False gives every client the same weight.
    side_key : str or dict, optional
        For the rules with side information: the name of the reply's ArrayRecord with the
        client's precisions, variances or Hessian (default: the
        :data:`~mianalysis.federated.registry.SIDE_INFORMATION` entry's `record`, "fisher",
        "variances", "hessian"); for a rule with several ("newton_merge": hessians and
        gradients) a dict from each keyword to its record's name (those not given keep their
        default). The model is the reply's ArrayRecord under `arrayrecord_key` ("arrays"),
        or its one other ArrayRecord. Not allowed with the other rules.
    **fedavg_options
        Passed to :class:`flwr.serverapp.strategy.FedAvg`: ``fraction_train``,
        ``min_train_nodes``, ``weighted_by_key`` (default "num-examples"),
        ``arrayrecord_key``, ``train_metrics_aggr_fn``, ...

    Raises
    ------
    ValueError
        For an unknown `rule` or bad `rule_params` values; TypeError for settings the rule
        does not take.

    See Also
    --------
    mianalysis.federated.registry.get_rule : the rules by name.
    """

    def __init__(self, rule: str = "fedavg", *, rule_params: dict[str, Any] | None = None, weighted: bool = True,
                 side_key: str | Mapping[str, str] | None = None, **fedavg_options: Any) -> None:
        super().__init__(**fedavg_options)
        if not isinstance(rule, str):
            raise TypeError(f"`rule` must be the name of an aggregation rule; got {rule!r}")
        if rule_params is not None and not isinstance(rule_params, dict):
            raise TypeError(f"`rule_params` must be a dict of the rule's settings; got {rule_params!r}")
        entry = get_rule(rule, "rule")
        check_flag(weighted, "weighted")
        self.rule_name = rule
        self.rule_params = dict(rule_params or {})
        self.weighted = weighted
        #: The keyword of the rule's side information ("precisions", "variances", "hessians"),
        #: a tuple of keywords (("hessians", "gradients")), or None.
        self.side_information = entry.side_information
        # The rule's settings are checked now, not in the middle of a run.
        self.rule = entry.bind(self.rule_params, setting="rule_params", noun="rule")
        #: The reply's ArrayRecord of each side information, by the rule's keyword (empty: none).
        self.side_records = _side_records(entry, side_key)
        self.global_arrays: dict[str, np.ndarray] | None = None
        self.global_round: int | None = None

    def summary(self) -> None:
        """Log the strategy's settings (FedAvg's, then the rule)."""
        super().summary()
        LOG.info("\t└──> Aggregation rule: %s %s (%s)", self.rule_name, self.rule_params or "",
                 "weighted by " + repr(self.weighted_by_key) if self.weighted else "unweighted")

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """FedAvg's training messages; the global model is kept to compute the updates.
        A full-curvature rule refuses a global model above
        :data:`~mianalysis.federated.aggregation.MAX_HESSIAN_PARAMS` parameters here."""
        self.global_arrays = named_arrays(arrays)
        if any(SIDE_INFORMATION[key].square for key in self.side_records):
            check_hessian_size(sum(int(np.prod(a.shape)) for a in self.global_arrays.values()), "the global model")
        self.global_round = server_round
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The global model after one step of the rule on the clients' updates, and the
        clients' training metrics aggregated as FedAvg does (None if there are no replies)."""
        replies = list(replies)
        valid = sorted((m for m in replies if not m.has_error()), key=reply_order)
        for m in replies:
            if m.has_error():
                LOG.info("\t> Received error in reply from node %d: %s", m.metadata.src_node_id, m.error.reason)
        if not valid:
            return None, None
        if self.global_arrays is None or self.global_round != server_round:
            raise RuntimeError(f"aggregate_train for round {server_round} without configure_train for that round: "
                               "FedRule needs the global model the clients started from")
        if self.side_records:
            return self._aggregate_with_side_information(valid), self._metrics(valid)
        base = flatten(self.global_arrays, self.global_arrays, what="the global model")
        updates = np.stack([flatten(named_arrays(the_array_record(m)), self.global_arrays, what=_reply_of(m)) - base
                            for m in valid])
        weights = np.array([self._weight(m) for m in valid]) if self.weighted else None
        step = self.rule(updates, weights=weights)
        arrays = unflatten(base + step, self.global_arrays)
        return arrays, self._metrics(valid)

    def _aggregate_with_side_information(self, valid: list[Message]) -> ArrayRecord:
        """One step of a curvature rule: each reply holds its model and an ArrayRecord per
        side information (:attr:`side_records`): named and shaped as the model, or one
        (P, P) matrix for the Hessians."""
        assert self.global_arrays is not None
        base = flatten(self.global_arrays, self.global_arrays, what="the global model")
        updates: list[np.ndarray] = []
        side: dict[str, list[np.ndarray]] = {key: [] for key in self.side_records}
        names = set(self.side_records.values())
        for m in valid:
            node, reply = m.metadata.src_node_id, _reply_of(m)
            records = m.content.array_records
            for key, name in self.side_records.items():
                if name not in records:
                    shaped = ("as one (P, P) array over the flattened model" if SIDE_INFORMATION[key].square else
                              "with the model's array names and shapes")
                    raise ValueError(f"the reply of node {node} has no ArrayRecord {name!r} ({sorted(records)}); "
                                     f"the rule {self.rule_name!r} needs each client's {key} there, {shaped}")
            models = [k for k in records if k not in names]
            if self.arrayrecord_key in models:  # the model under FedAvg's key; other records are not read
                models = [self.arrayrecord_key]
            if len(models) != 1:
                raise ValueError(f"the reply of node {node} holds ArrayRecords {sorted(records)}; expected the model "
                                 f"({self.arrayrecord_key!r}) and "
                                 f"{', '.join(repr(n) for n in self.side_records.values())}")
            updates.append(flatten(named_arrays(records[models[0]]), self.global_arrays, what=reply) - base)
            for key, name in self.side_records.items():
                what = f"the {name!r} record of node {node}"
                side[key].append(_matrix(records[name], base.size, what) if SIDE_INFORMATION[key].square
                                 else flatten(named_arrays(records[name]), self.global_arrays, what=what))
        weights = np.array([self._weight(m) for m in valid]) if self.weighted else None
        step = self.rule(np.stack(updates), weights=weights, **{key: np.stack(v) for key, v in side.items()})
        return unflatten(base + step, self.global_arrays)

    def _weight(self, message: Message) -> float:
        """The value of `weighted_by_key` in the reply's one MetricRecord."""
        node = message.metadata.src_node_id
        records = message.content.metric_records
        if len(records) != 1:
            raise ValueError(f"the reply of node {node} holds {len(records)} MetricRecords; expected exactly one "
                             f"with {self.weighted_by_key!r} (or make the strategy with weighted=False)")
        record = next(iter(records.values()))
        value = record.get(self.weighted_by_key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"the reply of node {node} has no number {self.weighted_by_key!r} in its MetricRecord "
                             f"(got {value!r}); send the client's number of examples, or use weighted=False")
        return float(value)

    def _metrics(self, valid: list[Message]) -> MetricRecord | None:
        """FedAvg's aggregate of the training metrics, when every reply can be weighted."""
        contents = [m.content for m in valid]
        if all(len(c.metric_records) == 1 and self.weighted_by_key in next(iter(c.metric_records.values()))
               for c in contents):
            return self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        return None


def _matrix(record: ArrayRecord, size: int, what: str) -> np.ndarray:
    """The one (size, size) floating-point array of `record` (float64); ValueError naming `what`."""
    arrays = named_arrays(record)
    if len(arrays) != 1:
        raise ValueError(f"{what} holds arrays {sorted(arrays)}; expected one ({size}, {size}) matrix over the "
                         "flattened model")
    matrix = np.asarray(next(iter(arrays.values())))
    if matrix.dtype.kind != "f" or matrix.shape != (size, size):
        raise ValueError(f"{what} holds an array of shape {matrix.shape} and dtype {matrix.dtype}; expected a "
                         f"floating-point ({size}, {size}) matrix over the flattened model (its {size} parameters)")
    return matrix.astype(np.float64, copy=False)


def _side_records(entry: Rule, side_key: str | Mapping[str, str] | None) -> dict[str, str]:
    """The ArrayRecord name of each of the rule's side information, by its keyword ({} for none)."""
    keys = entry.side_arguments
    if not keys:
        if side_key is not None:
            needing = sorted(n for n in rule_names() if get_rule(n).side_information is not None)
            raise ValueError(f"`side_key` is only for the rules that need side information "
                             f"({needing}); the rule {entry.name!r} takes none")
        return {}
    records = {key: SIDE_INFORMATION[key].record for key in keys}
    if side_key is None:
        return records
    if isinstance(side_key, Mapping):
        unknown = sorted(set(side_key) - set(keys))
        if unknown:
            raise ValueError(f"`side_key` names {unknown}; the rule {entry.name!r} takes {list(keys)}")
        given = dict(side_key)
    elif len(keys) == 1:
        given = {keys[0]: side_key}
    else:
        raise TypeError(f"`side_key` for the rule {entry.name!r} must be a dict from its side information "
                        f"{list(keys)} to ArrayRecord names; got {side_key!r}")
    for name in given.values():
        if not isinstance(name, str) or not name:
            raise TypeError(f"`side_key` must name non-empty strings, the names of ArrayRecords; got {name!r}")
    records |= given
    if len(set(records.values())) != len(records):
        raise ValueError(f"`side_key` gives two side informations the same ArrayRecord: {records}")
    return records


__all__ = ["FedRule"]
