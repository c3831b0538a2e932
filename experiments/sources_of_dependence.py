"""Where dependence between clients comes from: a factorial experiment.

The core paper reports MI between clients positive and rising while their distances grow.
Whether MI can rise at all depends on which random streams the clients of a run share
(docs/concepts/dependence.md, "Where dependence between clients comes from"): with a per-run start and nothing
else shared it can only fall; with a fixed start and nothing shared it is exactly 0. This
script crosses the start (per-run, fixed) with what the clients of a run share, on:

- signal-rnn, preset `paper` (2 iterations per epoch), 2,000 runs per cell, seeds 0-2;
  shared: nothing / order + dropout / data + order + dropout;
- the same at the core paper's scale (part `signal-paper-22000`): 22,000 runs per cell,
  seeds 0-2 (24-30 minutes per cell, sampling and analysis, on 2 cores shared with other
  work; `seconds` in the sidecar; `--skip-missing` assembles the cells done so far);
- gaussian-sgd, preset `paper` (d = 20, 40 steps, checkpoints every 10), 2,000 runs per
  cell, seeds 0-2; shared: nothing / noise / data + noise; its exact MI is drawn beside the
  estimates;
- signal-rnn, preset `long` (16 iterations, checkpoints every 4), 1,000 runs per cell, seeds
  0-2 (at 1,000 runs of 358 + 358 parameters the Gaussian estimate is a shrinkage estimate,
  so this part has KSG and distance verdicts only); the same three levels of sharing.

Every cell is analysed with `mianalysis.analyze`: Gaussian MI (bias-corrected where runs >
2 x joint dimensions, with its analytic null) and KSG MI (k = 3, standardised, 100
permutations), the three distances, a confidence interval on every estimate and on every
change between consecutive checkpoints, and a verdict per step (rising / falling / no
detectable change, from the intervals; none from a shrinkage estimate). Per cell the table
holds, for every quantity, the overall trend over the steps after the first trained
checkpoint and the verdict of each step for each client pair, and the additive-noise
model's predicted MI change (see mianalysis.analysis.studies.additive, where present).

    python experiments/sources_of_dependence.py [--quick] [--only signal-paper,signal-paper-22000,gaussian,signal-long]
        [--carry-over figures/sources_of_dependence/sources_of_dependence.csv] [--skip-missing]

Resumable per cell: dumps and tables go to runs/sources_of_dependence/ (a finished cell is
read back, an interrupted one resumed). Writes figures/sources_of_dependence/sources_of_dependence.{csv,png}
(`_quick` with --quick) with provenance and each cell's compute time in the .csv.json
sidecar (seconds of the session that finished the cell; null where it was not recorded),
and the page docs/results/tables/sources_of_dependence.md (with --out DIR: all of them
into DIR).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _results import (figures_of, WORK, carried_over_note, carried_over_record, read_earlier, write_csv, write_page,
                      write_sidecar)
from _runner import LEGACY_ESTIMATORS  # the estimators of the committed tables
from _sources_of_dependence_summary import (INITS, PARTS, QUICK, STEP_FIELDS, SUMMARY_COLUMNS, UNCORRECTED, figure,
                                            row_steps, seeds_in, summary_cells)

from mianalysis import ParameterDump, ParameterSampler, analyze
from mianalysis.provenance import collect, utc_now
from mianalysis.analysis.studies.additive_table import additive_prediction_rows
from mianalysis.analysis import AnalysisTable, sidecar_path
from mianalysis.report.experiment import FAMILY, FAMILYWISE, correction_text, overall_trend, trend_steps
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/sources_of_dependence/: where this script writes

QUANTITIES = ("mi_gaussian", "mi_ksg", "mi_exact", "euclidean", "manhattan", "chebyshev")
# The correction of a summary row's `trend` and `steps` (UNCORRECTED in rows of a summary made before it).
CORRECTION = f"{FAMILYWISE}/{FAMILY}"


def cell_name(part, init, shared, seed):
    return f"{part}_{init}_{'+'.join(shared) or 'nothing'}_seed{seed}"


def cell_finished(work, name):
    """Whether cell `name` has its analysis table (and the table's sidecar) in `work`."""
    table = work / f"{name}.csv"
    return table.exists() and sidecar_path(table).exists()


def run_cell(part, spec, init, shared, seed, work):
    """Sample and analyse one cell (resumed where it stopped); its analysis table."""
    task_name, preset, settings, every, runs, _, _ = spec
    task = get_task(task_name, preset, **settings)
    name = cell_name(part, init, shared, seed)
    table = work / f"{name}.csv"
    timing = work / f"{name}.seconds.json"  # the cell's own compute time, kept for a later read-back
    if cell_finished(work, name):
        seconds = json.loads(timing.read_text())["seconds"] if timing.exists() else None
        return AnalysisTable.read(table), ParameterDump.open(work / "dumps" / name), seconds
    start = time.perf_counter()
    sampler = ParameterSampler(task, seed=seed, init=init, shared=shared, every=every, progress=False)
    dump = sampler.sample(runs, work / "dumps" / name)
    rows = analyze(dump, estimators=LEGACY_ESTIMATORS, n_permutations={"ksg": 100}, gaussian_null="analytic",
                   random_state=seed, out=table)
    seconds = round(time.perf_counter() - start, 1)  # this session's part only, if the cell was resumed
    timing.write_text(json.dumps({"seconds": seconds}))
    return rows, dump, seconds


def additive_rows(rows, dump):
    """Per client pair: the additive-noise model's verdict on every step after the first
    trained checkpoint, from the Gaussian estimate's paired interval of the change."""
    out = {}
    try:
        predictions = additive_prediction_rows(rows, dump)
    except ValueError as exc:  # e.g. too few runs for the covariances, no Gaussian rows
        return {"error": str(exc)}
    trained = sorted({r["iteration"] for r in rows if r["iteration"] > 0})
    for p in predictions:
        if p["layer"] or not trained or p["iteration_from"] < trained[0]:
            continue
        out.setdefault(f"{p['client_a']}-{p['client_b']}", []).append(p)
    return out


def cell_rows(part, spec, init, shared, seed, rows, dump):
    """One summary row per quantity and client pair of a cell: the values at the first
    trained and the last checkpoint, the overall trend and the step verdicts; and one row
    "additive_model" per pair: whether any step contradicts the additive-noise model."""
    task_name, preset, _, _, runs, _, _ = spec
    out = []
    base = {"part": part, "task": task_name, "preset": preset, "init": init, "shared": "+".join(shared) or "nothing",
            "seed": seed, "runs": runs}
    for pair, steps in additive_rows(rows, dump).items():
        if pair == "error":
            continue
        bad = [p for p in steps if p["verdict"] == "contradicted"]
        unknown = [p for p in steps if p["verdict"] in ("", "not decided")]
        trend = "contradicted" if bad else "not contradicted" if not unknown else "not decided"
        reasons = "; ".join(sorted({p["note"] or "no interval" for p in unknown}))
        out.append({**base, "quantity": "additive_model", "pair": pair, "first_iteration": steps[0]["iteration_from"],
                    "first_value": steps[0]["predicted_change"], "last_iteration": steps[-1]["iteration"],
                    "last_value": steps[-1]["predicted_change"], "last_ci_low": steps[-1]["estimated_ci_low"],
                    "last_ci_high": steps[-1]["estimated_ci_high"], "trend": trend,
                    "steps": "; ".join(f"{p['iteration']}: predicted {p['predicted_change']:.3g}, estimated "
                                       f"{p['estimated_change']:.3g} [{p['estimated_ci_low']:.3g}, "
                                       f"{p['estimated_ci_high']:.3g}] {p['verdict']}" for p in steps),
                    "note": "values: the additive model's predicted change of the Gaussian MI per step"
                            + (f"; not decided: {reasons}" if unknown and not bad else ""),
                    **{k: "" for k in STEP_FIELDS}})
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != "" and not r.get("layer")})
    for q in QUANTITIES:
        for a, b in pairs:
            series = [r for r in rows.select(q, a, b) if r["iteration"] > 0 and not r.get("layer")]
            if not series:
                continue
            first, last = series[0], series[-1]
            detail = {k: "" for k in STEP_FIELDS}
            if q == "mi_exact":
                steps, trend = _exact_steps(series), _exact_trend(series)
                detail["step_change"] = "; ".join(f"{now['iteration']}: {now['value'] - old['value']:.6g}"
                                                  for old, now in zip(series, series[1:]))
            else:  # corrected over the pair's steps (mianalysis.report.experiment.trend_steps)
                corrected = trend_steps(rows, q, a, b)
                steps = [(r["iteration"], v) for r, _, v in corrected]
                trend = overall_trend(v for _, v in steps)
                detail = {"correction": CORRECTION,
                          "steps_uncorrected": "; ".join(f"{r['iteration']}: {r['verdict']}" for r, _, _ in corrected),
                          **{name: "; ".join(f"{r['iteration']}: {value:.6g}" for r, value in pairs)
                             for name, pairs in (("step_change", [(r, r["value"]) for r, _, _ in corrected]),
                                                 ("step_se", [(r, r["change_se"]) for r, _, _ in corrected]),
                                                 ("step_p", [(r, r["change_p"]) for r, _, _ in corrected]),
                                                 ("step_ci_low", [(r, r["ci_low"]) for r, _, _ in corrected]),
                                                 ("step_ci_high", [(r, r["ci_high"]) for r, _, _ in corrected]),
                                                 ("step_p_adjusted", [(r, p) for r, p, _ in corrected]))}}
            out.append({**base, "quantity": q, "pair": f"{a}-{b}", "first_iteration": first["iteration"], "first_value": first["value"],
                        "last_iteration": last["iteration"], "last_value": last["value"],
                        "last_ci_low": last.get("ci_low", np.nan), "last_ci_high": last.get("ci_high", np.nan),
                        "trend": trend, "steps": "; ".join(f"{it}: {v}" for it, v in steps),
                        "note": last["note"], **detail})
    return out


def _exact_steps(series):
    """[(iteration, direction)] of the exact MI's steps, named as the estimates' verdicts."""
    return [(now["iteration"], _direction(old["value"], now["value"])) for old, now in zip(series, series[1:])]


def _direction(old, new):
    if abs(new - old) <= 1e-9 * (1 + abs(old)):
        return "no detectable change"
    return "rising" if new > old else "falling"


def verdict_errors(summary):
    """Markdown lines: how often the step verdicts err where the truth is known. In a cell
    with a fixed start and nothing shared the clients are independent at every checkpoint
    (MI 0 throughout), so every "rising" or "falling" step of an MI estimate is false; on
    gaussian-sgd each estimate's step verdict is compared with the exact MI's step."""
    lines = []
    zero = [row_steps(r) for r in summary if r["init"] == "fixed" and r["shared"] == "nothing"
            and r["quantity"] in ("mi_gaussian", "mi_ksg")]
    made = [v for steps in zero for v in steps.values() if v and not v.startswith("not made")]
    if made:
        wrong = sum(v != "no detectable change" for v in made)
        lines.append(f"- Cells with a fixed start and nothing shared (MI 0 at every checkpoint): {wrong} of "
                     f"{len(made)} step verdicts of the MI estimates say rising or falling (the verdicts of the "
                     "summary's `steps`: per-step 95 % intervals in rows whose `correction` is none, corrected in "
                     "the others; uncorrected, Holm and BH side by side: docs/results/tables/familywise_errors.md).")
    exact = {(r["part"], r["init"], r["shared"], r["seed"], r["pair"]): row_steps(r) for r in summary
             if r["quantity"] == "mi_exact"}
    for q, name in (("mi_gaussian", "Gaussian"), ("mi_ksg", "KSG")):
        against = [(v, exact[key][it]) for r in summary if r["quantity"] == q
                   and (key := (r["part"], r["init"], r["shared"], r["seed"], r["pair"])) in exact
                   for it, v in row_steps(r).items() if it in exact[key] and v and not v.startswith("not made")]
        if against:
            sign = sum(v != "no detectable change" and v != truth for v, truth in against)
            missed = sum(v == "no detectable change" and truth != v for v, truth in against)
            real = sum(truth != "no detectable change" for _, truth in against)
            lines.append(f"- gaussian-sgd, {name} against the exact MI: {len(against)} step verdicts; a change "
                         f"of the wrong sign or where there is none: {sign}; a real change called no detectable "
                         f"change (however small the exact change): {missed} of {real}.")
    unrecorded = sorted({(r["init"], r["shared"], r["seed"]) for r in summary
                         if r["quantity"] == "mi_exact" and not r["steps"]})
    if unrecorded:
        lines.append(f"- gaussian-sgd: {len(unrecorded)} cells (carried over from a table made before the exact MI's "
                     "steps were recorded) are not compared with the exact MI.")
    return ["Where the truth is known:", ""] + lines + [""] if lines else []


def _exact_trend(series):
    values = [r["value"] for r in series]
    diffs = np.diff(values)
    if all(v == "no detectable change" for _, v in _exact_steps(series)):
        return "no change (exact)"
    return "rising (exact)" if np.all(diffs >= 0) else "falling (exact)" if np.all(diffs <= 0) else "mixed (exact)"


def cell_verdict(rows, quantity):
    """The verdict of a cell for one quantity over its client pairs: the pairs' trends if
    they agree, else "mixed over pairs"."""
    trends = {r["trend"] for r in rows if r["quantity"] == quantity}
    if not trends:
        return ""
    if quantity == "additive_model" and len(trends) > 1:
        counts = [(t, sum(r["trend"] == t for r in rows if r["quantity"] == quantity)) for t in sorted(trends)]
        return ", ".join(f"{t} {n}/{sum(n for _, n in counts)}" for t, n in counts)
    return trends.pop() if len(trends) == 1 else "mixed over pairs (" + ", ".join(sorted(trends)) + ")"


def markdown(summary, parts, specs):
    corrected = sorted({r.get("correction", UNCORRECTED) for r in summary if r.get("correction")})
    lines = ["Sources of dependence: per cell (task, start, what a run's clients share, seed), the trend of each "
             "quantity over the steps after the first trained checkpoint, from the p-values of the paired changes "
             f"(from their intervals), {correction_text()} (`correction` {CORRECTION} in the CSV; cells carried over "
             "from a summary made before the correction have `correction` none: each step's 95 % interval alone"
             + (", as here for some cells" if UNCORRECTED in corrected else "") + "; "
             "identical for all three client pairs, else listed). `not made` = no verdict (a "
             "shrinkage Gaussian estimate). Additive-noise model: whether the interval of the Gaussian MI's change "
             "excludes the change that model predicts at some step (contradicted), at none (not contradicted), or "
             "the prediction failed (not decided: e.g. the start estimated from the cross-covariance does not fit the "
             "clients' covariances, or too many bootstrap resamples failed; reasons in the CSV), per client pair. The "
             "verdict comes from `additive_model_test`: a paired bootstrap interval (20 resamples of the runs) of the "
             "estimated minus the bias-corrected predicted change, so the prediction's own sampling error is counted. "
             "The model assumes independent client noise around one start (X = start + e_X, Y = start + e_Y); a cell "
             "whose clients share noise, or whose training maps the start differently per client, breaks it by design. "
             "Made by `python experiments/sources_of_dependence.py`.", ""]
    for part in parts:
        task_name, preset, settings, every, runs, _, _ = specs[part]
        seeds = seeds_in(summary, part, specs)
        lines += [f"### {task_name}, preset {preset}{' ' + json.dumps(settings) if settings else ''}: {runs} runs "
                  f"per cell, checkpoints every {every}, seeds {', '.join(map(str, seeds))}", "",
                  "| start | shared | seed | MI Gaussian | MI KSG | exact MI | Euclidean | Manhattan | Chebyshev | "
                  "additive-noise model |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        cells = sorted({(r["init"], r["shared"], r["seed"]) for r in summary if r["part"] == part},
                       key=lambda c: (INITS.index(c[0]), c[1], c[2]))
        for init, shared, seed in cells:
            mine = [r for r in summary if (r["part"], r["init"], r["shared"], r["seed"]) == (part, init, shared, seed)]
            lines.append(f"| {init} | {shared} | {seed} | " + " | ".join(
                cell_verdict(mine, q) or "-" for q in ("mi_gaussian", "mi_ksg", "mi_exact", "euclidean", "manhattan",
                                                        "chebyshev", "additive_model")) + " |")
        lines.append("")
    return "\n".join(lines + verdict_errors([r for r in summary if r["part"] in parts]))


def not_run_note(cells):
    """The sentence the page ends with when `cells` (names) of the parts asked for were left
    out (``--skip-missing``); "" for none."""
    if not cells:
        return ""
    return "\n\nCells not run yet (left out with `--skip-missing`; no row in the table): " + ", ".join(cells) + "."


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny cells (a minute), into *_quick files")
    parser.add_argument("--only", help="comma-separated parts: " + ", ".join(PARTS))
    parser.add_argument("--work", default=str(WORK / "sources_of_dependence"))
    parser.add_argument("--carry-over", metavar="CSV",
                        help="an earlier summary table of this script (e.g. figures/sources_of_dependence/sources_of_dependence.csv): its "
                             "cells that --work has not finished are read from it instead of rerun; the sidecar and "
                             "the markdown name them and the sidecar keeps that table's provenance")
    parser.add_argument("--skip-missing", action="store_true",
                        help="leave out the cells of the parts asked for that --work has not finished and "
                             "--carry-over does not hold, instead of sampling them (the page and the sidecar name "
                             "them): a summary of what is done while a long part is still being run")
    parser.add_argument("--out", default=str(FIGURES))
    parser.add_argument("--replot", metavar="CSV", help="only draw the figure of this summary table (e.g. "
                        "figures/sources_of_dependence/sources_of_dependence.csv) next to it; nothing is sampled or analysed")
    args = parser.parse_args()
    if args.replot:
        table = Path(args.replot)
        summary = [r for cell in read_earlier(parser, "--replot", table, SUMMARY_COLUMNS, summary_cells)[0].values()
                   for r in cell]
        drawn = [p for p in PARTS if any(r["part"] == p for r in summary)]
        specs = QUICK if table.stem.endswith("_quick") else PARTS
        figure(summary, table.with_suffix(".png"), [p for p in drawn if p in specs], specs)
        print(f"wrote {table.with_suffix('.png')}")
        return
    started = utc_now()
    specs = QUICK if args.quick else PARTS
    parts = [p for p in (args.only.split(",") if args.only else specs) if p]
    unknown = set(parts) - set(specs)
    if unknown:
        parser.error(f"--only: unknown parts {sorted(unknown)}; known: {list(specs)}")
    work = Path(args.work) / ("quick" if args.quick else "full")
    summary, seconds, skipped = [], {}, []
    carried, carried_names, earlier = {}, [], {}
    if args.carry_over:  # read before anything is written: the earlier table may be the one this run replaces
        carried, earlier = read_earlier(parser, "--carry-over", args.carry_over, SUMMARY_COLUMNS, summary_cells)
        for (part, *_), cell in carried.items():
            if part in specs and any((r["task"], r["preset"], r["runs"]) != (specs[part][0], specs[part][1],
                                                                             specs[part][4]) for r in cell):
                r = cell[0]
                parser.error(f"--carry-over: {args.carry_over} holds part {part} as {r['task']} preset {r['preset']} "
                             f"with {r['runs']} runs per cell; this run's part {part} is {specs[part][0]} preset "
                             f"{specs[part][1]} with {specs[part][4]} runs (--quick and full tables do not mix)")
    (work / "dumps").mkdir(parents=True, exist_ok=True)
    for part in parts:
        spec = specs[part]
        for seed in spec[5]:
            for init in INITS:
                for shared in spec[6]:
                    name = cell_name(part, init, shared, seed)
                    key = (part, init, "+".join(shared) or "nothing", seed)
                    if not cell_finished(work, name) and key in carried:
                        summary += carried[key]
                        seconds[name] = earlier.get("seconds", {}).get(name)
                        carried_names.append(name)
                        print(f"{name:55s} carried over from {args.carry_over}", flush=True)
                        continue
                    if args.skip_missing and not cell_finished(work, name):
                        skipped.append(name)
                        print(f"{name:55s} not run (--skip-missing)", flush=True)
                        continue
                    rows, dump, seconds[name] = run_cell(part, spec, init, shared, seed, work)
                    summary += cell_rows(part, spec, init, shared, seed, rows, dump)
                    print(f"{name:55s} " + (f"{seconds[name]:7.1f} s" if seconds[name] is not None else "      - s"),
                          flush=True)
    suffix = "_quick" if args.quick else ""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = write_csv(summary, out / f"sources_of_dependence{suffix}.csv", float_format=".6g")
    md = markdown(summary, parts, specs) + carried_over_note(carried_names) + not_run_note(skipped)
    write_page(out, f"sources_of_dependence{suffix}", md)
    figure(summary, out / f"sources_of_dependence{suffix}.png", parts, specs)
    extra = carried_over_record(args.carry_over, carried_names, earlier)
    write_sidecar(table, {"table": table.name, "parts": parts, "seconds": seconds, **extra,
                          **({"not_run": skipped} if skipped else {}),
                          "provenance": collect(started, finished=True)})
    print(md)


if __name__ == "__main__":
    main()
