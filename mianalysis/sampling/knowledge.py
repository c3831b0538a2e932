"""What the built-in tasks know beyond their samples, registered under the names the
sampler records in a dump's meta (:mod:`mianalysis.dumps.knowledge`): each task's random
streams, the task rebuilt from a dump's settings, an exact MI where the task has one
(gaussian-sgd), and the federation's exact optimum of each run where the task can compute
it. The sampler writes ``meta["task"]``; registering here, where tasks and dumps meet,
lets the analysis find the answers from the dump alone without importing the tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np

from ..dumps.knowledge import ExactMI, register_task_knowledge
from ..tasks import TASKS
from ..tasks.base import Task

__all__ = ["rebuild_source", "exact_mi_source", "reference_source", "register_builtin_tasks"]


def rebuild_source(kind: type[Task]) -> Callable[[Mapping[str, Any]], Task | None]:
    """``meta -> task``: the task class `kind` built from a dump's ``task_settings``, or None
    where the meta has none or settings this version does not know."""

    def rebuild(meta: Mapping[str, Any]) -> Task | None:
        if not isinstance(meta.get("task_settings"), dict):
            return None
        try:
            return kind(**meta["task_settings"])
        except (TypeError, ValueError):  # settings this version does not know
            return None

    return rebuild


def exact_mi_source(kind: type[Task]) -> Callable[[Mapping[str, Any]], ExactMI | None] | None:
    """``meta -> exact MI or None`` for the dumps of the task class `kind` (see
    :class:`mianalysis.dumps.knowledge.TaskKnowledge`): the task rebuilt from the dump's
    ``task_settings``, at its ``init`` and ``shared`` streams; None where `kind` does not
    override :meth:`Task.exact_mi` (it never knows the MI)."""
    if kind.exact_mi is Task.exact_mi:
        return None
    rebuild = rebuild_source(kind)

    def exact_mi(meta: Mapping[str, Any]) -> ExactMI | None:
        task = rebuild(meta)
        if task is None:
            return None
        init, shared = meta.get("init", "per-run"), tuple(meta.get("shared", ()))
        try:
            task.exact_mi(0, 0, min(1, task.n_clients - 1), init=init, shared=shared)
        except (TypeError, ValueError):  # a start or streams this version does not know: no exact answer
            return None
        # float: a task that overrides exact_mi knows the MI at every iteration (None is the base class's answer)
        return lambda iteration, a, b: cast(float, task.exact_mi(iteration, a, b, init=init, shared=shared))

    return exact_mi


def reference_source(kind: type[Task], sampler: Callable[..., Any]) -> Callable[[Mapping[str, Any], int],
                                                                             np.ndarray | None] | None:
    """``(meta, n_runs) -> (n_runs, n_params)``: the exact optimum theta* of each of a dump's
    first `n_runs` runs (``central_parameters`` of the data that `sampler`, the
    :class:`~mianalysis.sampling.ParameterSampler` class, draws for them at the dump's seed,
    start and shared streams); None where `kind` cannot compute one."""
    if not hasattr(kind, "central_parameters"):
        return None
    rebuild = rebuild_source(kind)

    def reference(meta: Mapping[str, Any], n_runs: int) -> np.ndarray | None:
        task = rebuild(meta)
        if task is None:
            return None
        drawn = sampler(task, seed=int(meta.get("seed", 0)), init=str(meta.get("init", "per-run")),
                        shared=tuple(meta.get("shared", ())), progress=False)
        generators = [drawn.data_generators(range(n_runs), k) for k in range(task.n_clients)]
        return np.asarray(getattr(task, "central_parameters")(generators))

    return reference


def register_builtin_tasks(sampler: Callable[..., Any]) -> None:
    """Register every task of :data:`mianalysis.tasks.TASKS` (done when the sampler is
    imported, which passes its :class:`~mianalysis.sampling.ParameterSampler` as `sampler`):
    its streams, its rebuilding, and where it has them its exact MI and the exact optimum
    of each run."""
    for kind in TASKS.values():
        register_task_knowledge(kind.name, streams=kind.streams, exact_mi=exact_mi_source(kind),
                                rebuild=rebuild_source(kind), reference=reference_source(kind, sampler))
