"""Is averaging the right way to combine the clients? Headroom on signal-rnn and digits-lenet.

Neither task knows where the federation should be, so every run also trains the central
reference client (``ParameterSampler(reference="central")``, ``--reference central``): from
the run's start, the same number of Adam steps as each client, each step on the union of
the three clients' batches of that step (see docs/concepts/headroom.md). `mianalysis.analysis.studies.headroom`
then measures, per checkpoint, the mean squared error (summed over the parameters) of each
combination rule of the three clients to the central client, with its ratio to the plain
average's, paired by run. The fitted rules (inverse_variance, blue_coordinate) are
cross-fitted over 2 folds of runs; "blue" (the full best linear combination) is left out: its
(3 d) x (3 d) second moment (d = 358 and 850) is shrunk at these run counts and takes
minutes per checkpoint. Designs (numbered 0-3 for ``--designs``):

0. signal-rnn, paper settings (100 examples, batch 64: 2 Adam steps of lr 1e-3), per-run start,
   nothing shared;
1. the same with the minibatch order and dropout shared by a run's clients;
2. digits-lenet, paper settings (the pretrained head plus noise, 4 steps of lr 1e-5);
3. digits-lenet "long" (a fresh head, 1000 examples per client, 20 steps of lr 1e-2), checkpoints
   every 5 steps.

Each design is sampled once per seed (``--seeds``, default 0 1 2: the sampler's seed, so each
seed is a new set of runs); a seed's rows are what the one-seed script wrote for that seed.

    python experiments/headroom_tasks.py [--runs 500] [--seeds 0 1 2] [--designs 2 3 ...]
        [--reuse figures/headroom_tasks/headroom_tasks.csv] [--cached-only] [--quick]

Every (design, seed) is kept, once computed, under runs/headroom_tasks/ (ignored by git), and
a rerun takes it from there. ``--reuse CSV`` takes the (design, seed) pairs that a table this
script wrote holds (a table without a ``seed`` column is seed 0) instead of computing them,
after checking that its sidecar has the same runs, rules and designs; where a pair is both
reused and kept, the kept rows are used and compared with the reused ones to the digit the
table holds (the page and the sidecar say whether they are identical: computed on another
CPU they need not be; digits-lenet's pretraining, for one, follows the CPU's code path). ``--cached-only``
computes nothing and writes the pairs at hand. The sidecar records which pairs were
computed, reused, compared or missing.

Writes figures/headroom_tasks/headroom_tasks.csv (one row per design, seed, iteration and rule; iteration 0,
where every error is 0, is left out), figures/headroom_tasks/headroom_tasks_seeds.csv (per design, iteration
and rule: the mean of the seeds' ratios with a t interval over seeds, and whether every
seed's own interval lies below 1), figures/headroom_tasks/headroom_tasks.png (each seed's ratio with its
interval, and the across-seed interval), the sidecars ``*.csv.json`` and the page
docs/results/tables/headroom_tasks.md (with --out DIR: all of them into DIR).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _results import figures_of, WORK, write_atomic, write_csv, write_page, write_sidecar
from scipy import stats

from mianalysis import ParameterSampler, headroom
from mianalysis.analysis import sidecar_path
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/headroom_tasks/: where this script writes

# design -> (task, preset, shared streams, checkpoint every)
DESIGNS = {
    "signal-rnn paper, nothing shared": ("signal-rnn", "paper", (), 1),
    "signal-rnn paper, order and dropout shared": ("signal-rnn", "paper", ("order", "dropout"), 1),
    "digits-lenet paper (pretrained head)": ("digits-lenet", "paper", (), 1),
    "digits-lenet long (fresh head, 20 steps)": ("digits-lenet", "long", (), 5),
}
RULE_LIST = ("mean", "weighted_mean", "inverse_variance", "blue_coordinate")


def design_rows(design, runs, work, seed=0):
    name, preset, shared, every = DESIGNS[design]
    sampler = ParameterSampler(get_task(name, preset), seed=seed, shared=shared, every=every, chunk_size=50,
                               progress=False, reference="central")
    dump = sampler.sample(runs, Path(work) / f"design-{list(DESIGNS).index(design)}")
    rows = headroom(dump, rules=RULE_LIST, iterations=dump.checkpoints[1:])  # the client "central" is the reference
    return [{"design": design, "task": name, "preset": preset, "shared": " ".join(shared), "seed": seed, **r}
            for r in rows]


def _json_default(value):
    """NumPy scalars as Python numbers (float64 is a float already)."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def part_rows(design, seed, runs, cache):
    """(rows, seconds) of one design and seed: from `cache` where an earlier run left them,
    else computed (in a scratch folder removed afterwards) and kept there."""
    path = Path(cache) / f"design-{list(DESIGNS).index(design)}-seed-{seed}-runs-{runs}.json"
    if path.exists():
        record = json.loads(path.read_text())
        return record["rows"], record["seconds"]
    work = tempfile.mkdtemp(prefix="headroom-tasks-")
    try:
        start = time.perf_counter()
        rows = design_rows(design, runs, work, seed)
        seconds = round(time.perf_counter() - start, 1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"design": design, "seed": seed, "runs": runs, "seconds": seconds, "rows": rows},
                                  default=_json_default))
    return json.loads(path.read_text())["rows"], seconds  # as a later run reads them back


def cached(design, seed, runs, cache):
    return (Path(cache) / f"design-{list(DESIGNS).index(design)}-seed-{seed}-runs-{runs}.json").exists()


def _value(text):
    """A CSV cell as this script wrote it: int, float, else the string."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _designs_record():
    return {d: {"task": t, "preset": p, "shared": list(s), "every": e} for d, (t, p, s, e) in DESIGNS.items()}


def reused_rows(path, runs):
    """{(design, seed): rows} of a table this script wrote at `runs` runs (rows without a
    ``seed`` are seed 0), and what its sidecar says of it; its runs, rules and designs must
    be this script's."""
    path = Path(path)
    side = sidecar_path(path)
    if not path.exists() or not side.exists():
        raise ValueError(f"`--reuse`: {path} and its sidecar {side.name} must both exist")
    record = json.loads(side.read_text())
    if record.get("runs") != runs or record.get("rules") != list(RULE_LIST):
        raise ValueError(f"`--reuse`: {path} has runs={record.get('runs')} and rules={record.get('rules')}; "
                         f"this run has runs={runs} and rules={list(RULE_LIST)}")
    designs = _designs_record()
    for design, settings in record.get("designs", {}).items():
        if design in designs and designs[design] != settings:
            raise ValueError(f"`--reuse`: design {design!r} of {path} has settings {settings}, not {designs[design]}")
    parts = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["design"] not in designs:
                continue
            row = {k: _value(v) if k not in ("design", "task", "preset", "shared", "weights", "rule", "reference",
                                             "exact_note", "note") else v for k, v in row.items()}
            row.setdefault("seed", 0)
            row = {k: row[k] for k in ("design", "task", "preset", "shared", "seed")} | row
            parts.setdefault((row["design"], int(row["seed"])), []).append(row)
    return parts, record


def compare(rows, other):
    """Whether `rows` and `other` are the same to the digit the table holds, and the largest
    difference of a ratio between them."""
    same = formatted(rows) == formatted(other)
    diff = max((abs(float(a["ratio"]) - float(b["ratio"])) for a, b in zip(rows, other)), default=float("nan"))
    return {"identical": same and len(rows) == len(other), "max_ratio_difference": _six(diff)}


def original_source(record, pairs):
    """Where reused `pairs` were computed: the table of `record` (its command, commit and
    CPU), or, where that table had reused them all itself, where it says they come from."""
    earlier = record.get("reused_from")
    if earlier and all(list(p) in (record.get("pairs") or {}).get("reused", []) for p in pairs):
        return earlier
    where = record.get("provenance") or {}
    return {"command": record.get("command"), "git_commit": (where.get("mianalysis") or {}).get("git_commit"),
            "cpu": where.get("cpu")}


def _reused_seconds(record, design, seed):
    """A reused pair's time from its table's sidecar: ``seconds[design]`` (a one-seed table:
    seed 0) or ``seconds[design][seed]``; None where it has none."""
    seconds = (record.get("seconds") or {}).get(design)
    if isinstance(seconds, dict):
        return seconds.get(str(seed))
    return seconds if seed == 0 else None


def formatted(rows):
    """The rows as the CSV holds them (floats to 6 significant digits, everything a string)."""
    return [{k: format(v, ".6g") if isinstance(v, float) else str(v) for k, v in r.items()} for r in rows]


def _six(value):
    return float(format(float(value), ".6g"))


def seed_summary(rows):
    """Per design, iteration and rule, across the seeds: the mean of the seeds' ratios (as the
    CSV holds them) with a 95 % t interval over seeds (NaN for one seed), the smallest and
    largest seed's ratio, the largest upper end of a seed's own interval, and whether every
    seed's interval lies below 1."""
    groups = {}
    for r in rows:
        groups.setdefault((r["design"], r["iteration"], r["rule"]), []).append(r)
    out = []
    for (design, iteration, rule), group in groups.items():
        ratios = np.array([_six(r["ratio"]) for r in group])
        highs = np.array([_six(r["ratio_high"]) for r in group])
        n = len(group)
        mean = float(ratios.mean())
        half = float(stats.t.ppf(0.975, n - 1) * ratios.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
        first = group[0]
        out.append({"design": design, "task": first["task"], "preset": first["preset"], "shared": first["shared"],
                    "iteration": iteration, "rule": rule, "weights": first["weights"], "n_seeds": n,
                    "seeds": " ".join(str(r["seed"]) for r in group), "ratio_mean": mean,
                    "ratio_mean_low": mean - half, "ratio_mean_high": mean + half,
                    "ratio_min": float(ratios.min()), "ratio_max": float(ratios.max()),
                    "seed_high_max": float(highs.max()), "every_seed_below_1": bool((highs < 1).all())})
    return out


def markdown(rows, summary, runs, seeds, missing, command, origin=None, checked=(), reused_source=None):
    lines = [f"Headroom over the plain average on signal-rnn and digits-lenet (3 clients; {runs} runs per design "
             f"and seed, seeds {' '.join(map(str, seeds))}, per-run start). The reference of each run is its "
             "**central client**: the run's start "
             "trained with the same number of steps as each client, every step on the union of the clients' "
             "batches of that step. MSE = E||sum_k W_k theta_k - theta_central||^2, summed over the parameters "
             "(358 for signal-rnn, 850 for digits-lenet's last layer); means over runs with 95 % normal "
             "intervals, ratios to the mean's MSE paired by run (delta method). inverse_variance and "
             "blue_coordinate are **cross-fitted** (weights fitted on one half of the runs, scored on the other, "
             "halves swapped); the corrected ratio divides blue_coordinate's by what fitting costs on jointly "
             "Gaussian errors (`mianalysis.analysis.studies.headroom.fitting_inflation`); weighted_mean is the mean here (equal "
             f"client sizes). Made by `{command}`."]
    reused = (origin or {}).get("reused")
    if reused:
        source = reused_source or {}
        lines += ["", f"Reused from an earlier table (`{source.get('command')}`, commit "
                  f"{str(source.get('git_commit'))[:7]}, CPU {source.get('cpu')}), not computed by this run: "
                  + "; ".join(f"{d} seed {s}" for d, s in reused) + "."]
    for c in checked:
        lines += ["", f"{c['design']} seed {c['seed']}, computed here and held by the reused table too: "
                  + ("identical to the digit the table holds." if c["identical"] else
                     f"**not identical** (largest ratio difference {c['max_ratio_difference']:.3g}); the rows computed "
                     "here are used.")]
    if missing:
        lines += ["", "**Not computed** (design: seeds): " + "; ".join(
            f"{d}: {' '.join(map(str, s))}" for d, s in missing.items()) + "."]
    lines += ["", "Across seeds (fitted rules; the mean is 1 by definition and weighted_mean equals it): the mean "
              "of the seeds' ratios with a 95 % t interval over seeds, each seed's ratio, and whether every "
              "seed's own 95 % interval lies below 1.", "",
              "| design | iteration | rule | seeds | mean ratio [95 % t over seeds] | per seed | every seed below 1 |",
              "|---|---|---|---|---|---|---|"]
    for s in summary:
        if s["rule"] in ("mean", "weighted_mean"):
            continue
        per_seed = ", ".join(f"{_six(r['ratio']):.3f}" for r in rows
                             if (r["design"], r["iteration"], r["rule"]) == (s["design"], s["iteration"], s["rule"]))
        interval = (f"{s['ratio_mean']:.3f} [{s['ratio_mean_low']:.3f}, {s['ratio_mean_high']:.3f}]"
                    if s["n_seeds"] > 1 else f"{s['ratio_mean']:.3f} (one seed)")
        lines.append(f"| {s['design']} | {s['iteration']} | {s['rule']} | {s['seeds']} | {interval} | {per_seed} | "
                     f"{'yes' if s['every_seed_below_1'] else 'no'} |")
    lines += ["", "Per seed:", "",
              "| design | seed | iteration | rule | weights | MSE [95 %] | ratio to mean [95 %] | corrected ratio [95 %] |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fitted = r["fit_inflation"] == r["fit_inflation"] and r["fit_inflation"] != 1.0  # not NaN, not 1
        corrected = (f"{r['ratio_corrected']:.3f} [{r['ratio_corrected_low']:.3f}, {r['ratio_corrected_high']:.3f}]"
                     if fitted else "-")
        lines.append(f"| {r['design']} | {r['seed']} | {r['iteration']} | {r['rule']} | {r['weights']} | "
                     f"{r['mse']:.4g} [{r['mse_low']:.4g}, {r['mse_high']:.4g}] | {r['ratio']:.3f} "
                     f"[{r['ratio_low']:.3f}, {r['ratio_high']:.3f}] | {corrected} |")
    return "\n".join(lines) + "\n"


def figure(rows, summary, title):
    """One panel per design: each seed's ratio of the fitted rules with its interval (small
    markers, one shape per seed), and the mean over seeds with its t interval (large)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    designs = list(dict.fromkeys(r["design"] for r in rows))
    rules = ("inverse_variance", "blue_coordinate")
    seeds = list(dict.fromkeys(r["seed"] for r in rows))
    markers = "os^vD<>"
    fig, axes = plt.subplots(1, len(designs), figsize=(4.4 * len(designs), 4.4), squeeze=False)
    for ax, design in zip(axes[0], designs):
        iterations = sorted({r["iteration"] for r in rows if r["design"] == design})
        step = min(np.diff(iterations)) if len(iterations) > 1 else 1
        for i, rule in enumerate(rules):
            base = (i - 0.5) * 0.4 * step
            for j, seed in enumerate(seeds):
                sel = [r for r in rows if (r["design"], r["rule"], r["seed"]) == (design, rule, seed)]
                if not sel:
                    continue
                x = np.array([r["iteration"] for r in sel]) + base + (j - (len(seeds) - 1) / 2) * 0.06 * step
                y = np.array([r["ratio"] for r in sel])
                ax.errorbar(x, y, yerr=[y - [r["ratio_low"] for r in sel], [r["ratio_high"] for r in sel] - y],
                            fmt=markers[j % len(markers)], ms=3, lw=0.8, capsize=1.5, color=f"C{i}", alpha=0.6,
                            label=f"{rule}, seed {seed}")
            sel = [s for s in summary if (s["design"], s["rule"]) == (design, rule) and s["n_seeds"] > 1]
            if sel:
                x = np.array([s["iteration"] for s in sel]) + base + 0.12 * step
                y = np.array([s["ratio_mean"] for s in sel])
                ax.errorbar(x, y, yerr=[y - [s["ratio_mean_low"] for s in sel], [s["ratio_mean_high"] for s in sel] - y],
                            fmt="s", ms=6, mfc="white", lw=1.8, capsize=3, color=f"C{i}",
                            label=f"{rule}, mean over seeds (t)")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        held = sorted({r["seed"] for r in rows if r["design"] == design})
        ax.set_title(design + (f" (seed {held[0]} only)" if len(held) == 1 else ""), fontsize=9)
        ax.set_xlabel("iteration")
        ax.set_xticks(iterations)
    axes[0][0].set_ylabel("MSE / MSE of the average")
    handles = {}
    for ax in axes[0]:  # every series once, below the panels
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=4, fontsize=7.5, frameon=False)
    return fig


def main(args=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="sampler seeds (default 0 1 2)")
    parser.add_argument("--designs", type=int, nargs="+", choices=range(len(DESIGNS)), default=None,
                        help="design numbers (0-3, see the docstring; default all)")
    parser.add_argument("--reuse", default=None, help="a table this script wrote: take its (design, seed) pairs")
    parser.add_argument("--cached-only", action="store_true",
                        help="compute nothing: write the pairs already kept or reused")
    parser.add_argument("--cache", default=str(WORK / "headroom_tasks"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="40 runs, into figures/headroom_tasks/headroom_tasks_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args(args)
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        raise SystemExit(f"`--seeds` must be distinct non-negative integers, got {args.seeds}")
    started = utc_now()
    runs = 40 if args.quick else args.runs
    name = "headroom_tasks_quick" if args.quick else "headroom_tasks"
    designs = [list(DESIGNS)[i] for i in sorted(set(args.designs))] if args.designs else list(DESIGNS)
    command = ("python experiments/headroom_tasks.py" + (" --quick" if args.quick else
                                                          "" if runs == 500 else f" --runs {runs}")
               + ("" if args.seeds == [0, 1, 2] else " --seeds " + " ".join(map(str, args.seeds)))
               + ("" if not args.designs else " --designs " + " ".join(map(str, sorted(set(args.designs)))))
               + (f" --reuse {args.reuse}" if args.reuse else "") + (" --cached-only" if args.cached_only else ""))
    reuse, reuse_record = reused_rows(args.reuse, runs) if args.reuse else ({}, {})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, seconds, origin, missing, checked = [], {}, {}, {}, []
    for design in designs:
        for seed in args.seeds:
            key = (design, seed)
            have = cached(design, seed, runs, args.cache)
            if key in reuse and have:  # both: the kept rows are used, and compared to the digit the table holds
                kept, _ = part_rows(design, seed, runs, args.cache)
                checked.append({"design": design, "seed": seed, **compare(kept, reuse[key])})
            if key in reuse and not have:
                part, secs, how = reuse[key], _reused_seconds(reuse_record, design, seed), "reused"
            elif have or not args.cached_only:
                part, secs = part_rows(design, seed, runs, args.cache)
                how = "computed"
                print(f"{design:45s} seed {seed} {secs:7.1f} s", flush=True)
            else:
                missing.setdefault(design, []).append(seed)
                continue
            rows += part
            seconds.setdefault(design, {})[str(seed)] = secs
            origin.setdefault(how, []).append([design, seed])
    if not rows:
        raise SystemExit("nothing to write: no (design, seed) pair computed, kept or reused")
    source = original_source(reuse_record, origin.get("reused", [])) if args.reuse else None
    summary = seed_summary(rows)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    seeds_table = write_csv(summary, out / f"{name}_seeds.csv", float_format=".6g")
    write_page(out, name, markdown(rows, summary, runs, args.seeds, missing, command, origin, checked,
                               source))
    fig = figure(rows, summary, f"MSE of each fitted rule / MSE of the average, reference: the central client "
                                f"({runs} runs per seed)")
    fig.savefig(out / f"{name}.png", dpi=120)
    record = {"table": table.name, "seeds_table": seeds_table.name, "runs": runs, "seeds": args.seeds,
              "rules": list(RULE_LIST), "seconds": seconds, "designs": _designs_record(), "reference": "central",
              "pairs": origin, "missing": missing, "compared_to_reused": checked,
              "reused_from": source,
              "command": command, "provenance": collect(started, finished=True)}
    write_sidecar(table, record)
    write_sidecar(seeds_table, {"table": seeds_table.name, "from": table.name, "command": command,
                                "what": "per design, iteration and rule: mean of the seeds' ratios (6 digits, as "
                                        "in the table) with a 95 % t interval over seeds; every_seed_below_1: every "
                                        "seed's ratio_high < 1"})
    print(markdown(rows, summary, runs, args.seeds, missing, command, origin, checked, source))


if __name__ == "__main__":
    main()
