"""The estimators against the exact MI, on parameters that training produced.

gaussian-sgd (see mianalysis.tasks.GaussianSGDTask) knows the exact MI between any two
clients at every checkpoint. This script samples it at both presets (`paper`: d = 20;
`high`: d = 200), for two designs (a fixed start with the clients' targets shared within
a run, where dependence is created by training; a per-run start with nothing shared, where
it can only be lost), with the recorded parameters Gaussian (`transform="none"`) or passed
coordinate-wise through sinh or x + x^3 ("cubic"; the exact MI is unchanged, the samples
are not Gaussian), and
analyses every dump with `mianalysis.analyze` (Gaussian bias-corrected, KSG, k = 3,
standardised, and the Gaussian copula estimator, which monotone maps leave exact)
beside the exact MI. Checkpoints every 10 iterations of 40; iteration 0 is
left out (a per-run start gives identical clients there: infinite MI).

    python experiments/gaussian_sgd_truth.py [--runs 2000] [--quick]

Writes figures/gaussian_sgd_truth/gaussian_sgd_truth.csv (one row per preset, design, transform, iteration
and client pair: exact and estimated MI in bits, and each estimate's note) with provenance
in figures/gaussian_sgd_truth/gaussian_sgd_truth.csv.json, and the page docs/results/tables/gaussian_sgd_truth.md
(the mean absolute and relative error of each estimator per preset and transform; with
--out DIR: all of them into DIR).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _results import figures_of, write_csv, write_page, write_sidecar

from mianalysis import ParameterSampler, analyze
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/gaussian_sgd_truth/: where this script writes

PRESETS = ("paper", "high")
DESIGNS = {"fixed start, shared data": ("fixed", ("data",)), "per-run start, nothing shared": ("per-run", ())}
TRANSFORMS = ("none", "sinh", "cubic")
EVERY = 10
ESTIMATORS = ("gaussian", "ksg", "copula")


def truth_rows(preset, design, transform, runs, work, seed=0):
    """Rows of exact and estimated MI for one dump of gaussian-sgd."""
    init, shared = DESIGNS[design]
    task = get_task("gaussian-sgd", preset, transform=transform)
    sampler = ParameterSampler(task, seed=seed, init=init, shared=shared, every=EVERY, progress=False)
    dump = sampler.sample(runs, Path(work) / f"{preset}-{init}-{'+'.join(shared) or 'none'}-{transform}")
    table = analyze(dump, estimators=ESTIMATORS, metrics=(), random_state=seed)
    rows = []
    for r in table:
        if r["quantity"] != "mi_exact" or r["iteration"] == 0:
            continue
        same = [s for s in table if (s["checkpoint"], s["client_a"], s["client_b"]) ==
                (r["checkpoint"], r["client_a"], r["client_b"])]
        estimate = {s["quantity"]: s for s in same}
        rows.append({"preset": preset, "d": task.settings["d"], "design": design, "transform": transform,
                     "runs": runs, "iteration": r["iteration"], "pair": f"{r['client_a']}-{r['client_b']}",
                     "mi_exact": r["value"], **{f"mi_{e}": estimate[f"mi_{e}"]["value"] for e in ESTIMATORS},
                     **{f"{e}_note": estimate[f"mi_{e}"]["note"] for e in ESTIMATORS}})
    return rows


def summary(rows):
    """Mean absolute error (bits) and mean relative error of each estimator per preset and
    transform, over designs, iterations and pairs."""
    out = []
    for preset in PRESETS:
        for transform in TRANSFORMS:
            hits = [r for r in rows if r["preset"] == preset and r["transform"] == transform]
            if not hits:
                continue
            exact = np.array([r["mi_exact"] for r in hits])
            line = {"preset": preset, "d": hits[0]["d"], "transform": transform, "estimates": len(hits),
                    "exact_min": exact.min(), "exact_max": exact.max()}
            for est in ESTIMATORS:
                err = np.array([r[f"mi_{est}"] for r in hits]) - exact
                line[f"{est}_mean_abs_error"] = float(np.abs(err).mean())
                big = exact > 1  # relative errors of near-zero truths say nothing
                line[f"{est}_mean_rel_error"] = float(np.abs(err[big] / exact[big]).mean()) if big.any() else np.nan
            out.append(line)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="paper preset only, 500 runs, into figures/*_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    presets = ("paper",) if args.quick else PRESETS
    runs = 500 if args.quick else args.runs
    name = "gaussian_sgd_truth_quick" if args.quick else "gaussian_sgd_truth"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix="gaussian-sgd-truth-")
    rows, seconds = [], {}
    try:
        for preset in presets:
            for design in DESIGNS:
                for transform in TRANSFORMS:
                    start = time.perf_counter()
                    rows += truth_rows(preset, design, transform, runs, work)
                    seconds[f"{preset} / {design} / {transform}"] = round(time.perf_counter() - start, 1)
                    print(f"{preset:6s} {design:30s} {transform:5s} {seconds[f'{preset} / {design} / {transform}']:7.1f} s",
                          flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    lines = summary(rows)
    names = {"gaussian": "Gaussian", "ksg": "KSG", "copula": "Gaussian copula"}
    md = ["| preset | d per client | output | estimates | exact MI (bits) | "
          + " | ".join(f"{names[e]}: mean abs. error (bits) | {names[e]}: mean rel. error" for e in ESTIMATORS) + " |",
          "|---|---|---|---|---|" + "---|---|" * len(ESTIMATORS)]
    for s in lines:
        md.append(f"| {s['preset']} | {s['d']} | {s['transform']} | {s['estimates']} | "
                  f"{s['exact_min']:.3g} - {s['exact_max']:.4g} | "
                  + " | ".join(f"{s[f'{e}_mean_abs_error']:.4g} | {s[f'{e}_mean_rel_error']:.1%}" for e in ESTIMATORS)
                  + " |")
    write_page(
        out, name,
        f"Estimators against gaussian-sgd's exact MI ({runs} runs per dump; designs: {', '.join(DESIGNS)}; "
        f"iterations {EVERY}-40; relative errors over exact MI > 1 bit). Made by "
        f"`python experiments/gaussian_sgd_truth.py{' --quick' if args.quick else ''}`.\n\n" + "\n".join(md) + "\n")
    write_sidecar(table, {"table": table.name, "runs": runs, "seconds": seconds, "summary": lines,
                          "provenance": collect(started, finished=True)})
    print("\n".join(md))


if __name__ == "__main__":
    main()
