"""What a dump's producer knows beyond its samples, found from the dump's ``meta``.

A task that made a dump may know things its samples cannot say: the random streams the
sampler could share between its clients, and for a task with a closed form (gaussian-sgd)
the exact MI between two clients at every iteration. The producers register that
knowledge here under the task's name, the ``task`` their dumps' meta records (the sampler
registers every built-in task's: :mod:`mianalysis.sampling.knowledge`); the consumers
(the analysis' design note and its ``mi_exact`` rows) ask with a dump's meta. The two
sides meet in the dump's stage, below both, so neither imports the other, and a task of
one's own registers its knowledge the same way.

>>> from mianalysis.dumps.knowledge import exact_mi_of, register_task_knowledge, task_streams
>>> register_task_knowledge("doc-toy", streams=("data", "order"),
...                         exact_mi=lambda meta: (lambda iteration, a, b: 0.5 * iteration))
>>> task_streams({"task": "doc-toy"})
('data', 'order')
>>> exact_mi_of({"task": "doc-toy"})(4, 0, 1)
2.0
>>> task_streams({"task": "a task nobody registered"}) is None
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ExactMI", "TaskKnowledge", "register_task_knowledge", "task_knowledge", "task_streams", "exact_mi_of",
           "rebuild_task", "task_reference"]

#: The exact MI in bits between clients ``a`` and ``b`` after ``iteration`` iterations.
ExactMI = Callable[[int, int, int], float]


@dataclass(frozen=True)
class TaskKnowledge:
    """What a task knows of the dumps it makes.

    Parameters
    ----------
    streams : tuple of str, optional
        The task's random streams, those a sampler may share between the clients of a run;
        None: not known.
    exact_mi : callable, optional
        ``exact_mi(meta)`` -> an :data:`ExactMI` for the dump with that meta (its task
        settings, start and shared streams), or None where the dump's settings give no
        exact answer; None: the task never knows it.
    rebuild : callable, optional
        ``rebuild(meta)`` -> the task that made the dump, rebuilt from its settings (used
        duck-typed: e.g. headroom asks it for exact error moments), or None where the
        settings are not this version's; None: not rebuilt.
    reference : callable, optional
        ``reference(meta, n_runs)`` -> (n_runs, n_params) array: the federation's exact
        optimum theta* of each of the dump's first `n_runs` runs (their data drawn again
        as the sampler drew them); None: the task has no exact optimum.
    """

    streams: tuple[str, ...] | None = None
    exact_mi: Callable[[Mapping[str, Any]], ExactMI | None] | None = None
    rebuild: Callable[[Mapping[str, Any]], Any] | None = None
    reference: Callable[[Mapping[str, Any], int], Any] | None = None


_KNOWN: dict[str, TaskKnowledge] = {}


def register_task_knowledge(task: str, *, streams: Sequence[str] | None = None,
                            exact_mi: Callable[[Mapping[str, Any]], ExactMI | None] | None = None,
                            rebuild: Callable[[Mapping[str, Any]], Any] | None = None,
                            reference: Callable[[Mapping[str, Any], int], Any] | None = None) -> None:
    """Record what the task named `task` knows of its dumps (see :class:`TaskKnowledge`);
    registering a name again replaces its entry.

    Raises
    ------
    ValueError
        `task` is not a non-empty string, `streams` is not a sequence of strings, or
        `exact_mi`, `rebuild` or `reference` is not callable.
    """
    if not isinstance(task, str) or not task:
        raise ValueError(f"`task` must be a non-empty string (the name a dump's meta records); got {task!r}")
    if streams is not None and (isinstance(streams, str) or not all(isinstance(s, str) for s in streams)):
        raise ValueError(f"`streams` of task {task!r} must be a sequence of stream names; got {streams!r}")
    for name, given in (("exact_mi", exact_mi), ("rebuild", rebuild), ("reference", reference)):
        if given is not None and not callable(given):
            raise ValueError(f"`{name}` of task {task!r} must be callable; got {given!r}")
    _KNOWN[task] = TaskKnowledge(None if streams is None else tuple(streams), exact_mi, rebuild, reference)


def task_knowledge(meta: Mapping[str, Any]) -> TaskKnowledge | None:
    """The registered knowledge of the task that `meta` (a dump's) names; None where it names
    none or one nobody registered."""
    name = meta.get("task") if isinstance(meta, Mapping) else None
    return _KNOWN.get(name) if isinstance(name, str) else None


def task_streams(meta: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The random streams of the task that made a dump with `meta`, or None where not known."""
    known = task_knowledge(meta)
    return None if known is None else known.streams


def exact_mi_of(meta: Mapping[str, Any]) -> ExactMI | None:
    """The exact MI of the clients of a dump with `meta` (an :data:`ExactMI`), or None where
    its task does not know it (or no task registered it)."""
    known = task_knowledge(meta)
    if known is None or known.exact_mi is None:
        return None
    return known.exact_mi(meta)


def rebuild_task(meta: Mapping[str, Any]) -> Any:
    """The task that made a dump with `meta`, rebuilt from its settings, or None where its
    task registered no way to (or the settings are not this version's)."""
    known = task_knowledge(meta)
    return None if known is None or known.rebuild is None else known.rebuild(meta)


def task_reference(meta: Mapping[str, Any], n_runs: int) -> Any:
    """The exact optimum theta* of each of the first `n_runs` runs of a dump with `meta`, an
    (n_runs, n_params) array, or None where its task has no exact optimum."""
    known = task_knowledge(meta)
    return None if known is None or known.reference is None else known.reference(meta, n_runs)
