"""Flower integration: aggregation rules as a Flower strategy, and Flower runs recorded as dumps.

This package is the optional extra ``mianalysis[flower]`` (Flower >= 1.42, Python >= 3.11);
``import mianalysis`` never imports it or Flower.

- :class:`FedRule` -- a strategy for Flower's ServerApp API (``flwr.serverapp.strategy``)
  that combines the clients' updates with any rule of :mod:`mianalysis.federated.aggregation`.
- :func:`curvature_records` -- a ClientApp's exact Hessian and gradient of its own loss, the
  records :class:`FedRule`'s full-curvature rules ("fisher_full", "newton_merge") read.
- :class:`LocalGrid` -- a Flower ``Grid`` that runs a ClientApp's handlers in this process,
  one node per partition: no SuperLink, no simulation engine, no network.
- :class:`RecordingGrid` and :class:`RunRecorder` -- record every client's trained arrays at
  every round through a dump writer (:class:`mianalysis.DumpWriter`; client =
  partition id, checkpoint = round), one run at a time.
- :func:`record_runs` -- run one Flower app for several seeds into a dump of as many runs,
  ready for ``mianalysis analyze`` (``sketch=``: each client's sketch,
  :class:`mianalysis.dumps.Sketch`, instead of its arrays, for large models).
- :func:`record_deployment` -- inside a deployed ServerApp (``flwr run`` with a SuperLink),
  record that run as run r of a dump, when the run config names one.
- :func:`with_partition_id` and :func:`partition_id` -- how a ClientApp's reply says which
  partition (client) it comes from.
"""

try:
    import flwr  # noqa: F401
except ImportError as exc:
    if exc.name is not None and exc.name.split(".")[0] != "flwr":
        raise
    raise ImportError("mianalysis.flower needs Flower (Python >= 3.11): pip install 'mianalysis[flower]'") from None

from .curvature import curvature_records
from .grid import LocalGrid
from .recorder import DEPLOYMENT_CONFIG, RecordingGrid, RunRecorder, record_deployment, record_runs
from .records import partition_id, with_partition_id
from .strategy import FedRule

__all__ = ["DEPLOYMENT_CONFIG", "FedRule", "LocalGrid", "curvature_records", "RecordingGrid", "RunRecorder", "partition_id",
           "record_deployment", "record_runs", "with_partition_id"]
