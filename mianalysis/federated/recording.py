"""Recording a simulation: every client's local model per round into a ParameterDump, and
the per-round history averaged over replicates (:func:`history_rows`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.validation import check_flag, check_int
from .._internal.io import write_rows

if TYPE_CHECKING:  # names used only in type hints
    from ..dumps import ParameterDump
    from .simulation import FederatedSimulation


def record_replicates(simulation: FederatedSimulation, out: str | os.PathLike, *, chunk_size: int = 16,
                      layer: str | Sequence[str] | None = None, progress: bool = True, record_global: bool = False
                      ) -> tuple[ParameterDump, list[dict]]:
    """Run `simulation.replicates` replicates with every client's local model recorded per
    round into a ParameterDump at `out` (checkpoint = round; client = FL client), written
    in chunks of replicates and resumed if `out` holds the same recording. The dump's
    writer lock is held throughout (LockedError if another process is writing `out`).

    Parameters
    ----------
    layer : str or list of str, optional
        Record only these tensors (names as in :meth:`FederatedSimulation.layout`).
    record_global : bool, default=False
        Also record the server's global model, as one more client named ``"global"``
        after the FL clients: at checkpoint ``t`` the model after round ``t``'s aggregation
        (the one broadcast at the start of round ``t + 1``; checkpoint 0 is the initial
        model, which every client holds too). Round ``t``'s local models started from the
        global model at checkpoint ``t - 1``, so a client's update in round ``t`` is its
        checkpoint ``t`` minus the global model's checkpoint ``t - 1``. The dump stays an
        ordinary dump: :func:`mianalysis.analyze` then also gives every client's MI and
        distances with ``"global"``. Its metrics are the global model's (as every client's).

    Returns
    -------
    dump : ParameterDump
    history : list of dict
        The global model's metrics per round and replicate.
    """
    from .._internal.locking import WriterLock
    from ..dumps import (ParameterDump, find_nonfinite, layout_columns, layout_from_shapes, select_layout,
                        unwritten_dump_discarded)

    # Everything is checked before the dump is opened or created: a rejected call leaves nothing.
    simulation.check_recordable()
    chunk_size = check_int(chunk_size, "chunk_size", low=1)
    record_global = check_flag(record_global, "record_global")
    layout = layout_from_shapes(simulation.layout())
    cols: slice | np.ndarray
    if layer is None:
        cols, rec_layout = slice(None), layout
    else:
        chosen = select_layout(layout, layer)
        cols = layout_columns(chosen)
        rec_layout = layout_from_shapes([(e.name, e.shape) for e in chosen])
    names = ["train_loss", "train_accuracy", "test_loss", "test_accuracy", "eb_clients"]
    if simulation.data.x_val is not None:
        names[2:2] = ["val_loss", "val_accuracy"]
    meta = {"federated": simulation.describe(), "layer": layer, "replicates": simulation.replicates,
            "chunk_size": chunk_size}
    names_out = [str(c) for c in range(simulation.data.n_clients)]
    if record_global:
        meta["global_client"] = "global: the server's model after each round (checkpoint 0: the initial model)"
        names_out.append("global")
    # One recorder per dump, from opening it to its last chunk; failed before its first chunk: no empty dump left.
    with WriterLock(out), unwritten_dump_discarded(out):
        dump = ParameterDump.open_or_create(
            out, meta=meta, clients=names_out,
            checkpoints=list(range(simulation.config.rounds + 1)), n_runs=simulation.replicates,
            layout=rec_layout, metric_names=names,
        )
        for start, stop in dump.missing_chunks(chunk_size):
            result = simulation.run(replicate_ids=range(start, stop), record=True, progress=progress)
            hist, models, global_models = result.history, result.local_models, result.global_models
            if models is None or global_models is None:  # run(record=True) always records both
                raise RuntimeError("the simulation recorded no local or global models")
            values = np.full((len(names), simulation.config.rounds + 1, stop - start), np.nan, dtype=np.float32)
            for row in hist:
                for m, name in enumerate(names):
                    values[m, row["round"], row["replicate"] - start] = row.get(name, np.nan)
            # The simulator checks the clients' updates; these local models are what is stored.
            found = [(where.checkpoint, c, where) for c in range(simulation.data.n_clients) if (where := find_nonfinite(
                models[c][:, :, cols], dump.checkpoints, first_run=start, layout=dump.layout)) is not None]
            if found:
                _, c, where = min(found, key=lambda f: f[:2])
                raise ValueError(
                    f"client {c}'s local model is not finite in round {where.iteration}, "
                    f"{where.runs_text('replicate')}: {where.values_text()}; nothing of "
                    f"replicates {start}-{stop} was written (the dump {out} keeps its {dump.written_runs} "
                    f"completed replicates); lower `lr` (now {simulation.config.lr})")
            samples = {str(c): models[c][:, :, cols] for c in range(simulation.data.n_clients)}
            if record_global:
                samples["global"] = global_models[:, :, cols]
            dump.write_chunk(start, stop, samples, {name: values for name in names_out})
    # The history of every replicate, read back from the dump (float32), whether this call
    # ran all chunks or resumed after an interruption.
    recorded = {name: dump.metric("0", name) for name in names}
    history = []
    for rep in range(dump.completed_runs):
        for t in range(simulation.config.rounds + 1):
            row = {"round": t, "replicate": rep}
            row.update({name: float(recorded[name][t, rep]) for name in names
                        if not (name == "eb_clients" and t == 0)})
            history.append(row)
    return dump, history


_METRICS = ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "test_loss", "test_accuracy", "eb_clients")


def history_rows(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per-round metrics averaged over replicates: per round ``round``, ``replicates`` and each
    metric's mean and sd (ddof 1; 0 for one replicate) over the replicates; a run without a
    validation split has no ``val_`` columns. The typed table of these rows, with its
    sidecar, is :data:`mianalysis.analysis.studies.history.HISTORY_TABLE`."""
    keys = [k for k in _METRICS if k in history[0] or k == "eb_clients"]
    rows = []
    for t in sorted({h["round"] for h in history}):
        at = [h for h in history if h["round"] == t]
        row: dict[str, Any] = {"round": t, "replicates": len(at)}
        for k in keys:
            vals = np.array([h.get(k, np.nan) for h in at])
            row[k] = float(vals.mean())
            row[f"{k}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        rows.append(row)
    return rows


def history_table(history: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> list[dict[str, Any]]:
    """Write :func:`history_rows` as a plain CSV at `path`; returns the rows.
    (``federate`` writes them as the typed table
    :data:`mianalysis.analysis.studies.history.HISTORY_TABLE`, with its sidecar.)"""
    rows = history_rows(history)
    write_rows(rows, path)
    return rows


__all__ = ["record_replicates", "history_rows", "history_table"]
