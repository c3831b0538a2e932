"""The aggregation rules, FL algorithms and placements the package knows, one entry each.

Adding an aggregation rule is one :func:`register_rule` call (plus its tests): the entry
says which function combines the clients' messages, which parameters it takes (with their
types and defaults), how figures name it and which side information, if any, every client
must send with its message. :class:`mianalysis.federated.FederatedConfig` and
:class:`~mianalysis.federated.FederatedSimulation`, the Flower strategy
(:class:`mianalysis.flower.FedRule`) and the command line (``federate --aggregator``,
``--algorithm``, ``--placement``) read the entries and know no rule, algorithm or placement
by name otherwise.

The algorithms ("fedavg", "fedsgd") say what a client sends; the placements ("update",
"step") where the rule acts in a round and which algorithms they need. Both are fixed sets:
the simulator trains clients in these ways only.

Examples
--------
>>> from mianalysis.federated.registry import get_rule, rule_names
>>> rule_names()[:3]
('fedavg', 'fedsgd', 'median')
>>> entry = get_rule("trimmed_mean")
>>> entry.display_name, entry.defaults
('Trimmed mean', {'beta': 0.1})
>>> get_rule("fisher").side_information
'precisions'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.validation import check_choice, check_flag
from .aggregation import (and_mask, fedavg, fedsgd, fisher_full, fisher_weighted, geometric_mask, inverse_variance,
                          median, newton_merge, trimmed_mean)
from .placement import step_round, update_round

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["SideInformation", "SIDE_INFORMATION", "RuleParameter", "Rule", "register_rule", "unregister_rule",
           "get_rule", "rule_names", "Algorithm", "get_algorithm", "algorithm_names", "Placement", "get_placement",
           "placement_names"]


@dataclass(frozen=True)
class SideInformation:
    """One kind of array every client computes on its own data and sends beside its message.

    Attributes
    ----------
    argument : str
        The keyword under which a rule takes the clients' arrays, stacked as its `stacked`.
    computed : str
        What each client computes (as :meth:`FederatedSimulation.describe` records it).
    record : str
        The default name of the ArrayRecord that carries it in a Flower reply
        (:class:`mianalysis.flower.FedRule`'s `side_key`).
    square : bool
        False: one array per client of the shape of its message (named and shaped as the
        model in a Flower reply). True: one (n_params, n_params) matrix per client over the
        flattened model (a Flower reply's record holds that one array).
    """

    argument: str
    computed: str
    record: str
    square: bool = False


#: The side information the simulator computes, by the keyword a rule takes it under: each
#: client's diagonal empirical Fisher ("precisions"), the variance of its local iterates
#: ("variances") or its gradient ("gradients"), of the shape of the clients' messages, and
#: its exact Hessian ("hessians", one (n_params, n_params) matrix per client).
SIDE_INFORMATION = {
    "precisions": SideInformation(
        "precisions", "each client's diagonal empirical Fisher at its final local model in the round: the mean over "
                      "its examples of the squared per-example gradients of the loss", "fisher"),
    "variances": SideInformation(
        "variances", "the per-coordinate variance of each client's local iterates over its last local epoch of the "
                     "round (the model at the start of that epoch and after each of its steps, divided by their "
                     "number)", "variances"),
    "hessians": SideInformation(
        "hessians", "each client's exact Hessian of its own objective (the mean loss over its examples) at its final "
                    "local model in the round, an (n_params, n_params) matrix (torch.func, float64)", "hessian",
        square=True),
    "gradients": SideInformation(
        "gradients", "each client's gradient of its own objective (the mean loss over its examples) at its final "
                     "local model in the round (float64)", "gradient"),
}


@dataclass(frozen=True)
class RuleParameter:
    """One setting of an aggregation rule: its name, type and default (the function's)."""

    name: str
    type: type
    default: Any


@dataclass(frozen=True)
class Rule:
    """One aggregation rule, as the simulator, the Flower strategy, the CLI and figures use it.

    Attributes
    ----------
    name : str
        The name users pass (``aggregator="median"``, ``--aggregator median``, ``FedRule("median")``).
    function : callable
        ``function(stacked, weights=None, **parameters, **side) -> vector``: a rule of
        :mod:`mianalysis.federated.aggregation`'s shape (clients' messages (..., K, P) in,
        one (..., P) out).
    display_name : str
        How a figure or table names it ("AND-mask").
    parameters : tuple of RuleParameter
        Its settings. Given as a mapping name -> type (``{"beta": float}``): each must be a
        keyword of `function` with a default, which the entry records.
    side_information : str or tuple of str, optional
        A key of :data:`SIDE_INFORMATION` ("precisions", "variances", "hessians",
        "gradients"): the keyword of the per-client array `function` also takes; a tuple of
        keys for a rule that takes several ("newton_merge": ``("hessians", "gradients")``; a
        tuple of one key is stored as that key). None: the rule needs nothing but the messages.
    """

    name: str
    function: Callable[..., Any]
    display_name: str
    parameters: tuple[RuleParameter, ...] = ()
    side_information: str | tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a rule's `name` must be an identifier; got {self.name!r}")
        if not callable(self.function):
            raise TypeError(f"rule {self.name!r}: `function` must be callable; got {self.function!r}")
        signature = inspect.signature(self.function).parameters
        if "weights" not in signature:
            raise ValueError(f"rule {self.name!r}: `function` must take `weights` (one per client, or None)")
        parameters = self.parameters
        if isinstance(parameters, Mapping):
            empty = inspect.Parameter.empty
            parameters = tuple(RuleParameter(name, kind, getattr(signature.get(name), "default", empty))
                               for name, kind in parameters.items())
        for p in parameters:
            if not isinstance(p, RuleParameter) or not isinstance(p.type, type):
                raise TypeError(f"rule {self.name!r}: `parameters` must map each setting's name to its type; got {p!r}")
            if p.name not in signature or p.default is inspect.Parameter.empty:
                raise ValueError(f"rule {self.name!r}: parameter {p.name!r} must be a keyword of `function` with a "
                                 "default")
        object.__setattr__(self, "parameters", tuple(parameters))
        side = self.side_information
        if isinstance(side, (tuple, list)):
            if not side or len(set(side)) != len(side):
                raise ValueError(f"rule {self.name!r}: `side_information` must name distinct keys; got {side!r}")
            side = side[0] if len(side) == 1 else tuple(side)
            object.__setattr__(self, "side_information", side)
        for key in self.side_arguments:
            check_choice(key, "side_information", sorted(SIDE_INFORMATION))
            if key not in signature:
                raise ValueError(f"rule {self.name!r}: `function` must take its side information `{key}`")

    @property
    def side_arguments(self) -> tuple[str, ...]:
        """The keywords of the rule's side information, in order (empty: none)."""
        side = self.side_information
        return () if side is None else (side,) if isinstance(side, str) else tuple(side)

    @property
    def defaults(self) -> dict[str, Any]:
        """Every parameter's default, by name."""
        return {p.name: p.default for p in self.parameters}

    def bind(self, params: Mapping[str, Any] | None = None, *, setting: str = "aggregator_params",
             noun: str = "aggregator") -> Callable[..., np.ndarray | torch.Tensor]:
        """The rule with `params` bound, its settings checked now.

        Parameters
        ----------
        params : dict, optional
            Settings of the rule (names of :attr:`parameters`), e.g. ``{"threshold": 0.5}``.
        setting, noun : str
            How error messages name `params` and the rule (``"`aggregator_params` {...} do
            not fit the aggregator 'median'"``).

        Returns
        -------
        callable
            ``aggregate(stacked, weights=None, **side) -> vector``; for a rule with side
            information ``side`` holds one array per key of :attr:`side_arguments`.

        Raises
        ------
        TypeError
            For settings the rule does not take (or of a type it refuses).
        ValueError
            For values the rule refuses (a `threshold` outside [0, 1]).
        """
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise TypeError(f"`{setting}` must be a dict of the {noun}'s settings; got {params!r}")
        params = dict(params)
        unknown = sorted(set(params) - {p.name for p in self.parameters})
        if unknown:
            takes = ", ".join(f"{p.name} ({p.type.__name__}, default {p.default!r})" for p in self.parameters)
            raise TypeError(f"`{setting}` {params} do not fit the {noun} {self.name!r}: it takes "
                            f"{takes or 'no settings'}; got {unknown}")
        rule = self.function

        def aggregate(stacked, weights=None, **side):
            return rule(stacked, weights=weights, **params, **side)

        aggregate.__name__ = self.name
        side = {key: np.ones((1, 1, 1) if SIDE_INFORMATION[key].square else (1, 1)) for key in self.side_arguments}
        try:  # the rule's settings (a `threshold` in [0, 1], a `rescale` flag, an `eps`) are checked now
            aggregate(np.zeros((1, 1)), **side)
        except TypeError as exc:
            raise type(exc)(f"`{setting}` {params} do not fit the {noun} {self.name!r}: {exc}") from None
        return aggregate


_RULES: dict[str, Rule] = {}


def register_rule(entry: Rule | None = None, /, *, replace: bool = False, **fields: Any) -> Rule:
    """Add an aggregation rule to the registry (a :class:`Rule`, or its fields as keywords).

    The rule is then a choice of :class:`~mianalysis.federated.FederatedConfig`'s
    `aggregator`, of ``mianalysis federate --aggregator`` and of
    :class:`mianalysis.flower.FedRule`. With ``replace=True`` an entry of the same name is
    replaced where it stands.

    Returns
    -------
    Rule
        The entry registered.

    Raises
    ------
    ValueError
        If the name is registered already (:func:`unregister_rule` it first).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.federated.registry import get_rule, register_rule, unregister_rule
    >>> def shrunk_mean(stacked, weights=None, factor=0.5):  # the mean, shrunk towards 0
    ...     return factor * np.average(np.asarray(stacked), axis=-2, weights=weights)
    >>> entry = register_rule(name="shrunk_mean", function=shrunk_mean, display_name="Shrunk mean",
    ...                       parameters={"factor": float})
    >>> get_rule("shrunk_mean").bind({"factor": 0.1})(np.array([[1.0, 2.0], [3.0, 4.0]]))
    array([0.2, 0.3])
    >>> unregister_rule("shrunk_mean").name
    'shrunk_mean'
    """
    if entry is None:
        entry = Rule(**fields)
    elif fields:
        raise TypeError("register_rule takes a Rule or its fields as keywords, not both")
    if not isinstance(entry, Rule):
        raise TypeError(f"register_rule expects a Rule; got {entry!r}")
    check_flag(replace, "replace")
    if entry.name in _RULES and not replace:
        raise ValueError(f"rule {entry.name!r} is registered already; unregister_rule({entry.name!r}) first")
    _RULES[entry.name] = entry
    return entry


def unregister_rule(name: str) -> Rule:
    """Remove rule `name` from the registry and return its entry."""
    return _RULES.pop(get_rule(name).name)


def get_rule(name: str, parameter: str = "aggregator") -> Rule:
    """The entry of rule `name`; a ValueError naming `parameter` and the known rules
    (sorted) when there is none."""
    if not isinstance(name, str) or name not in _RULES:
        check_choice(name, parameter, sorted(_RULES))
    return _RULES[name]


def rule_names() -> tuple[str, ...]:
    """The registered rules' names, in the order they were registered."""
    return tuple(_RULES)


@dataclass(frozen=True)
class Algorithm:
    """One federated algorithm: what a client sends the server each round.

    Attributes
    ----------
    name : str
    display_name : str
    sends : {"update", "gradient"}
        "update": the client trains E local epochs from the global model and sends its
        model update, which the server adds after combining; "gradient": the client sends
        its full-batch gradient at the global model and the server takes one step of `lr`.
    description : str
        One line for help texts.
    """

    name: str
    display_name: str
    sends: str
    description: str

    def __post_init__(self) -> None:
        check_choice(self.sends, "sends", ("update", "gradient"))


@dataclass(frozen=True)
class Placement:
    """Where the rule acts in a round.

    Attributes
    ----------
    name : str
    display_name : str
    function : callable
        ``function(context, params, flat, clients, replicate_ids, round_index, weights)``,
        one round (:mod:`mianalysis.federated.placement`; `context` a
        :class:`~mianalysis.federated.placement.RoundContext`).
    description : str
        What it does, as help texts and error messages say it ("applies the rule to ...").
    algorithms : tuple of str, optional
        The algorithms it works with; None: any.
    records_local_models : bool
        Whether each client ends a round with a model of its own (that recordings store).
    side_information : bool
        Whether its clients can send side information (the curvature rules need it).
    """

    name: str
    display_name: str
    function: Callable[..., tuple[Any, Any, list[float]]] = field(repr=False)
    description: str
    algorithms: tuple[str, ...] | None = None
    records_local_models: bool = True
    side_information: bool = True


_ALGORITHMS = {a.name: a for a in (
    Algorithm("fedavg", "FedAvg", "update", "clients train E epochs and send their model update"),
    Algorithm("fedsgd", "FedSGD", "gradient",
              "clients send one full-batch gradient at the global model; the server takes one step"),
)}

_PLACEMENTS = {p.name: p for p in (
    Placement("update", "after local training", update_round,
              "applies the rule to what the clients send at the end of a round"),
    Placement("step", "at every step", step_round,
              "applies the rule to per-client gradients at every step of a FedSGD-style round",
              algorithms=("fedsgd",), records_local_models=False, side_information=False),
)}


def get_algorithm(name: str) -> Algorithm:
    """The entry of algorithm `name`; a ValueError naming ``algorithm`` when there is none."""
    if not isinstance(name, str) or name not in _ALGORITHMS:
        check_choice(name, "algorithm", algorithm_names())
    return _ALGORITHMS[name]


def algorithm_names() -> tuple[str, ...]:
    """The algorithms' names: ("fedavg", "fedsgd")."""
    return tuple(_ALGORITHMS)


def get_placement(name: str) -> Placement:
    """The entry of placement `name`; a ValueError naming ``placement`` when there is none."""
    if not isinstance(name, str) or name not in _PLACEMENTS:
        check_choice(name, "placement", placement_names())
    return _PLACEMENTS[name]


def placement_names() -> tuple[str, ...]:
    """The placements' names: ("update", "step")."""
    return tuple(_PLACEMENTS)


# The built-in rules (mianalysis.federated.aggregation).
register_rule(name="fedavg", function=fedavg, display_name="FedAvg")
register_rule(name="fedsgd", function=fedsgd, display_name="FedSGD")
register_rule(name="median", function=median, display_name="Median")
register_rule(name="trimmed_mean", function=trimmed_mean, display_name="Trimmed mean", parameters={"beta": float})
register_rule(name="and_mask", function=and_mask, display_name="AND-mask",
              parameters={"threshold": float, "rescale": bool})
register_rule(name="geometric_mask", function=geometric_mask, display_name="Geometric mask",
              parameters={"threshold": float, "rescale": bool})
register_rule(name="fisher", function=fisher_weighted, display_name="Fisher", parameters={"eps": float},
              side_information="precisions")
register_rule(name="inverse_variance", function=inverse_variance, display_name="Inverse variance",
              parameters={"eps": float}, side_information="variances")
register_rule(name="fisher_full", function=fisher_full, display_name="Fisher (full Hessian)",
              parameters={"eps": float}, side_information="hessians")
register_rule(name="newton_merge", function=newton_merge, display_name="Newton merge", parameters={"eps": float},
              side_information=("hessians", "gradients"))
