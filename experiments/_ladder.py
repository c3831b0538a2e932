"""The learning-rate search and the paired comparisons of the aggregation experiments.

One search for every rule of experiments/aggregation_headroom.py and
experiments/aggregation_headroom_quadratic.py: each rule's rate is chosen on one ladder,
stepping outwards from two starting rungs until the best rate tried has a tried (or failed)
neighbour on both sides, so that the choice is interior unless it sits at an end of the
ladder (which the tables flag). :func:`tune` runs that search on tuning seeds and reruns the
chosen rate on separate evaluation seeds, so that the tables' numbers are not those the
rate was picked on (no selection bias). Seeds are paired across rules, so a rule is
compared with FedAvg through the per-seed differences (:func:`paired_columns`,
:func:`bonferroni`, :func:`interval`).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from mianalysis.analysis import sidecar_path
from mianalysis.analysis.inference.intervals import normal_interval

__all__ = ["Diverged", "DidNotTrain", "command_line", "read_results", "search", "tune", "tune_rule", "tried_text", "first_round", "paired", "paired_columns",
           "bonferroni", "interval"]

#: The seeds (the simulators' `seed`) of the search and of the evaluation rerun.
TUNE_SEED, EVAL_SEED = 1, 0


class Diverged(ValueError):
    """A rate that is too large: training diverged (the search steps down from it)."""


class DidNotTrain(ValueError):
    """A rate that is too small: the loss did not fall enough (the search steps up from it)."""


def search(run, ladder, start, *, score, summary):
    """The rate of `ladder` whose result scores best, tried outwards from `start` until the
    best has a tried or failed neighbour on both sides.

    Parameters
    ----------
    run : callable
        ``run(lr) -> dict`` of per-seed arrays; raises :class:`Diverged` or
        :class:`DidNotTrain` where the rate fails (another ValueError counts as diverged).
    ladder : list of float
        The rates, increasing.
    start : list of float
        Rungs of `ladder` tried first.
    score : callable
        ``score(result) -> tuple``, higher is better (ties compare the next entries).
    summary : callable
        ``summary(result) -> dict`` of the numbers every tried rate records (`result` None
        for a failed rate: the same keys, NaN values).

    Returns
    -------
    best : dict or None
        ``{"lr": rate, **run(rate)}`` of the best rate; None where every rate failed.
    tried : list of dict
        One entry per rate tried, in the order tried: ``{"lr", **summary, "diverged",
        "failure"}`` ("diverged": the failure's message, "" where it trained; "failure":
        "diverged", "did not train" or "").
    choice : str
        "interior", "lowest rung of the ladder", "highest rung of the ladder" or "all failed".
    """
    results, tried, failures = {}, [], {}

    def ranked(i):
        return (-np.inf,) if results[i] is None else tuple(score(results[i]))

    def attempt(i):
        try:
            results[i] = {"lr": ladder[i], **run(ladder[i])}
            tried.append({"lr": ladder[i], **summary(results[i]), "diverged": "", "failure": ""})
        except ValueError as exc:
            results[i] = None
            failures[i] = "did not train" if isinstance(exc, DidNotTrain) else "diverged"
            tried.append({"lr": ladder[i], **summary(None), "diverged": str(exc), "failure": failures[i]})

    for lr in start:
        attempt(ladder.index(lr))
    while True:
        fine = [i for i in results if results[i] is not None]
        if not fine:  # everything tried failed: up from a rate too small, down from one too large
            top, bottom = max(results), min(results)
            if failures[top] == "did not train" and top + 1 < len(ladder):
                attempt(top + 1)
            elif bottom > 0:  # a rate too large at the top, or no rung left above: down
                attempt(bottom - 1)
            else:
                return None, tried, "all failed"
            continue
        best = max(fine, key=ranked)
        missing = [j for j in (best - 1, best + 1) if 0 <= j < len(ladder) and j not in results]
        if not missing:
            break
        attempt(missing[0])
    choice = ("lowest rung of the ladder" if best == 0 else
              "highest rung of the ladder" if best == len(ladder) - 1 else "interior")
    return results[best], tried, choice


def tune(run, ladder, start, *, score, summary, tune_seed=TUNE_SEED, eval_seed=EVAL_SEED):
    """:func:`search` on the tuning seeds, then the chosen rate rerun on the evaluation seeds.

    Parameters
    ----------
    run : callable
        ``run(lr, seed) -> dict`` of per-seed arrays (`seed` the simulator's seed, whose
        replicates are the seeds); failures as in :func:`search`.
    ladder, start, score, summary
        As in :func:`search`.
    tune_seed, eval_seed : int
        The seeds of the search and of the rerun (different: the reported numbers are not
        those the rate was chosen on).

    Returns
    -------
    best : dict or None
        ``{"lr": rate, **run(rate, eval_seed)}``; None where every rate failed in the search,
        or the chosen one failed on the evaluation seeds.
    tried : list of dict
        The search's (on the tuning seeds).
    choice : str
        As in :func:`search`, or "failed on the evaluation seeds".
    """
    if tune_seed == eval_seed:
        raise ValueError(f"`tune_seed` and `eval_seed` must differ; both are {tune_seed}")
    best, tried, choice = search(lambda lr: run(lr, tune_seed), ladder, start, score=score, summary=summary)
    if best is None:
        return None, tried, choice
    try:
        return {"lr": best["lr"], **run(best["lr"], eval_seed)}, tried, choice
    except ValueError:
        return None, tried, "failed on the evaluation seeds"


def command_line(argv, doc, stem, *, quick_help, figures):
    """The experiments' shared options (--quick, --out, --replot): (args, name, out folder),
    `name` the files' stem with "_quick" under --quick."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", default=str(figures), help="folder of the table, figure and sidecar")
    parser.add_argument("--replot", action="store_true", help="redraw the figure from the table and sidecar")
    args = parser.parse_args(argv)
    return args, stem + ("_quick" if args.quick else ""), Path(args.out)


def read_results(out, name, *, floats, curve_keys, curve_values):
    """(rows, curves, plan) of a table ``out/NAME.csv`` and its sidecar, as the scripts'
    ``--replot`` draws them: the rows with the columns whose names start with `floats` as
    floats (blanks kept), `curves` keyed by the sidecar curves' `curve_keys` (a pair of
    entry names) holding each curve's `curve_values`, and the sidecar's plan."""
    sidecar = json.loads(sidecar_path(out / f"{name}.csv").read_text())
    with open(out / f"{name}.csv") as fh:
        rows = [{k: (float(v) if k.startswith(floats) and v != "" else v) for k, v in r.items()}
                for r in csv.DictReader(fh)]
    curves = {tuple(c[k] for k in curve_keys): c[curve_values] for c in sidecar["curves"]}
    return rows, curves, sidecar["plan"]


def tune_rule(run, plan, *, score, summary, columns, fields, searches, describe):
    """:func:`tune` one rule on ``plan["ladder"]`` from ``plan["start"]``; every rate tried
    goes to `searches` (with `fields`) and is printed by `describe(tried)`. Returns (best, row):
    a table row of `columns` (blank) with `fields`, "lr_choice", "lrs_tried" and "seconds"."""
    start = time.perf_counter()
    best, tried, choice = tune(run, plan["ladder"], plan["start"], score=score, summary=summary)
    seconds = time.perf_counter() - start
    for t in tried:
        searches.append({**fields, **t})
        print(describe(t), flush=True)
    row = {c: "" for c in columns}
    row.update({**fields, "lr_choice": choice, "lrs_tried": tried_text(tried), "seconds": round(seconds, 1)})
    return best, row


def tried_text(tried):
    """The rates tried, increasing, as the tables print them."""
    return " ".join(str(t["lr"]) for t in sorted(tried, key=lambda t: t["lr"]))


def first_round(hit):
    """Per seed (rows of the boolean array `hit`, seeds x rounds): the first round where it
    holds, NaN where it never does."""
    hit = np.asarray(hit, dtype=bool)
    return np.where(hit.any(1), hit.argmax(1), np.nan).astype(float)


def paired(diff, level=0.95):
    """Mean of paired differences (NaN entries dropped) and its t interval over seeds at
    `level`: (mean, low, high, n)."""
    diff = np.asarray(diff, dtype=float)
    diff = diff[np.isfinite(diff)]
    if diff.size < 2:
        return (float(diff.mean()) if diff.size else float("nan")), float("nan"), float("nan"), int(diff.size)
    low, high = normal_interval(diff.mean(), diff.std(ddof=1) / np.sqrt(diff.size), level, df=diff.size - 1)
    return float(diff.mean()), low, high, int(diff.size)


def paired_columns(row, key, diff, digits, *, min_pairs=0, pairs_key=None):
    """Fill ``row[key]``, ``row[key + "_low"]``, ``row[key + "_high"]`` with :func:`paired` of
    `diff`, rounded to `digits`; left blank where fewer than `min_pairs` seeds give a pair
    (a mean over a few seeds that happened to reach a target is not a comparison). The
    number of pairs goes to ``row[pairs_key]`` if given. Returns that number."""
    mean, low, high, n = paired(diff)
    if n >= max(min_pairs, 1):
        row.update({key: round(mean, digits), f"{key}_low": round(low, digits), f"{key}_high": round(high, digits)})
    else:
        row.update({key: "", f"{key}_low": "", f"{key}_high": ""})
    if pairs_key is not None:
        row[pairs_key] = n
    return n


def bonferroni(rows, per_seed_key, key, digits, *, is_baseline):
    """Fill ``key_bonf_low/high`` of every row with per-seed differences ``row[per_seed_key]``
    (removed from the rows) and not `is_baseline(row)`: the paired t interval at
    1 - 0.05 / m, m the number of such rows (the family of comparisons). Returns m."""
    compared = [r for r in rows if r.get(per_seed_key) is not None and not is_baseline(r)]
    for r in rows:
        per_seed = r.pop(per_seed_key, None)
        if per_seed is not None and not is_baseline(r):
            _, low, high, _ = paired(per_seed, level=1 - 0.05 / len(compared))
            r.update({f"{key}_bonf_low": round(low, digits), f"{key}_bonf_high": round(high, digits)})
    return len(compared)


def interval(r, key, digits, low="low", high="high"):
    """``r[key]`` with its interval ``[r[key_low], r[key_high]]`` as the tables print it: "-"
    for a blank (or FedAvg's own) entry, the mean alone where the interval is undefined."""
    if r[key] == "" or r["aggregator"] == "fedavg" or not np.isfinite(float(r[key])):
        return "-"
    value = float(r[key])
    if r[f"{key}_{low}"] == "" or not np.isfinite(float(r[f"{key}_{low}"])):
        return f"{value:+.{digits}f}"
    return f"{value:+.{digits}f} [{float(r[f'{key}_{low}']):+.{digits}f}, {float(r[f'{key}_{high}']):+.{digits}f}]"
