"""The typed table of a federated run's history (``federate``'s ``history.csv``): the global
model's metrics per round, mean and sd over the replicates
(:func:`mianalysis.federated.recording.history_rows`), with its sidecar."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypedDict

import numpy as np

from ..schema import Column
from ..study_table import StudySchema, StudyTable

__all__ = ["HistoryRow", "HISTORY_TABLE", "write_history_table"]

_LOSS = "the task's loss (cross-entropy or MSE)"
_SD = "Its sd over the replicates (ddof 1; 0 for one replicate)."


class HistoryRow(TypedDict):
    """One row of :func:`mianalysis.federated.recording.history_rows`: the global model's metrics in one round, mean and sd
    over the replicates. The fields, in the CSV's order, are the columns of
    :data:`HISTORY_TABLE`; a run without a validation split has no ``val_`` columns."""

    round: Annotated[int, Column(unit="rounds", meaning="The round (0: the initial model).")]
    replicates: Annotated[int, Column(unit="replicates", meaning="The replicates averaged.")]
    train_loss: Annotated[float, Column(unit=_LOSS, meaning="The global model's loss on the clients' training data, "
                                        "mean over the replicates.", default=np.nan)]
    train_loss_sd: Annotated[float, Column(unit=_LOSS, meaning=_SD, default=np.nan)]
    train_accuracy: Annotated[float, Column(unit="fraction", meaning="Its accuracy there (NaN for a regression "
                                            "task).", default=np.nan)]
    train_accuracy_sd: Annotated[float, Column(unit="fraction", meaning=_SD, default=np.nan)]
    val_loss: Annotated[float, Column(unit=_LOSS, meaning="Its loss on the validation split.", default=np.nan)]
    val_loss_sd: Annotated[float, Column(unit=_LOSS, meaning=_SD, default=np.nan)]
    val_accuracy: Annotated[float, Column(unit="fraction", meaning="Its accuracy on the validation split.",
                                          default=np.nan)]
    val_accuracy_sd: Annotated[float, Column(unit="fraction", meaning=_SD, default=np.nan)]
    test_loss: Annotated[float, Column(unit=_LOSS, meaning="Its loss on the test data.", default=np.nan)]
    test_loss_sd: Annotated[float, Column(unit=_LOSS, meaning=_SD, default=np.nan)]
    test_accuracy: Annotated[float, Column(unit="fraction", meaning="Its accuracy on the test data.", default=np.nan)]
    test_accuracy_sd: Annotated[float, Column(unit="fraction", meaning=_SD, default=np.nan)]
    eb_clients: Annotated[float, Column(unit="clients", meaning="The gradient signal-to-noise diagnostic EB over the "
                                        "clients (NaN in round 0).", default=np.nan)]
    eb_clients_sd: Annotated[float, Column(unit="clients", meaning=_SD, default=np.nan)]


#: The table of ``federate``'s ``history.csv`` (:func:`mianalysis.federated.recording.history_rows`):
#: :class:`HistoryRow`'s columns, format version 1.
HISTORY_TABLE = StudySchema("federated_history", HistoryRow, 1,
                            "The global model's metrics in one round, mean and sd over the replicates.")


def write_history_table(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, *,
                        settings: Mapping[str, Any] | None = None) -> None:
    """Write `rows` (:func:`mianalysis.federated.recording.history_rows`) as the typed table
    :data:`HISTORY_TABLE`: the CSV at `path` and its sidecar ``PATH.json`` (`settings`, the
    format version, provenance; :class:`~mianalysis.analysis.study_table.StudyTable` reads it
    back)."""
    StudyTable(HISTORY_TABLE, list(rows), settings=settings,
               record={"aggregated": "mean and sd (ddof 1) over the replicates, per round"}).write(path)
