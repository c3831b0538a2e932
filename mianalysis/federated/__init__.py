"""The federated-learning product line: a simulator of federated training, the aggregation
rules it compares, and recording of every client's model per round into a ParameterDump.

- :mod:`~mianalysis.federated.simulation`: :class:`FederatedSimulation` and its settings
  :class:`FederatedConfig` (rounds, client fraction, local epochs, aggregation rule,
  placement), replicates trained as one batched computation.
- :mod:`~mianalysis.federated.aggregation`: the rules (mean, median, trimmed mean, AND-mask,
  geometric mask, ...) as pure functions.
- :mod:`~mianalysis.federated.registry`: the rules, algorithms and placements by name, one
  entry each (:func:`get_rule`, :func:`register_rule`).
- :mod:`~mianalysis.federated.placement`: where the rule acts in a round, given what it
  needs of the run (:class:`~mianalysis.federated.placement.RoundContext`).
- :mod:`~mianalysis.federated.recording`: :func:`record_replicates` (a dump per round, for
  :func:`mianalysis.analyze`) and :func:`history_table`.
- :mod:`~mianalysis.federated.data`, :mod:`~mianalysis.federated.partition`,
  :mod:`~mianalysis.federated.environments`, :mod:`~mianalysis.federated.multitask`: the
  data sets the simulator splits between clients.
- :mod:`~mianalysis.federated.quadratic`: the gaussian-sgd task's clients as a federation
  (:class:`~mianalysis.federated.quadratic.QuadraticFederation`), where every rule's error
  to the exact optimum theta* is known.
- :mod:`~mianalysis.federated.models`, :mod:`~mianalysis.federated.personalized`,
  :mod:`~mianalysis.federated.diagnostics`, :mod:`~mianalysis.analysis.studies.global_dependence`:
  the models, personalised FL (FedRep, FedGradNorm), the EB criterion, and dependence given
  the global model.

Importing this package loads NumPy only; PyTorch is loaded by the parts that train.
"""

from .data import FederatedData
from .models import MODELS, build_model
from .._internal.io import write_rows
from .recording import history_rows, history_table, record_replicates
from .registry import get_rule, placement_names, register_rule, rule_names, unregister_rule
from .simulation import FederatedConfig, FederatedSimulation, SimulationResult, rounds_to_accuracy

__all__ = ["FederatedConfig", "FederatedData", "FederatedSimulation", "SimulationResult", "build_model", "record_replicates",
           "rounds_to_accuracy", "history_rows", "history_table", "write_rows", "get_rule", "register_rule", "unregister_rule",
           "rule_names", "placement_names", "MODELS"]
