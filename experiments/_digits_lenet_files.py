"""Where digits_lenet_paper.py leaves a seed's 26,400-run cells, for the scripts that read them.

digits_lenet_movers.py and digits_lenet_paired.py analyse the dumps that
``digits_lenet_paper.py --only CELL --seed S`` sampled (under runs/digits_lenet_paper/) and
compare with its committed summary table of that seed (figures/digits_lenet_paper/digits_lenet_paper.csv, or
``_seedS.csv``): :func:`dump_path` and :func:`suffix` name them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RUNS", "dump_path", "suffix"]

#: The runs of the cells these scripts read (the paper's 26,400).
RUNS = 26400


def suffix(seed: int) -> str:
    """What names a seed's files: "" for seed 0, else ``_seedS``."""
    return "" if seed == 0 else f"_seed{seed}"


def dump_path(work: Path, cell: str, seed: int) -> Path:
    """Where digits_lenet_paper.py samples `cell` of `seed`."""
    return work / f"full_{RUNS}{suffix(seed)}" / "dumps" / cell
