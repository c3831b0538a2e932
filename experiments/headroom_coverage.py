"""Do headroom's 95 % intervals cover the exact ratio? Fresh gaussian-sgd cases and identical-client controls.

gaussian-sgd knows the exact joint law of its clients' errors ``e_k = theta_k - theta*`` at
every checkpoint (`GaussianSGDTask.exact_error_moments`: Gaussian, with that mean and
covariance), so it knows every rule's exact MSE ratio to the plain average's: of the rule's
oracle weights for a fitted rule (`oracle_weights`), of its own weights for "curvature".
Each replication here draws n runs of the K clients' errors directly from that law (the
sampler's dumps hold draws of the same law, rounded to float32, at far more cost), measures
them with `mianalysis.analysis.studies.headroom.headroom_rows` (2 folds, 95 %) and records
whether each rule's fit-corrected ratio interval (`ratio_corrected_low`, `ratio_corrected_high`)
covers the exact ratio, to a relative 1e-9 (rounding: a fixed rule on identical clients
has an interval [R, R] at R = 1 +- 1e-16).

Cases: 48 fresh designs drawn at random (seed 2051) from d in {2, 3, 5, 8, 12, 20}, 2-5
clients, gradient noise sigma {0.3, 1, 3}, target spread tau {0.5, 1, 2}, noise correlation
rho {0, 0.3, 0.8}, step eta {0.05, 0.1, 0.2}, rotated or diagonal curvatures, heterogeneity 1
or 0.5, iteration {1, 2, 5, 10, 20, 40}, shared streams (none, data, noise, both), a per-run
or fixed start, 200-2000 runs, each with data seed 1000 + its index (federations no other
result uses); 12 identical-client controls drawn the same way with heterogeneity 0 (every
client the same curvature and mean, the clients exchangeable: the exact ratio of every rule
is 1, checked to 1e-9) and not both streams shared (that makes the clients equal in every
run, and every interval [1, 1]). A design whose errors' second moment has a condition number
above 1e8 is drawn again (a combination then cancels the errors almost exactly). Rules:
inverse_variance, blue_coordinate, curvature, and blue where its second moment is not shrunk
(more than 2 K d fitting runs), so that it has a fit-corrected ratio.

Two intervals are compared on the same draws: the **jackknife** interval headroom_rows gives
(delete-a-group jackknife of the whole cross-fit, weights refitted, t quantile; the
inverse-variance correction its bias estimate), and the **delta** interval it gave before (the
paired delta-method interval over the scored runs, weights taken as fixed, divided by the
Gaussian-formula `fitting_inflation` for blue and blue_coordinate, uncorrected for
inverse_variance), recomputed here from the same cross-fitted weights.

    python experiments/headroom_coverage.py [--reps 1000] [--quick]

Writes figures/headroom_coverage/headroom_coverage.csv (one row per case and rule: coverage of each interval
with its 95 % Clopper-Pearson interval, Holm's verdict on under-coverage, how often the
interval lies above or below the exact ratio, the estimate's mean and sd), its sidecar
figures/headroom_coverage/headroom_coverage.csv.json and the page docs/results/tables/headroom_coverage.md
(--quick: 4 + 2 cases, 5 replications, at most 400 runs, into *_quick.*; --out DIR: all of
them into DIR).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
from _results import figures_of, write_csv, write_page, write_sidecar
from _stats import clopper_pearson
from scipy.stats import binom

from mianalysis.analysis.inference.familywise import holm
from mianalysis.analysis.studies.headroom import (combination_mse, combine_errors, fitting_inflation, headroom_rows,
                                                  oracle_weights, ratio_interval, rule_weights)
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/headroom_coverage/: where this script writes

LEVEL = 0.95
FOLDS = 2
SEED = 2051
FRESH, CONTROLS = 48, 12
TOLERANCE = 1e-9  # relative: rounding
MAX_CONDITION = 1e8
CHOICES = {"d": (2, 3, 5, 8, 12, 20), "n_clients": (2, 3, 4, 5), "sigma": (0.3, 1.0, 3.0), "tau": (0.5, 1.0, 2.0),
           "rho": (0.0, 0.3, 0.8), "eta": (0.05, 0.1, 0.2), "curvature": ("rotated", "diagonal"),
           "heterogeneity": (1.0, 0.5), "iteration": (1, 2, 5, 10, 20, 40),
           "shared": ((), ("data",), ("noise",), ("data", "noise")), "init": ("per-run", "fixed"),
           "n_runs": (200, 400, 1000, 2000)}
KINDS = ("fresh", "identical clients")
METHODS = ("jackknife", "delta")
RULES = ("inverse_variance", "blue_coordinate", "blue", "curvature")


def _pick(rng, key, choices):
    values = choices[key]
    return values[int(rng.integers(len(values)))]


def draw_cases(n_fresh=FRESH, n_controls=CONTROLS, *, seed=SEED, max_runs=None):
    """The cases: dicts of the design (task settings, init, shared, iteration, runs), the
    exact moments of the errors, the rules measured and their exact ratios; and how many
    designs were drawn again (ill-conditioned)."""
    rng = np.random.default_rng(seed)
    choices = dict(CHOICES)
    if max_runs is not None:
        choices["n_runs"] = tuple(n for n in CHOICES["n_runs"] if n <= max_runs)
    cases, redrawn = [], 0
    for kind, count in zip(KINDS, (n_fresh, n_controls)):
        while sum(c["kind"] == kind for c in cases) < count:
            index = len(cases)
            case = {"case": index, "kind": kind, **{k: _pick(rng, k, choices) for k in choices}}
            if kind == KINDS[1]:
                case["heterogeneity"] = 0.0
                if case["shared"] == ("data", "noise"):
                    redrawn += 1
                    continue
            case["data_seed"] = 1000 + index
            task = get_task("gaussian-sgd", n_iterations=case["iteration"], data_seed=case["data_seed"],
                            **{k: case[k] for k in ("d", "n_clients", "sigma", "tau", "rho", "eta", "curvature",
                                                    "heterogeneity")})
            mean, cov = task.exact_error_moments(case["iteration"], init=case["init"], shared=case["shared"])
            eigenvalues = np.linalg.eigvalsh(cov + np.outer(mean.ravel(), mean.ravel()))
            if eigenvalues.min() * MAX_CONDITION <= eigenvalues.max():
                redrawn += 1
                continue
            k, d, n = case["n_clients"], case["d"], case["n_runs"]
            blue = np.isfinite(fitting_inflation("blue", k, d, n - -(-n // FOLDS)))  # unshrunk, n_fit > q + 1
            case["rules"] = [r for r in RULES if r != "blue" or blue]
            curvature = task.curvature_weights()
            base = combination_mse(np.full((k, d), 1.0 / k), mean, cov)
            exact = {r: combination_mse(curvature if r == "curvature" else oracle_weights(r, mean, cov), mean, cov)
                     / base for r in case["rules"]}
            if kind == KINDS[1]:
                off = {r: v for r, v in exact.items() if abs(v - 1) > TOLERANCE}
                if off:
                    raise RuntimeError(f"case {index}: identical clients, yet exact ratios {off} differ from 1")
                exact = dict.fromkeys(exact, 1.0)
            case.update(moments=(mean, cov), curvature_weights=curvature, exact=exact)
            cases.append(case)
    return cases, redrawn


def _draw_errors(root, mean, n, rng):
    """n runs of the errors (K, n, d): ``mean + root z``."""
    k, d = mean.shape
    z = rng.standard_normal((n, k * d)) @ root.T + mean.ravel()
    return z.reshape(n, k, d).transpose(1, 0, 2)


def _delta_interval(rule, row, e, base):
    """The interval headroom_rows gave before the jackknife: the paired delta-method interval of
    the cross-fitted ratio (weights as fixed), divided by the Gaussian-formula inflation for
    blue and blue_coordinate (the row's), not corrected for inverse_variance."""
    if rule == "curvature":
        return row["ratio_corrected_low"], row["ratio_corrected_high"]  # fixed weights: the same delta method
    n = e.shape[1]
    fold = np.arange(n) % FOLDS
    per_run = np.empty(n)
    for f in range(FOLDS):
        per_run[fold == f] = combine_errors(rule_weights(rule, e[:, fold != f]), e[:, fold == f])
    ratio, low, high = ratio_interval(per_run, base, LEVEL)
    if not math.isclose(ratio, row["ratio"], rel_tol=1e-9):
        raise RuntimeError(f"{rule}: the recomputed cross-fit ({ratio}) is not headroom_rows' ({row['ratio']})")
    inflation = 1.0 if rule == "inverse_variance" else row["fit_inflation"]
    return low / inflation, high / inflation


def case_rows(case, reps, *, seed=SEED):
    """One row per rule of `case`: each interval's coverage of the exact ratio over `reps`
    independent replications."""
    mean, cov = case["moments"]
    values, vectors = np.linalg.eigh(cov)
    root = vectors * np.sqrt(np.clip(values, 0, None))
    found = {r: [] for r in case["rules"]}
    for rep in range(reps):
        rng = np.random.default_rng([seed, case["case"], rep])
        e = _draw_errors(root, mean, case["n_runs"], rng)
        base = combine_errors(rule_weights("mean", e), e)
        rows = headroom_rows(e, rules=["mean", *case["rules"]], folds=FOLDS, level=LEVEL,
                             fixed_weights={"curvature": case["curvature_weights"]})
        for row in rows[1:]:
            rule = row["rule"]
            delta = _delta_interval(rule, row, e, base)
            found[rule].append((row["ratio_corrected"], row["ratio_corrected_low"], row["ratio_corrected_high"],
                                *delta, row["fit_inflation"]))
    design = {k: case[k] for k in ("case", "kind", "d", "n_clients", "n_runs", "iteration", "init")}
    design |= {"shared": "+".join(case["shared"]) or "none",
               **{k: case[k] for k in ("sigma", "tau", "rho", "eta", "curvature", "heterogeneity", "data_seed")}}
    out = []
    for rule, got in found.items():
        est, jk_low, jk_high, dl_low, dl_high, inflation = np.array(got, dtype=float).T
        exact = case["exact"][rule]
        tol = TOLERANCE * abs(exact)
        row = {**design, "rule": rule, "ratio_exact": exact, "reps": reps,
               "estimate_mean": float(est.mean()), "estimate_sd": float(est.std(ddof=1)) if reps > 1 else np.nan,
               "bias": float(est.mean() - exact), "fit_inflation_mean": float(np.mean(inflation))}
        for method, low, high in (("jackknife", jk_low, jk_high), ("delta", dl_low, dl_high)):
            above, below = low - tol > exact, high + tol < exact
            hits = int(np.sum(~above & ~below))
            row |= {f"{method}_hits": hits, f"{method}_coverage": hits / reps,
                    f"{method}_coverage_low": clopper_pearson(hits, reps, LEVEL)[0],
                    f"{method}_coverage_high": clopper_pearson(hits, reps, LEVEL)[1],
                    f"{method}_above": int(above.sum()), f"{method}_below": int(below.sum()),
                    f"{method}_mean_width": float(np.mean(high - low)),
                    f"{method}_p_under": float(binom.cdf(hits, reps, LEVEL))}  # P(X <= hits) at 95 % coverage
        out.append(row)
    return out


def add_holm(rows):
    """Holm over all (case, rule) rows of each interval: ``METHOD_under_holm``, whether the
    case's coverage is below 95 % at family-wise level 0.05."""
    for method in METHODS:
        adjusted = holm([r[f"{method}_p_under"] for r in rows])
        for r, p in zip(rows, adjusted):
            r[f"{method}_under_holm"] = bool(p <= 1 - LEVEL)
    return rows


def summary(rows):
    """{(kind, rule or "all"): {method: (hits, total, coverage, low, high, above, below, pairs, under),
    "width_ratio": median over the pairs of the jackknife's mean width over the delta's}} from the rows (as written
    or read back from the CSV: numbers as text); pairs: the (case, rule) rows pooled, under: those of them whose
    coverage Holm finds below 95 %."""
    out = {}
    for kind in KINDS:
        for rule in (*RULES, "all"):
            chosen = [r for r in rows if r["kind"] == kind and (rule == "all" or r["rule"] == rule)]
            if not chosen:
                continue
            cell = {}
            for method in METHODS:
                hits = sum(int(r[f"{method}_hits"]) for r in chosen)
                total = sum(int(r["reps"]) for r in chosen)
                above = sum(int(r[f"{method}_above"]) for r in chosen)
                below = sum(int(r[f"{method}_below"]) for r in chosen)
                under = sum(str(r[f"{method}_under_holm"]) == "True" for r in chosen)
                cell[method] = (hits, total, hits / total, *clopper_pearson(hits, total, LEVEL), above, below,
                                len(chosen), under)
            widths = [float(r["jackknife_mean_width"]) / float(r["delta_mean_width"]) for r in chosen
                      if float(r["delta_mean_width"]) > 0]
            cell["width_ratio"] = float(np.median(widths)) if widths else float("nan")
            out[kind, rule] = cell
    return out


def _coverage(cell):
    hits, total, cov, low, high = cell[:5]
    return f"{100 * cov:.1f} % [{100 * low:.1f}, {100 * high:.1f}] ({hits}/{total})"


def _ratio(value):
    return f"{value:.2f}" if np.isfinite(value) else "-"  # "-": zero widths (identical combinations)


def page(rows, reps, command, redrawn):
    """The Markdown page: coverage per kind and rule (both intervals), then each case."""
    table = summary(rows)
    n_cases = {kind: len({int(r["case"]) for r in rows if r["kind"] == kind}) for kind in KINDS}
    lines = [f"Coverage of the exact ratio to averaging's MSE by headroom's 95 % fit-corrected intervals "
             f"(`ratio_corrected_low`, `ratio_corrected_high`) on gaussian-sgd: {n_cases[KINDS[0]]} fresh designs and "
             f"{n_cases[KINDS[1]]} identical-client controls (exact ratio 1 for every rule), {reps} independent "
             "replications each, the clients' errors drawn from the task's exact Gaussian law "
             f"({redrawn} ill-conditioned designs drawn again). Coverage pooled over the cases' replications with its "
             "95 % Clopper-Pearson interval; *jackknife*: the interval `headroom_rows` gives (delete-a-group "
             "jackknife of the cross-fit, weights refitted); *delta*: the interval it gave before (delta method over "
             "the scored runs, weights as fixed; inverse_variance uncorrected). Above / below: replications whose "
             "interval lies wholly above / below the exact ratio. Under 95 %: the (case, rule) pairs whose coverage "
             "is below 95 % by a one-sided binomial test, Holm over all pairs at 0.05, of the pairs pooled in the "
             "row. Width: the median over the row's pairs of the jackknife interval's mean width over the delta "
             f"interval's (curvature, fixed weights: the same interval). Made by `{command}`.", "",
             "| cases | rule | jackknife coverage | above / below | under 95 % | delta coverage | above / below "
             "| under 95 % | width, jackknife / delta |", "|---|---|---|---|---|---|---|---|---|"]
    for (kind, rule), cell in table.items():
        jk, dl = cell["jackknife"], cell["delta"]
        lines.append(f"| {kind} | {rule} | {_coverage(jk)} | {jk[5]} / {jk[6]} | {jk[8]} of {jk[7]} | {_coverage(dl)} "
                     f"| {dl[5]} / {dl[6]} | {dl[8]} of {dl[7]} | {_ratio(cell['width_ratio'])} |")
    lines += ["", "Each case (coverage in %, jackknife / delta; IV inverse_variance, BC blue_coordinate, curv "
              "curvature):", "",
              "| case | kind | d | K | runs | iteration | start | shared | sigma | tau | rho | eta | curvature "
              "| heterogeneity | IV | BC | blue | curv |", "|---" * 18 + "|"]
    short = {"inverse_variance": "IV", "blue_coordinate": "BC", "blue": "blue", "curvature": "curv"}
    for case in dict.fromkeys(int(r["case"]) for r in rows):
        mine = {r["rule"]: r for r in rows if int(r["case"]) == case}
        first = next(iter(mine.values()))
        cells = " | ".join(f"{100 * float(mine[rule]['jackknife_coverage']):.0f} / "
                           f"{100 * float(mine[rule]['delta_coverage']):.0f}" if rule in mine else "-"
                           for rule in short)
        lines.append(f"| {case} | {first['kind']} | {first['d']} | {first['n_clients']} | {first['n_runs']} | "
                     f"{first['iteration']} | {first['init']} | {first['shared']} | {first['sigma']} | {first['tau']} "
                     f"| {first['rho']} | {first['eta']} | {first['curvature']} | {first['heterogeneity']} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="4 + 2 cases, 5 replications, into figures/*_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # small products: more threads only contend on a shared machine
        run(args)


def run(args):
    """Measure every case and write the table, its sidecar and the page."""
    started = utc_now()
    reps = 5 if args.quick else args.reps
    name = "headroom_coverage_quick" if args.quick else "headroom_coverage"
    command = "python experiments/headroom_coverage.py" + (" --quick" if args.quick else
                                                           "" if reps == 1000 else f" --reps {reps}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases, redrawn = draw_cases(4, 2, max_runs=400) if args.quick else draw_cases()
    rows, seconds = [], {}
    for case in cases:
        start = time.perf_counter()
        rows += case_rows(case, reps)
        seconds[str(case["case"])] = round(time.perf_counter() - start, 1)
        print(f"case {case['case']:3d} ({case['kind']}, d {case['d']}, K {case['n_clients']}, {case['n_runs']} runs) "
              f"{seconds[str(case['case'])]:7.1f} s", flush=True)
    add_holm(rows)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    text = page(rows, reps, command, redrawn)
    write_page(out, name, text)
    write_sidecar(table, {"table": table.name, "reps": reps, "level": LEVEL, "folds": FOLDS, "seed": SEED,
                          "fresh_cases": sum(c["kind"] == KINDS[0] for c in cases),
                          "control_cases": sum(c["kind"] == KINDS[1] for c in cases), "redrawn": redrawn,
                          "choices": {k: [list(v) if isinstance(v, tuple) else v for v in vs]
                                      for k, vs in CHOICES.items()},
                          "tolerance": TOLERANCE, "max_condition": MAX_CONDITION, "command": command,
                          "sampling": "independent draws of the errors from the task's exact Gaussian law "
                                      "(exact_error_moments), not dumps",
                          "seconds": seconds, "provenance": collect(started, finished=True)})
    print(text)


if __name__ == "__main__":
    main()
