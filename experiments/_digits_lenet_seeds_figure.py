"""The figure of experiments/digits_lenet_seeds.py, drawn from its table.

The script draws it after a run and experiments/replot.py from the committed table
(figures/digits_lenet_seeds/digits_lenet_seeds.csv, read back by :func:`read_rows`): :func:`figure`. The
cells are defined here because the figure draws a panel for each, in this order; the
intervals are at the replication family's level, from :data:`ALPHA`.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

__all__ = ["ALPHA", "CELLS", "figure", "read_rows"]

# fixed start (the row of panels above), per-run start (below): a cell absent from a seed's table is skipped
CELLS = ("fixed-augmentation-26400", "fixed-nothing-26400", "per-run-augmentation-26400", "per-run-nothing-26400")
ALPHA = 0.05  # the replication family's family-wise error


def figure(rows: list[dict], path: Path, alpha: float = ALPHA) -> None:
    """KSG steps of every seed and pair with their intervals at the replication family's
    Bonferroni level (an interval excludes 0 where Bonferroni's test rejects; Holm's
    verdicts, filled markers, reject at least those), one panel per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ksg = [r for r in rows if r["quantity"] == "mi_ksg"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.6), sharey="row")  # a row's steps on one scale
    for ax, cell in zip(axes.flat, CELLS):
        family = sorted((r for r in ksg if r["cell"] == cell), key=lambda r: (r["iteration"], r["seed"], r["pair"]))
        if not family:
            ax.text(0.5, 0.5, "no table holds this cell", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(cell, fontsize=10)
            ax.set_xticks([])
            continue
        pairs = sorted({r["pair"] for r in family})
        for i, r in enumerate(family):
            x = i + 0.6 * (r["iteration"] - 2)  # a gap between the iterations' groups
            colour = f"C{r['seed']}"
            ax.errorbar(x, r["change"], yerr=r["interval_half_width_in_family"], fmt="o", color=colour, ms=5, capsize=2,
                        mfc=colour if r["verdict_replication"] != "no detectable change" else "white")
        ax.axhline(0, color="0.5", lw=0.8)
        steps = sorted({r["iteration"] for r in family})
        ax.set_xticks([np.mean([i + 0.6 * (r["iteration"] - 2) for i, r in enumerate(family) if r["iteration"] == t])
                       for t in steps], [f"into iteration {t}" for t in steps])
        ax.set_title(f"{cell}: KSG step per seed (colour) and pair ({', '.join(pairs)}, in order)\n"
                     f"bars: {100 * (1 - alpha / len(family)):.2f} % intervals (Bonferroni over {len(family)} steps); "
                     "filled: Holm's verdict", fontsize=8.5)
    for ax in axes[:, 0]:
        ax.set_ylabel("change of the KSG MI (bits)")
    handles = [plt.Line2D([], [], marker="o", ls="", color=f"C{s}", label=f"seed {s}")
               for s in sorted({r["seed"] for r in ksg})]
    fig.legend(handles=handles, fontsize=8, loc="lower center", ncol=len(handles), frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))  # the legend below the panels, clear of the data
    fig.savefig(path, dpi=110)
    plt.close(fig)


def read_rows(path: Path) -> list[dict]:
    """The rows of a table digits_lenet_seeds.py wrote, with numbers as numbers (for the figure)."""
    with Path(path).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for key in ("seed", "iteration", "family_size"):
            r[key] = int(r[key])
        for key in ("change", "se", "p", "p_replication", "interval_half_width_in_family"):
            r[key] = float(r[key])
    return rows
