"""Where dependence between clients comes from: gaussian-sgd's exact MI curves.

The exact MI between clients 0 and 1 of gaussian-sgd (preset "paper": d = 20, 40 steps of
plain SGD with eta = 0.1, sigma = 1, tau = 1) at every iteration, for a fixed or a per-run
start and for each way of sharing the random streams of a run between its clients. Closed
form only (no sampling): a few seconds of CPU.

    python experiments/exact_dependence_curves.py

Writes figures/exact_dependence_curves/exact_dependence_curves.csv (case, init, shared, rho, iteration, mi_exact in
bits) and figures/exact_dependence_curves/exact_dependence_curves.png.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _results import figures_of, write_csv

from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/exact_dependence_curves/: where this script writes

# name: (init, shared streams, rho)
CASES = {
    "fixed start, nothing shared": ("fixed", (), 0.0),
    "per-run start, nothing shared": ("per-run", (), 0.0),
    "fixed start, shared data": ("fixed", ("data",), 0.0),
    "fixed start, noise correlated (rho 0.5)": ("fixed", (), 0.5),
    "fixed start, shared noise": ("fixed", ("noise",), 0.0),
    "per-run start, shared data": ("per-run", ("data",), 0.0),
}


def curves():
    rows = []
    for name, (init, shared, rho) in CASES.items():
        task = get_task("gaussian-sgd", "paper", rho=rho)
        for t in range(task.n_iterations + 1):
            rows.append({"case": name, "init": init, "shared": "+".join(shared), "rho": rho, "iteration": t,
                         "mi_exact": task.exact_mi(t, 0, 1, init=init, shared=shared)})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = curves()
    write_csv(({**r, "mi_exact": f"{r['mi_exact']:.6g}"} for r in rows), out / "exact_dependence_curves.csv")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.2))
    # The zero line on top of the curves (a thin black dotted line), so that it shows where
    # the curves that are 0 lie on it.
    ax.axhline(0.0, color="black", lw=0.9, ls=":", zorder=4)
    for name in CASES:
        hits = [r for r in rows if r["case"] == name and r["mi_exact"] != float("inf")]
        zero = all(r["mi_exact"] == 0 for r in hits)  # markers only, so that the 0 line shows through
        ax.plot([r["iteration"] for r in hits], [r["mi_exact"] for r in hits], lw=0 if zero else 1.5,
                marker="o" if zero else None, ms=3.5, zorder=3 if zero else 2,
                label=name + (" (exactly 0 throughout)" if zero else ""))
    ax.set_ylim(bottom=-2.0)  # room below 0, so the curves at 0 are not on the axis' edge
    ax.set_xlabel("iteration")
    ax.set_ylabel("exact MI, clients 0 and 1 (bits)")
    ax.set_title("gaussian-sgd (d = 20): where dependence comes from\n(black dotted line: MI = 0)", fontsize=11)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.tight_layout()
    fig.savefig(out / "exact_dependence_curves.png", dpi=120)
    for name in CASES:
        values = {r["iteration"]: r["mi_exact"] for r in rows if r["case"] == name}
        print(f"{name:42s} " + "  ".join(f"t={t}: {values[t]:.3g}" for t in (0, 1, 10, 40)))


if __name__ == "__main__":
    main()
