"""What the built-in tasks know beyond their samples, registered under the names the
sampler records in a dump's meta (:mod:`mianalysis.dumps.knowledge`): each task's random
streams, and an exact MI where the task has one (gaussian-sgd). The sampler writes
``meta["task"]``; registering here, where tasks and dumps meet, lets the analysis find
the answer from the dump alone without importing the tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from ..dumps.knowledge import ExactMI, register_task_knowledge
from ..tasks import TASKS
from ..tasks.base import Task

__all__ = ["exact_mi_source", "register_builtin_tasks"]


def exact_mi_source(kind: type[Task]) -> Callable[[Mapping[str, Any]], ExactMI | None] | None:
    """``meta -> exact MI or None`` for the dumps of the task class `kind` (see
    :class:`mianalysis.dumps.knowledge.TaskKnowledge`): the task rebuilt from the dump's
    ``task_settings``, at its ``init`` and ``shared`` streams; None where `kind` does not
    override :meth:`Task.exact_mi` (it never knows the MI)."""
    if kind.exact_mi is Task.exact_mi:
        return None

    def exact_mi(meta: Mapping[str, Any]) -> ExactMI | None:
        if not isinstance(meta.get("task_settings"), dict):
            return None
        try:
            task = kind(**meta["task_settings"])
            init, shared = meta.get("init", "per-run"), tuple(meta.get("shared", ()))
            task.exact_mi(0, 0, min(1, task.n_clients - 1), init=init, shared=shared)
        except (TypeError, ValueError):  # settings this version does not know: no exact answer
            return None
        # float: a task that overrides exact_mi knows the MI at every iteration (None is the base class's answer)
        return lambda iteration, a, b: cast(float, task.exact_mi(iteration, a, b, init=init, shared=shared))

    return exact_mi


def register_builtin_tasks() -> None:
    """Register every task of :data:`mianalysis.tasks.TASKS`: its streams and, where it
    overrides :meth:`Task.exact_mi`, its exact MI (done when the sampler is imported)."""
    for kind in TASKS.values():
        register_task_knowledge(kind.name, streams=kind.streams, exact_mi=exact_mi_source(kind))
