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
  :func:`mianalysis.analyze` makes them, but with the tie-breaking noise seeded by seed,
  checkpoint and client only, the same in both cells), and the estimates of `halves` random halves of the
  runs, the same halves in both cells and at every checkpoint
  (:func:`mianalysis.analysis.inference.intervals.resample_indices`);
- the difference of the two cells' steps into iteration t (shared augmentation minus
  nothing shared: positive where the fall is smaller with the augmentation shared), its se
  the sd of that difference over the halves (half-subsampling, as the analysis' KSG
  intervals: the halves' variance is the variance estimate), Student's t with halves - 1
  degrees of freedom;
- the same for the whole change from the first trained checkpoint to the last (the single
  statistic of "the fall is smaller with the augmentation shared", one per seed and pair);
- Holm over every pair-step of every seed made (one family) and over the whole changes
  (another), with the smallest difference each test detects with probability 0.8 at Holm's
  first level and alone;
- for comparison, the unpaired se (the two cells' step se combined as if independent) and
  the correlation of the two cells' steps over the halves: what the pairing changes.

Steps start at the first trained checkpoint: at iteration 0 a run's clients hold the same
start, and MI is infinite. The full-sample steps are compared with the committed tables'
(figures/digits_lenet_paper/digits_lenet_paper[_seedS].csv; they differ by the tie-breaking noise only).

Reads the dumps under runs/digits_lenet_paper/full_26400[_seedS]/dumps/ (made by
``digits_lenet_paper.py --only per-run-augmentation-26400`` and ``per-run-nothing-26400``,
with ``--seed S``); resumable per seed and pair (runs/digits_lenet_paired/). Two distance
matrices of 26,400 runs (11.2 GB) are held at a time. Writes figures/digits_lenet_paired/digits_lenet_paired.csv,
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
from _digits_lenet_files import dump_path, suffix
from _results import figures_of, WORK, portable_record, write_atomic, write_csv, write_page, write_sidecar
from _stats import detectable

from mianalysis import MarginalDistances
from mianalysis.analysis.inference.familywise import holm
from mianalysis.analysis.inference.intervals import change_test, resample_indices
from mianalysis.dumps import ParameterDump
from mianalysis.estimators.ksg import ksg_estimates_of_subsets
from mianalysis.provenance import collect

FIGURES = figures_of(__file__)  # figures/digits_lenet_paired/: where this script writes
PAPER_TABLES = figures_of("digits_lenet_paper")  # digits_lenet_paper.py's summary tables, read here

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


def cell_dump(seed: int, cell: str, work: Path = WORK) -> Path:
    """Where digits_lenet_paper.py sampled `cell` of `seed` (its folder under `work`)."""
    return dump_path(work / "digits_lenet_paper", cell, seed)


def summary_table(seed: int, folder: Path = PAPER_TABLES) -> Path:
    """The committed summary table of digits_lenet_paper.py for `seed`."""
    return folder / f"digits_lenet_paper{suffix(seed)}.csv"


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


def _paired(change_s: np.ndarray, change_n: np.ndarray) -> dict:
    """Two cells' changes (all runs first, then the halves) and their difference, paired and unpaired."""
    diff = change_s - change_n
    halves = diff.size - 1
    se_s, se_n = change_s[1:].std(ddof=1), change_n[1:].std(ddof=1)
    se = float(diff[1:].std(ddof=1))
    corr = float(np.corrcoef(change_s[1:], change_n[1:])[0, 1]) if se_s > 0 and se_n > 0 else math.nan
    return {"step_shared": float(change_s[0]), "step_nothing": float(change_n[0]), "difference": float(diff[0]),
            "se_paired": se, "se_unpaired": float(math.hypot(se_s, se_n)), "correlation": corr, "df": halves - 1,
            "p": change_test(diff[0], se, halves - 1)}


def paired_steps(shared: np.ndarray, nothing: np.ndarray, iterations) -> list[dict]:
    """The changes of two cells' estimates (from :func:`cell_estimates`, the same halves) and
    their difference, paired and unpaired: one row per step (family "steps") and, with more
    than one step, one for the whole change from the first iteration to the last (family
    "whole": the single statistic of "the fall is smaller with the augmentation shared")."""
    out = [{"family": "steps", "from_iteration": int(iterations[i - 1]), "iteration": int(iterations[i]),
            **_paired(shared[i] - shared[i - 1], nothing[i] - nothing[i - 1])} for i in range(1, len(iterations))]
    if len(iterations) > 2:
        out.append({"family": "whole", "from_iteration": int(iterations[0]), "iteration": int(iterations[-1]),
                    **_paired(shared[-1] - shared[0], nothing[-1] - nothing[0])})
    return out


def verdicts(rows: list[dict], alpha: float = ALPHA) -> list[dict]:
    """`rows` with Holm's p over the rows of each family, the verdict and the detectable differences."""
    out = [dict(r) for r in rows]
    for family in sorted({r["family"] for r in out}):
        members = [r for r in out if r["family"] == family]
        for r, p in zip(members, holm([r["p"] for r in members])):
            r["p_holm"] = float(p)
            r["verdict"] = ("no detectable difference" if not p <= alpha else
                            "smaller fall with the augmentation shared" if r["difference"] > 0 else
                            "larger fall with the augmentation shared")
            r["detectable_alone"] = detectable(r["se_paired"], alpha, r["df"], POWER)
            r["detectable_in_family"] = detectable(r["se_paired"], alpha / len(members), r["df"], POWER)
    return out


def table_steps(path: Path, pair: str) -> dict[int, dict[str, float]]:
    """iteration -> cell -> the KSG step into it in a committed summary table."""
    out: dict[int, dict[str, float]] = {}
    with Path(path).open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["cell"] in CELLS and r["quantity"] == "mi_ksg" and r["pair"] == pair and r["iteration"] != "":
                out.setdefault(int(r["iteration"]), {})[r["cell"]] = float(r["step_change"])
    return out


def _cached(path: Path) -> dict | None:
    """The record at `path` if it holds the estimates of this script's settings (else None:
    they are made again)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (isinstance(record, dict) and {"runs", "iterations", "estimates_bits", "seconds"} <= set(record)
            and record.get("k", K) == K and min(record["iterations"]) >= FIRST_ITERATION):
        return record
    return None


def run_pair(seed: int, pair: str, n_halves: int, work: Path, cache: Path) -> list[dict]:
    """The paired rows of one seed and pair, from its estimates (read back from `cache`
    when made before: the estimates of all runs and of each half, and the seconds they took)."""
    done = cache / f"seed{seed}_{pair}_{n_halves}.json"
    record = _cached(done)
    if record is None:
        dumps = {c: ParameterDump.open(cell_dump(seed, c, work)) for c in CELLS}
        n_runs = {c: d.n_runs for c, d in dumps.items()}
        if len(set(n_runs.values())) != 1 or not all(d.complete for d in dumps.values()):
            raise ValueError(f"seed {seed}: the two cells' dumps are not complete dumps of as many runs ({n_runs})")
        if dumps[NOTHING].checkpoints != dumps[SHARED].checkpoints:
            raise ValueError(f"seed {seed}: the two cells' dumps have other checkpoints")
        iterations = [it for it in dumps[SHARED].checkpoints if it >= FIRST_ITERATION]
        halves = resample_indices(n_runs[SHARED], n_halves, "ksg", random_state=seed)
        start = time.perf_counter()
        estimates = {c: cell_estimates(dumps[c], pair, iterations, halves, seed).tolist() for c in CELLS}
        record = {"runs": n_runs[SHARED], "iterations": iterations, "estimates_bits": estimates, "k": K,
                  "seconds": round(time.perf_counter() - start, 1)}
        cache.mkdir(parents=True, exist_ok=True)
        write_atomic(done, json.dumps(record) + "\n")
    est = {c: np.array(v) for c, v in record["estimates_bits"].items()}
    return [{"seed": seed, "pair": pair, "runs": record["runs"], **r, "seconds_for_pair": record["seconds"]}
            for r in paired_steps(est[SHARED], est[NOTHING], record["iterations"])]


def _g(v, digits=2):
    return f"{v:.{digits}g}" if math.isfinite(v) else "-"


def markdown(rows: list[dict], checks: dict) -> str:
    """The page: one line per seed, pair and step, then the whole falls."""
    steps = [r for r in rows if r["family"] == "steps"]
    whole = [r for r in rows if r["family"] == "whole"]
    lines = [
        f"The change of the KSG MI (bits) in the two per-run cells at {rows[0]['runs']:,} runs (seeds "
        f"{', '.join(sorted({str(r['seed']) for r in rows}))}; pairs {', '.join(sorted({r['pair'] for r in rows}))}), "
        "and their difference (shared "
        "augmentation minus nothing shared: > 0 where the fall is smaller with the augmentation shared), tested "
        f"paired by run over {rows[0]['df'] + 1} halves (t, {rows[0]['df']} df): each step (Holm over the "
        f"{len(steps)} steps below) and the whole change from the first trained checkpoint to the last (Holm over "
        f"the {len(whole)} below). `python experiments/digits_lenet_paired.py`; figures/digits_lenet_paired/digits_lenet_paired.csv.", "",
        "| seed | pair | iterations | change, augmentation shared | change, nothing shared | difference | "
        "se paired | se unpaired | correlation | p | p (Holm) | verdict | detectable at 0.8 power (alone / in "
        "family) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in steps + whole:
        span = f"{r['from_iteration']} -> {r['iteration']}" + (" (whole)" if r["family"] == "whole" else "")
        lines.append(f"| {r['seed']} | {r['pair']} | {span} | {r['step_shared']:.4f} | "
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
    parser.add_argument("--tables", type=Path, default=PAPER_TABLES, help="folder of the seeds' summary tables")
    parser.add_argument("--out", type=Path, default=FIGURES, help="where the table and page go")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    pairs = args.pairs.split(",")
    if bad := [p for p in pairs if p not in PAIRS]:
        parser.error(f"unknown pair(s) {', '.join(bad)}: the clients are 0, 1 and 2 ({', '.join(PAIRS)})")
    if args.halves < 3:
        parser.error(f"--halves must be at least 3 (got {args.halves})")
    missing = [str(cell_dump(s, c, args.work)) for s in seeds for c in CELLS if not cell_dump(s, c, args.work).exists()]
    missing += [str(summary_table(s, args.tables)) for s in seeds if not summary_table(s, args.tables).exists()]
    if missing:
        parser.error(f"no dump or summary table at {', '.join(missing)}: run experiments/digits_lenet_paper.py "
                     f"--only {SHARED} and --only {NOTHING} with the seed first")
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
            for r in (r for r in rows if r["seed"] == s and r["pair"] == p and r["family"] == "steps"):
                table = steps.get(r["iteration"], {})
                discrepancies += [abs(r[column] - table[cell]) for column, cell in
                                  (("step_shared", SHARED), ("step_nothing", NOTHING)) if cell in table]
    checks = {"max_step_discrepancy": max(discrepancies, default=math.nan), "steps_compared": len(discrepancies)}
    fields = ["seed", "pair", "runs", "family", "from_iteration", "iteration", "step_shared", "step_nothing", "difference", "se_paired",
              "se_unpaired", "correlation", "df", "p", "p_holm", "verdict", "detectable_alone", "detectable_in_family",
              "seconds_for_pair"]
    csv_path = write_csv(rows, args.out / f"{NAME}.csv", fieldnames=fields, float_format=".6g")
    write_sidecar(csv_path, portable_record({
        "command": f"python experiments/{NAME}.py --seeds {args.seeds} --pairs {args.pairs} --halves {args.halves}",
        "cells": list(CELLS), "k": K, "halves": args.halves, "alpha": ALPHA, "power": POWER,
        "families": {"steps": "Holm over every seed, pair and step in the table",
                     "whole": "Holm over every seed and pair's whole change (first trained checkpoint to last)"},
        "checks": checks,
        "provenance": collect(finished=True)}))
    write_page(args.out, NAME, markdown(rows, checks))
    print(f"wrote {csv_path} and its page")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
