"""The blocks ``analyze(by="auto")`` analyses: the whole vector where a calibrated estimate of it
is possible, else its tensors, each split into consecutive blocks small enough to be.

Each client pair's MI of one block of parameters is at most the MI of the whole vectors
(data processing: a block is a function of the vector), so per-block rows are lower bounds
on the whole model's MI, each an estimate of its own block's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BlockChoice", "regime_blocks", "runs_needed", "MIN_RUNS_FOR_BLOCKS"]

# Fewer runs than this are not split into blocks: a block of a parameter or two would get a
# calibrated-looking estimate from a handful of runs, whose shuffles can pair the runs
# perfectly (with 5 runs, one shuffle in 120 does).
MIN_RUNS_FOR_BLOCKS = 20


@dataclass(frozen=True)
class BlockChoice:
    """What ``by="auto"`` chose.

    Attributes
    ----------
    groups : list of (str, ndarray)
        The blocks analysed, each a name (``""`` for the whole vector, a tensor's name, or
        ``"name[a:b]"`` for its parameters a to b - 1) and its columns.
    by : str or None
        None (the whole vector) or "layer" (the blocks).
    note : str
        One sentence: why, and how many runs the whole vector would need.
    """

    groups: list[tuple[str, np.ndarray]]
    by: str | None
    note: str


def runs_needed(n_features: int, min_runs_per_dim: float, n_clients_per_pair: int = 2) -> int:
    """The fewest runs a calibrated estimate of a client pair's MI needs for vectors of
    `n_features` parameters each: `min_runs_per_dim` per joint dimension.

    Examples
    --------
    >>> from mianalysis.analysis.blocks import runs_needed
    >>> runs_needed(610, 2.2)
    2684
    """
    return max(2, math.ceil(round(min_runs_per_dim * n_clients_per_pair * n_features, 9)))


def regime_blocks(tensors: Sequence[tuple[str, np.ndarray]], n_runs: int, min_runs_per_dim: float) -> BlockChoice:
    """The whole vector if `n_runs` cover it (`min_runs_per_dim` runs per joint dimension of
    a client pair), else each tensor of `tensors` ((name, columns) in the vector's order)
    split into the fewest near-equal consecutive blocks that the runs cover.

    Where not even one parameter per client is covered, or there are fewer than
    :data:`MIN_RUNS_FOR_BLOCKS` runs, the whole vector (its rows are then the auto rule's
    lower bound).

    Examples
    --------
    A 610-parameter MLP (two weight tensors and their biases) sampled 200 times: the whole
    vector needs 2,684 runs; blocks of at most 45 parameters per client are covered (the
    largest here, 42).

    >>> import numpy as np
    >>> from mianalysis.analysis.blocks import regime_blocks
    >>> shapes = [("fc1.weight", 544), ("fc1.bias", 8), ("fc2.weight", 48), ("fc2.bias", 10)]
    >>> start, tensors = 0, []
    >>> for name, size in shapes:
    ...     tensors.append((name, np.arange(start, start + size)))
    ...     start += size
    >>> choice = regime_blocks(tensors, 200, 2.2)
    >>> choice.by, len(choice.groups), [name for name, _ in choice.groups][:2]
    ('layer', 17, ['fc1.weight[0:42]', 'fc1.weight[42:84]'])
    >>> max(len(columns) for _, columns in choice.groups)
    42
    """
    columns = [np.asarray(c) for _, c in tensors]
    total = int(sum(c.size for c in columns))
    whole = np.concatenate(columns) if columns else np.arange(0)
    needed = runs_needed(total, min_runs_per_dim)
    limit = int(math.floor(round(n_runs / (2 * min_runs_per_dim), 9)))
    if n_runs >= needed:
        return BlockChoice([("", whole)], None,
                           f"by auto: the whole vector ({total} parameters per client): {n_runs} runs >= {needed}, "
                           f"the {min_runs_per_dim} runs per joint dimension of a calibrated estimate")
    if limit < 1 or n_runs < MIN_RUNS_FOR_BLOCKS:
        return BlockChoice([("", whole)], None,
                           f"by auto: the whole vector ({total} parameters per client) needs {needed} runs for a "
                           f"calibrated estimate and {n_runs} runs are too few to split it (at least {MIN_RUNS_FOR_BLOCKS}, "
                           "and one parameter per client covered): "
                           "the whole vector's lower bound")
    groups: list[tuple[str, np.ndarray]] = []
    for (name, _), cols in zip(tensors, columns):
        if cols.size <= limit:
            groups.append((name, cols))
            continue
        parts = math.ceil(cols.size / limit)
        edges = np.linspace(0, cols.size, parts + 1).round().astype(int)
        groups.extend((f"{name}[{a}:{b}]", cols[a:b]) for a, b in zip(edges[:-1], edges[1:]))
    return BlockChoice(groups, "layer",
                       f"by auto: the whole vector ({total} parameters per client) needs {needed} runs for a "
                       f"calibrated estimate, the dump has {n_runs}; analysed in {len(groups)} blocks of at most "
                       f"{limit} parameters per client (its tensors, split to fit), each block's MI a lower bound "
                       "on the whole vector's (data processing)")
