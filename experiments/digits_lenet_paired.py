"""digits-lenet's two per-run-start cells compared run by run: does sharing the augmentation
change how fast the KSG MI falls?

    python experiments/digits_lenet_paired.py [--seeds 0,1,2] [--pairs 0-1,0-2,1-2] [--halves 20]

The per-run cells of ``digits_lenet_paper.py`` at the paper's 26,400 runs
(``per-run-augmentation-26400``, ``per-run-nothing-26400``) give a run's clients one random
start, and one seed gives run i the same start in both cells
(tests/test_digits_head.py::test_per_run_start_does_not_depend_on_the_shared_streams). The
two cells' steps are therefore not independent, and their difference's se is not the two
steps' se combined. This script tests the difference paired by run:

- for each client pair, checkpoint and cell, the KSG estimate (k = 3) from the pair's
  standardised distance matrices (:meth:`mianalysis.MarginalDistances.of`, as
  :func:`mianalysis.analyze` makes them; the tie-breaking noise seeded by seed, checkpoint
  and client, the same in both cells), and the estimates of `halves` random halves of the
  runs, the same halves in both cells and at every checkpoint
  (:func:`mianalysis.analysis.intervals.resample_indices`);
- the difference of the two cells' steps into iteration t (shared augmentation minus
  nothing shared: positive where the fall is smaller with the augmentation shared), its se
  the sd of that difference over the halves (half-subsampling, as the analysis' KSG
  intervals: the halves' variance is the variance estimate), Student's t with halves - 1
  degrees of freedom;
- Holm over every pair-step of every seed made (one family), with the smallest difference
  each test detects with probability 0.8 at Holm's first level and alone;
- for comparison, the unpaired se (the two cells' step se combined as if independent) and
  the correlation of the two cells' steps over the halves: what the pairing changes.

Steps start at the first trained checkpoint: at iteration 0 a run's clients hold the same
start, and MI is infinite. The full-sample steps are compared with the committed tables'
(figures/digits_lenet_paper[_seedS].csv; they differ by the tie-breaking noise only).

Reads the dumps under runs/digits_lenet_paper/full_26400[_seedS]/dumps/ (made by
``digits_lenet_paper.py --only per-run-augmentation-26400`` and ``per-run-nothing-26400``,
with ``--seed S``); resumable per seed and pair (runs/digits_lenet_paired/). Two distance
matrices of 26,400 runs (11.2 GB) are held at a time. Writes figures/digits_lenet_paired.csv,
its sidecar and docs/results/tables/digits_lenet_paired.md (with --out DIR: into DIR).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import numpy as np
from _results import FIGURES, WORK, portable_record, write_atomic, write_csv, write_page, write_sidecar
from digits_lenet_seeds import detectable

from mianalysis import MarginalDistances
from mianalysis.analysis.familywise import holm
from mianalysis.analysis.intervals import change_test, resample_indices
from mianalysis.dumps import ParameterDump
from mianalysis.estimators.ksg import ksg_estimates_of_subsets
from mianalysis.provenance import collect

SHARED, NOTHING = "per-run-augmentation-26400", "per-run-nothing-26400"
CELLS = (SHARED, NOTHING)
PAIRS = ("0-1", "0-2", "1-2")
SEEDS = (0, 1, 2)
HALVES = 20
K = 3
FIRST_ITERATION = 1  # the first trained checkpoint (iteration 0: one start per run, MI infinite)
ALPHA = 0.05
POWER = 0.8
NAME = "digits_lenet_paired"


def dump_folder(seed: int, work: Path = WORK) -> Path:
    """Where digits_lenet_paper.py keeps the 26,400-run dumps of `seed`."""
    return work / "digits_lenet_paper" / ("full_26400" if seed == 0 else f"full_26400_seed{seed}") / "dumps"


def summary_table(seed: int, folder: Path = FIGURES) -> Path:
    """The committed summary table of digits_lenet_paper.py for `seed`."""
    return folder / ("digits_lenet_paper.csv" if seed == 0 else f"digits_lenet_paper_seed{seed}.csv")


def cell_estimates(dump: ParameterDump, pair: str, iterations, halves: np.ndarray, seed: int) -> np.ndarray:
    """(len(iterations), 1 + len(halves)) KSG estimates in bits of the client `pair` ("a-b")
    of `dump`: at each iteration, of all runs (column 0) and of each half (rows of `halves`)."""
    a, b = pair.split("-")
    subsets = [np.arange(dump.n_runs)] + list(halves)
    out = np.empty((len(iterations), len(subsets)))
    for i, it in enumerate(iterations):
        x, y = (MarginalDistances.of(np.asarray(dump.samples(c, iteration=it), dtype=np.float64), standardize=True,
                                     random_state=np.random.default_rng([seed, it, int(c)])) for c in (a, b))
        out[i] = ksg_estimates_of_subsets(x, y, subsets, k=K)
        del x, y
    return out


def paired_steps(shared: np.ndarray, nothing: np.ndarray, iterations) -> list[dict]:
    """The steps of two cells' estimates (from :func:`cell_estimates`, the same halves) and
    their difference, paired and unpaired: one row per step, into each iteration but the first."""
    out = []
    for i in range(1, len(iterations)):
        step_s, step_n = shared[i] - shared[i - 1], nothing[i] - nothing[i - 1]
        diff = step_s - step_n
        halves = diff.size - 1
        se_s, se_n = step_s[1:].std(ddof=1), step_n[1:].std(ddof=1)
        se = float(diff[1:].std(ddof=1))
        corr = float(np.corrcoef(step_s[1:], step_n[1:])[0, 1]) if se_s > 0 and se_n > 0 else math.nan
        out.append({"iteration": int(iterations[i]), "step_shared": float(step_s[0]), "step_nothing": float(step_n[0]),
                    "difference": float(diff[0]), "se_paired": se, "se_unpaired": float(math.hypot(se_s, se_n)),
                    "correlation": corr, "df": halves - 1, "p": change_test(diff[0], se, halves - 1)})
    return out


def verdicts(rows: list[dict], alpha: float = ALPHA) -> list[dict]:
    """`rows` with Holm's p over all of them, the verdict and the detectable differences."""
    out = [dict(r) for r in rows]
    adjusted = holm([r["p"] for r in out]) if out else []
    for r, p in zip(out, adjusted):
        r["p_holm"] = float(p)
        r["verdict"] = ("no detectable difference" if not p <= alpha else
                        "smaller fall with the augmentation shared" if r["difference"] > 0 else
                        "larger fall with the augmentation shared")
        r["detectable_alone"] = detectable(r["se_paired"], alpha, r["df"], POWER)
        r["detectable_in_family"] = detectable(r["se_paired"], alpha / len(out), r["df"], POWER)
    return out


def table_steps(path: Path, pair: str) -> dict[int, dict[str, float]]:
    """iteration -> cell -> the KSG step into it in a committed summary table."""
    out: dict[int, dict[str, float]] = {}
    with Path(path).open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["cell"] in CELLS and r["quantity"] == "mi_ksg" and r["pair"] == pair and r["iteration"] != "":
                out.setdefault(int(r["iteration"]), {})[r["cell"]] = float(r["step_change"])
    return out


def run_pair(seed: int, pair: str, n_halves: int, work: Path, cache: Path) -> list[dict]:
    """The paired steps of one seed and pair (read back from `cache` when made before)."""
    done = cache / f"seed{seed}_{pair}_{n_halves}.json"
    if done.exists():
        return json.loads(done.read_text())
    dumps = {c: ParameterDump.open(dump_folder(seed, work) / c) for c in CELLS}
    n_runs = {c: d.n_runs for c, d in dumps.items()}
    if len(set(n_runs.values())) != 1 or not all(d.complete for d in dumps.values()):
        raise ValueError(f"seed {seed}: the two cells' dumps are not complete dumps of as many runs ({n_runs})")
    iterations = [it for it in dumps[SHARED].checkpoints if it >= FIRST_ITERATION]
    if dumps[NOTHING].checkpoints != dumps[SHARED].checkpoints:
        raise ValueError(f"seed {seed}: the two cells' dumps have other checkpoints")
    halves = resample_indices(n_runs[SHARED], n_halves, "ksg", random_state=seed)
    start = time.perf_counter()
    estimates = {c: cell_estimates(dumps[c], pair, iterations, halves, seed) for c in CELLS}
    rows = [{"seed": seed, "pair": pair, "runs": n_runs[SHARED], **r}
            for r in paired_steps(estimates[SHARED], estimates[NOTHING], iterations)]
    for r in rows:
        r["seconds_for_pair"] = round(time.perf_counter() - start, 1)
    cache.mkdir(parents=True, exist_ok=True)
    write_atomic(done, json.dumps(rows) + "\n")
    return rows


def _g(v, digits=2):
    return f"{v:.{digits}g}" if math.isfinite(v) else "-"


def markdown(rows: list[dict], checks: dict) -> str:
    """The page: one line per seed, pair and step."""
    lines = [
        "Each step of the KSG MI (bits) in the two per-run cells at 26,400 runs, and their difference (shared "
        "augmentation minus nothing shared: > 0 where the fall is smaller with the augmentation shared), tested "
        f"paired by run over {rows[0]['df'] + 1} halves (t, {rows[0]['df']} df); Holm over all {len(rows)} "
        "pair-steps below. `python experiments/digits_lenet_paired.py`; figures/digits_lenet_paired.csv.", "",
        "| seed | pair | into iteration | step, augmentation shared | step, nothing shared | difference | "
        "se paired | se unpaired | correlation | p | p (Holm) | verdict | detectable at 0.8 power (alone / in "
        "family) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['pair']} | {r['iteration']} | {r['step_shared']:.4f} | "
                     f"{r['step_nothing']:.4f} | {r['difference']:+.4f} | {r['se_paired']:.4f} | "
                     f"{r['se_unpaired']:.4f} | {r['correlation']:.2f} | {_g(r['p'])} | {_g(r['p_holm'])} | "
                     f"{r['verdict']} | {r['detectable_alone']:.4f} / {r['detectable_in_family']:.4f} |")
    lines += ["", f"The full-sample steps here and in the committed tables differ by at most "
              f"{checks['max_step_discrepancy']:.1e} bits over the {checks['steps_compared']} steps both hold "
              "(the tie-breaking noise)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated client pairs (default all)")
    parser.add_argument("--halves", type=int, default=HALVES, help=f"halves of the runs (default {HALVES})")
    parser.add_argument("--work", type=Path, default=WORK, help="the runs/ folder of digits_lenet_paper.py")
    parser.add_argument("--tables", type=Path, default=FIGURES, help="folder of the seeds' summary tables")
    parser.add_argument("--out", type=Path, default=FIGURES, help="where the table and page go")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    pairs = args.pairs.split(",")
    if bad := [p for p in pairs if p not in PAIRS]:
        parser.error(f"unknown pair(s) {', '.join(bad)}: the clients are 0, 1 and 2 ({', '.join(PAIRS)})")
    if args.halves < 3:
        parser.error(f"--halves must be at least 3 (got {args.halves})")
    missing = [f"{dump_folder(s, args.work) / c}" for s in seeds for c in CELLS if not (dump_folder(s, args.work) / c).exists()]
    if missing:
        parser.error(f"no dump at {', '.join(missing)}: run experiments/digits_lenet_paper.py --only {SHARED} "
                     f"and --only {NOTHING} with the seed first")
    cache = args.work / NAME
    rows = []
    for s in seeds:
        for p in pairs:
            rows += run_pair(s, p, args.halves, args.work, cache)
            print(f"seed {s}, pair {p}: done", flush=True)
    rows = verdicts(rows)
    discrepancies = []  # |this script's full-sample step - the committed table's| where the table has it
    for s in seeds:
        for p in pairs:
            steps = table_steps(summary_table(s, args.tables), p)
            for r in (r for r in rows if r["seed"] == s and r["pair"] == p):
                table = steps.get(r["iteration"], {})
                discrepancies += [abs(r[column] - table[cell]) for column, cell in
                                  (("step_shared", SHARED), ("step_nothing", NOTHING)) if cell in table]
    checks = {"max_step_discrepancy": max(discrepancies, default=math.nan), "steps_compared": len(discrepancies)}
    fields = ["seed", "pair", "runs", "iteration", "step_shared", "step_nothing", "difference", "se_paired",
              "se_unpaired", "correlation", "df", "p", "p_holm", "verdict", "detectable_alone", "detectable_in_family",
              "seconds_for_pair"]
    csv_path = write_csv(rows, args.out / f"{NAME}.csv", fieldnames=fields, float_format=".6g")
    write_sidecar(csv_path, portable_record({
        "command": f"python experiments/{NAME}.py --seeds {args.seeds} --pairs {args.pairs} --halves {args.halves}",
        "cells": list(CELLS), "k": K, "halves": args.halves, "alpha": ALPHA, "power": POWER,
        "family": "Holm over every seed, pair and step in the table", "checks": checks,
        "provenance": collect(finished=True)}))
    write_page(args.out, NAME, markdown(rows, checks))
    print(f"wrote {csv_path} and its page")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
