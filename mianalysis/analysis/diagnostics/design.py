"""What a dump's sampling design forces on the dependence between its clients.

Before a trend in MI between clients is read, the design that produced the samples says
what it can be. Clients of one run may share the start (``init="per-run"``: one draw per
run, the same for all its clients; ``init="fixed"``: one point for every run) and any of
the task's random streams (``shared``). Then:

- fixed start, nothing shared: the clients of a run are independent; their MI is 0 in
  truth, and an estimate above 0 is the estimator's bias;
- fixed start, some streams shared: only the shared streams can make clients dependent;
- per-run start, nothing shared: the start is the only source of dependence, and training
  can only lose what it gives (the clients drift apart from it with independent noise);
- per-run start and shared streams: both make clients dependent; MI may rise or fall.

A dump recorded from a federation's rounds (the Flower recorders: ``init`` "global model of
round 0, ...") has no per-run or fixed start: every round's clients start from the same
global model, which carries all clients' earlier rounds, so they are dependent through it
and the MI may rise or fall over rounds.

A dump sampled with a reference client (``ParameterSampler(reference="central")``, recorded
as ``"reference": "central"`` in its meta) holds the client "central" besides the task's
clients; the analysis pairs only the task's clients, and the note says so.

:func:`design_note` writes that as one line for the rows of an analysis table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...dumps.knowledge import task_streams

__all__ = ["design_note"]


def design_note(meta: Mapping[str, Any], streams: Sequence[str] | None = None) -> str:
    """One line on what the sampling design recorded in a dump's `meta` forces on the MI
    between its clients; "" for a dump the sampler did not write (no ``init`` recorded).

    Parameters
    ----------
    meta : mapping
        A dump's ``meta`` (:attr:`mianalysis.ParameterDump.meta`): ``init`` ("per-run" or
        "fixed") and ``shared`` (stream names; absent when nothing is shared), as the
        sampler records them, and ``reference`` ("central" when the dump holds the central
        reference client, which the analysis leaves out of the client pairs).
    streams : sequence of str, optional
        All of the task's random streams, to say which are not shared; by default those
        the task named in ``meta["task"]`` registered
        (:func:`mianalysis.dumps.knowledge.register_task_knowledge`; every built-in task does).

    Returns
    -------
    str

    Examples
    --------
    >>> from mianalysis.analysis.diagnostics.design import design_note
    >>> design_note({"init": "fixed"})
    'design: fixed start, no stream shared: the clients are independent (MI 0 in truth)'
    >>> design_note({"init": "per-run", "shared": ["order", "dropout"], "task": "signal-rnn"})
    'design: per-run start, shared order+dropout (not data): start and shared streams make clients dependent'
    >>> design_note({"init": "per-run", "task": "digits-lenet", "reference": "central"}).split("; ")[-1]
    'client central (the FedSGD reference) is not paired'
    >>> design_note({"init": "global model of round 0, sent to every client"}).split(": ")[1]
    'federated rounds'
    >>> design_note({"task": "imported"})
    ''
    """
    init = meta.get("init")
    if isinstance(init, str) and init.startswith("global model"):  # a federation's rounds (the Flower recorder)
        return FEDERATED_ROUNDS + _reference(meta)
    if init not in ("per-run", "fixed"):
        return ""
    return _design(meta, init, streams) + _reference(meta)


# The note of a dump recorded from a federation's rounds (``meta["init"]`` "global model of
# round 0, ...", as mianalysis.flower's recorders write it).
FEDERATED_ROUNDS = ("design: federated rounds: every round's clients start from the same global model, which carries "
                    "all clients' earlier rounds: it makes them dependent, and the MI may rise or fall over rounds")


def _reference(meta: Mapping[str, Any]) -> str:
    """The note's tail on the dump's reference client ("" without one)."""
    reference = meta.get("reference")
    if reference == "central":
        return "; client central (the FedSGD reference) is not paired"
    if reference == "optimum":
        return "; client optimum (each run's exact theta*) is not paired"
    return ""


def _design(meta: Mapping[str, Any], init: str, streams: Sequence[str] | None) -> str:
    shared = [str(s) for s in meta.get("shared") or []]
    if streams is None:  # the task's, where it registered them (mianalysis.dumps.knowledge)
        streams = task_streams(meta)
    others = [s for s in streams if s not in shared] if streams is not None else []
    what = f"shared {'+'.join(shared)}" + (f" (not {'+'.join(others)})" if others else "")
    if init == "fixed":
        if not shared:
            return "design: fixed start, no stream shared: the clients are independent (MI 0 in truth)"
        return f"design: fixed start, {what}: only the shared streams make clients dependent"
    if not shared:
        return "design: per-run start, no stream shared: dependence comes from the start only and can only be lost"
    return f"design: per-run start, {what}: start and shared streams make clients dependent"
