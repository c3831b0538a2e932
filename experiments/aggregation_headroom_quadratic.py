"""Is averaging the right way to combine clients whose optimum is known? FedAvg against
rules a federation can run, on the gaussian-sgd clients (quadratic losses, noisy gradients).

The sibling of experiments/aggregation_headroom.py (8x8 digits) on the task whose global
optimum theta* = (sum_k A_k)^-1 sum_k A_k mu_k is exact in every run
(:mod:`mianalysis.federated.quadratic`): each round, every client takes E local SGD steps
of its own noisy gradients from the global model and sends its model update (with the side
information its rule needs); the server combines them with

- FedAvg (the mean of the updates);
- the AND-mask on the updates (threshold 0.2), with and without its rescaling;
- "fisher", diagonal Fisher merging (Matena & Raffel 2022), with each client's precisions
  estimated from its own gradients at its final local model: its diagonal curvature from
  one Hutchinson probe (two noisy gradients at theta +- v with independent noise draws, as
  on two minibatches: with one draw for both the task's additive noise would cancel and
  the probe would return diag(A_k) exactly for diagonal A_k), or its diagonal
  empirical Fisher (the mean square of 1 fresh noisy gradient); and, as a reference that
  separates estimation from the rule, the exact diagonal of A_k (the task's curvature: an
  oracle of curvature, not of theta*);
- "inverse_variance", the diagonal form of FedPA (Al-Shedivat et al. 2021): each client
  sends the variance of its iterates in the round (all of them, as the digits simulator's
  clients do over their last epoch; or, as FedPA does after a burn-in, those of the
  round's second half of local steps: the models after local steps E/2, ..., E);
- Fisher merging from P Hutchinson probes (P = 10 and 100 beside the one probe above): the
  curvature estimate's variance falls as 1/P, at a price: a probe costs two gradients, so
  a client computes E + 2P gradients per round (column `gradients_per_round`: every
  rule's gradients per client and round, local steps and side information; FedAvg's is E);
- the baselines users compare against, as Flower's strategies define them
  (:func:`mianalysis.federated.quadratic.server_step`): FedProx (each local step adds
  mu (theta - theta_global) to the gradient), FedAvgM (server momentum 0.9), FedAdam and
  FedYogi (Flower's beta_1 0.9, beta_2 0.99, tau 1e-3), each on the mean of the updates.
  Their setting (FedProx's mu; the server learning rate eta of FedAvgM, FedAdam and
  FedYogi) is tuned with the client rate on the tuning replicates: for each setting of a
  grid (stepping outwards as the rate ladder does, until the best setting is interior or
  at an end of the grid, which the table flags) the client rate is searched on the ladder,
  and the (setting, rate) pair with the lowest final mean excess loss on the tuning seeds
  is rerun on the evaluation seeds. No number of the table comes from a tuning seed.

The designs vary what decides the physics: diagonal or rotated curvature (the diagonal
rules can be exact only for the first), heterogeneity 1 or 0 (the control: the clients
have the same curvature and mean, A_k = A and m_k = m, but their targets
mu_k = m + tau z_k still differ by tau z_k, so theta* is the mean of the targets and exact
weights are equal: Fisher with the exact diagonal is FedAvg there, while estimated weights
differ by their noise), few rounds of many local steps or many rounds of few,
per-run or fixed start, independent or shared gradient noise, and a low-noise design.

Every rule's learning rate is tuned per design on one ladder (experiments/_ladder.py, the
search of aggregation_headroom.py) on tuning replicates (the federation's seed 1), and the
chosen rate is then rerun on the evaluation replicates (seed 0) that every number of the
table comes from, so the table is free of the search's selection bias: the lowest final
mean excess loss over the tuning seeds (the
clients' mean loss minus its minimum, the same ranking as the clients' mean loss, which a
federation can measure), stepping outwards until the best rate is interior; a rate fails
where training diverged or the final mean excess loss is not below 0.9 times the start's
(a rate too large where the loss rose, too small where it fell too little: the search
steps down from the first, up from the second, where every rate tried failed).
Seeds are paired across rules (the same start, targets and noise streams), so the table
gives each rule's paired t interval over seeds of its difference to FedAvg in final squared
error to theta*, in final excess loss and in rounds to the target error (over the seeds
where both reached it; blank where fewer than half the seeds give such a pair), with the
per-comparison 95 % interval and the Bonferroni one over every rule-design comparison of the
table, and `d_error_mde`, the difference the design detects with 80 % power under that
Bonferroni correction, (t_{1 - 0.025/m} + t_{0.8}) sd / sqrt(n) over the n seeds (m the
family). Columns `drift_error` (FedAvg, FedProx, exact-curvature Fisher) give where that
rule converges with exact gradients at its chosen rate
(:func:`mianalysis.federated.quadratic.fixed_point`): the error that no number of rounds
removes.

    python experiments/aggregation_headroom_quadratic.py --quick   # 2 designs, seconds
    python experiments/aggregation_headroom_quadratic.py           # 8 designs, 50 seeds

Writes figures/aggregation_headroom_quadratic/aggregation_headroom_quadratic{_quick}.csv (the table), .png (error per
round at each rule's chosen rate; the paired differences) and .csv.json (the plan, every
rate tried, per-seed results, provenance), and the page
docs/results/tables/aggregation_headroom_quadratic{_quick}.md (with --out DIR: all into DIR).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from _ladder import (EVAL_SEED, TUNE_SEED, DidNotTrain, Diverged, bonferroni, command_line, first_round, interval,
                     paired_columns, read_results, search, tried_text, tune_rule)
from _results import figures_of, write_csv, write_page, write_sidecar

from mianalysis.federated.quadratic import SERVER_OPTIMIZERS, QuadraticConfig, QuadraticFederation, fixed_point
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/aggregation_headroom_quadratic/: where this script writes

TUNED = "tuned"  # a setting tuned on a grid with the client rate (the plan's "grids")
RULES = [  # (label, aggregator, parameters, what the clients and the server do: QuadraticConfig settings)
    ("FedAvg", "fedavg", {}, {}),
    ("FedProx", "fedavg", {}, {"proximal_mu": TUNED}),
    ("FedAvgM", "fedavg", {}, {"server_optimizer": "momentum", "server_params": {"momentum": 0.9, "eta": TUNED}}),
    ("FedAdam", "fedavg", {}, {"server_optimizer": "adam", "server_params": {"eta": TUNED}}),
    ("FedYogi", "fedavg", {}, {"server_optimizer": "yogi", "server_params": {"eta": TUNED}}),
    ("AND-mask (rescale)", "and_mask", {"threshold": 0.2, "rescale": True}, {}),
    ("AND-mask (no rescale)", "and_mask", {"threshold": 0.2, "rescale": False}, {}),
    ("Fisher (Hutchinson curvature)", "fisher", {}, {"precision": "hutchinson"}),
    ("Fisher (Hutchinson, 10 probes)", "fisher", {}, {"precision": "hutchinson", "n_probes": 10}),
    ("Fisher (Hutchinson, 100 probes)", "fisher", {}, {"precision": "hutchinson", "n_probes": 100}),
    ("Fisher (empirical Fisher)", "fisher", {}, {"precision": "empirical"}),
    ("Fisher (exact diagonal curvature)", "fisher", {}, {"precision": "exact"}),
    ("Inverse variance", "inverse_variance", {}, {}),
    ("Inverse variance (after burn-in)", "inverse_variance", {}, {"burn_in": "half"}),
]
SERVER_KEYS = ("server_optimizer", "server_params")  # the settings of the server, not the clients
ORACLE = {"Fisher (exact diagonal curvature)"}  # uses the task's curvature: not reference-free
TASK = {"n_clients": 4, "d": 20, "sigma": 1.0, "tau": 1.0, "s0": 1.0, "eigenvalues": [0.5, 2.0]}
DESIGNS = [  # (name, description, task settings, config settings)
    ("diagonal", "diagonal curvature, 5 rounds of E = 50", {"curvature": "diagonal"},
     {"rounds": 5, "local_steps": 50}),
    ("diagonal-h0", "as diagonal, heterogeneity 0 (control)", {"curvature": "diagonal", "heterogeneity": 0.0},
     {"rounds": 5, "local_steps": 50}),
    ("diagonal-many-rounds", "diagonal curvature, 30 rounds of E = 10", {"curvature": "diagonal"},
     {"rounds": 30, "local_steps": 10}),
    ("diagonal-fixed-start", "as diagonal, fixed start", {"curvature": "diagonal"},
     {"rounds": 5, "local_steps": 50, "init": "fixed"}),
    ("diagonal-shared-noise", "as diagonal, noise shared", {"curvature": "diagonal"},
     {"rounds": 5, "local_steps": 50, "shared": ["noise"]}),
    ("diagonal-low-noise", "as diagonal, sigma 0.1", {"curvature": "diagonal", "sigma": 0.1},
     {"rounds": 5, "local_steps": 50}),
    ("rotated", "rotated curvature, 5 rounds of E = 50", {"curvature": "rotated"}, {"rounds": 5, "local_steps": 50}),
    ("rotated-h0", "as rotated, heterogeneity 0 (control)", {"curvature": "rotated", "heterogeneity": 0.0},
     {"rounds": 5, "local_steps": 50}),
]
SERVER_ETA = [0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
GRIDS = {  # the tuned setting of a rule: (its name, the grid, where the search starts)
    "FedProx": ("mu", [0.001, 0.01, 0.1, 1.0, 10.0], [0.01, 0.1]),
    "FedAvgM": ("server eta", SERVER_ETA, [0.3, 1.0]),  # Flower's default eta: 1
    "FedAdam": ("server eta", SERVER_ETA, [0.03, 0.1]),  # 0.1
    "FedYogi": ("server eta", SERVER_ETA, [0.01, 0.03]),  # 0.01
}
FULL = {"designs": [d[0] for d in DESIGNS], "seeds": 50, "target_error": 0.5, "trained_below": 0.9,
        "ladder": [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.9], "start": [0.02, 0.05], "task": TASK,
        "grids": GRIDS}
QUICK = {"designs": ["diagonal", "diagonal-h0"], "seeds": 4, "target_error": 2.0, "trained_below": 0.9,
         "ladder": [0.01, 0.02, 0.05, 0.1, 0.2, 0.5], "start": [0.02, 0.05], "task": {**TASK, "d": 5},
         "config": {"rounds": 3, "local_steps": 10},
         "grids": {label: (name, grid, start[:1]) for label, (name, grid, start) in GRIDS.items()}}
COLUMNS = ["design", "description", "rule", "aggregator", "params", "client", "server", "reference_free",
           "gradients_per_round", "setting", "setting_choice", "settings_tried", "lr", "lr_choice",
           "lrs_tried", "seeds", "rounds", "local_steps", "final_error", "final_excess_loss", "error_ratio",
           "drift_error", "mean_of_optima_error", "target_error", "rounds_to_target", "seeds_reached",
           "d_error", "d_error_low", "d_error_high", "d_error_bonf_low", "d_error_bonf_high", "d_error_mde",
           "d_loss", "d_loss_low", "d_loss_high", "d_rounds", "d_rounds_low", "d_rounds_high", "pairs_rounds",
           "seconds"]


def design_setup(name, plan):
    """(description, task, config settings) of design `name` under `plan`."""
    _, description, task_settings, config = next(d for d in DESIGNS if d[0] == name)
    config = {**config, **plan.get("config", {})}
    return description, get_task("gaussian-sgd", **{**plan["task"], **task_settings}), config


def client_settings(client, config, setting=None):
    """The rule's QuadraticConfig settings for a design's `config` ("burn_in": "half" is half
    its local steps; TUNED, also inside "server_params", is `setting`)."""
    def value(v):
        if isinstance(v, dict):
            return {k: value(w) for k, w in v.items()}
        return config["local_steps"] // 2 if v == "half" else setting if v == TUNED else v

    return {k: value(v) for k, v in client.items()}


def server_settings(settings):
    """The server's part of a rule's settings, as the table's column `server` records it."""
    optimizer = settings.get("server_optimizer", "sgd")
    return {"optimizer": optimizer, **SERVER_OPTIMIZERS[optimizer], **settings.get("server_params", {})}


def run_rule(task, config, aggregator, params, client, lr, seed, plan, setting=None):
    """Per-seed squared error to theta* and excess loss per round, {"error", "excess",
    "result"} (arrays of shape (seeds, rounds + 1)), the federation's replicates of `seed`
    (1: the search's, 0: the table's), with the rule's tuned `setting` where it has one;
    Diverged or DidNotTrain where the rate fails."""
    cfg = QuadraticConfig(lr=lr, aggregator=aggregator, aggregator_params=params,
                          **client_settings(client, config, setting), **config)
    try:
        result = QuadraticFederation(task, cfg, replicates=plan["seeds"], seed=seed).run()
    except ValueError as exc:
        raise Diverged(str(exc)) from exc
    excess = result.excess_loss
    if excess[:, -1].mean() >= plan["trained_below"] * excess[:, 0].mean():
        # a loss that rose is a rate too large (the search steps down), one that fell too little too small (up)
        kind = DidNotTrain if excess[:, -1].mean() < excess[:, 0].mean() else Diverged
        raise kind(f"did not train at lr {lr}: the final mean excess loss {excess[:, -1].mean():.3f} is not "
                   f"below {plan['trained_below']} times the start's {excess[:, 0].mean():.3f}")
    return {"error": result.error, "excess": excess, "result": result}


def score(result):
    """The search's ranking: the lower final mean excess loss over seeds."""
    return (-result["excess"][:, -1].mean(),)


def summary(result):
    """What the sidecar records of every rate tried (NaN for a rate that failed)."""
    if result is None:
        return {"final_error": float("nan"), "final_excess_loss": float("nan")}
    return {"final_error": float(result["error"][:, -1].mean()),
            "final_excess_loss": float(result["excess"][:, -1].mean())}


def tune_setting(run, plan, grid, *, fields, searches, columns):
    """Tune a rule's setting (FedProx's mu, a server learning rate) with its client rate on the
    tuning seeds, then rerun the chosen pair on the evaluation seeds.

    For each setting tried (outwards on its `grid`, ``(name, values, start)``, as
    :func:`_ladder.search` steps) the client rate is searched on the plan's ladder; a setting
    scores as its best rate does (a setting where every rate failed fails: as too small where
    every rate failed to train, as too large otherwise). Returns (best, row) as
    :func:`_ladder.tune_rule` does, the row with "setting", "setting_choice" and
    "settings_tried"; every (setting, rate) tried goes to `searches`.
    """
    name, values, start = grid
    started = time.perf_counter()
    inner = {}

    def at_setting(value):
        best, tried, choice = search(lambda lr: run(lr, value, TUNE_SEED), plan["ladder"], plan["start"],
                                     score=score, summary=summary)
        inner[value] = (best, tried, choice)
        for t in tried:
            searches.append({**fields, "setting": f"{name}={value}", **t})
            print(f"{fields['design']} {fields['rule']} {name}={value} lr={t['lr']}: error {t['final_error']:.4f} "
                  f"excess loss {t['final_excess_loss']:.4f} {t['diverged']}", flush=True)
        if best is None:
            too_small = all(t["failure"] == "did not train" for t in tried)
            raise (DidNotTrain if too_small else Diverged)(f"no client rate trained at {name} {value}")
        return {k: v for k, v in best.items() if k != "lr"}

    best, tried, setting_choice = search(at_setting, values, start, score=score, summary=summary)
    row = {c: "" for c in columns}
    row.update({**fields, "setting_choice": setting_choice, "settings_tried": tried_text(tried)})
    if best is None:
        row.update({"lr_choice": "all failed", "seconds": round(time.perf_counter() - started, 1)})
        return None, row
    value = best["lr"]
    rate, rates, choice = inner[value]
    row.update({"setting": f"{name}={value}", "lr_choice": choice, "lrs_tried": tried_text(rates)})
    try:
        best = {"lr": rate["lr"], "setting": value, **run(rate["lr"], value, EVAL_SEED)}
    except ValueError:
        best = None
        row["lr_choice"] = "failed on the evaluation seeds"
    row["seconds"] = round(time.perf_counter() - started, 1)
    return best, row


def main(argv=None):
    args, name, out = command_line(argv, __doc__, "aggregation_headroom_quadratic", figures=FIGURES,
                                   quick_help="2 designs, d = 5, 3 rounds, 4 seeds (seconds)")
    started = utc_now()
    plan = QUICK if args.quick else FULL
    if args.replot:
        return replot(out, name)
    out.mkdir(parents=True, exist_ok=True)
    rows, curves, searches, per_seed = [], {}, [], []
    start_all = time.perf_counter()
    for design in plan["designs"]:
        description, task, config = design_setup(design, plan)
        base = None
        for label, aggregator, params, client in RULES:
            precision = client.get("precision", "")
            fields = {"design": design, "rule": label}
            if label in plan["grids"]:
                best, row = tune_setting(
                    lambda lr, value, seed: run_rule(task, config, aggregator, params, client, lr, seed, plan, value),
                    plan, plan["grids"][label], fields=fields, searches=searches, columns=COLUMNS)
            else:
                best, row = tune_rule(
                    lambda lr, seed: run_rule(task, config, aggregator, params, client, lr, seed, plan), plan,
                    score=score, summary=summary, columns=COLUMNS, fields=fields, searches=searches,
                    describe=lambda t: (f"{design} {label} lr={t['lr']}: error {t['final_error']:.4f} "
                                        f"excess loss {t['final_excess_loss']:.4f} {t['diverged']}"))
            value = None if best is None else best.get("setting")
            settings = client_settings(client, config, value)
            # what a client computes per round does not depend on the tuned setting (1.0: any valid one)
            federation = QuadraticFederation(task, QuadraticConfig(
                aggregator=aggregator, **client_settings(client, config, 1.0 if value is None else value), **config))
            row.update({"description": description, "aggregator": aggregator, "params": json.dumps(params),
                        "client": json.dumps({k: v for k, v in settings.items() if k not in SERVER_KEYS}),
                        "server": json.dumps(server_settings(settings)), "reference_free": label not in ORACLE,
                        "gradients_per_round": federation.gradients_per_round,
                        "seeds": plan["seeds"], "rounds": config["rounds"], "local_steps": config["local_steps"],
                        "target_error": plan["target_error"]})
            if best is None:
                rows.append(row)
                continue
            error, excess, result = best["error"], best["excess"], best["result"]
            reach = first_round(error <= plan["target_error"])
            mean_of_optima = ((result.targets.mean(1) - result.theta_star) ** 2).sum(-1)
            row.update({"lr": best["lr"], "final_error": round(float(error[:, -1].mean()), 5),
                        "final_excess_loss": round(float(excess[:, -1].mean()), 5),
                        "mean_of_optima_error": round(float(mean_of_optima.mean()), 5),
                        "rounds_to_target": round(float(np.nanmean(reach)), 2) if np.isfinite(reach).any() else "",
                        "seeds_reached": int(np.isfinite(reach).sum())})
            plain_server = "server_optimizer" not in settings
            if plain_server and (aggregator == "fedavg" or precision == "exact"):  # where exact gradients converge
                precisions = None if aggregator == "fedavg" else np.stack(
                    [np.diag(task.client_problem(c)[0]) for c in range(task.n_clients)])
                point = fixed_point(task, result.targets, lr=best["lr"], local_steps=config["local_steps"],
                                    precisions=precisions, proximal_mu=settings.get("proximal_mu", 0.0))
                row["drift_error"] = round(float(((point - result.theta_star) ** 2).sum(-1).mean()), 5)
            if label == "FedAvg":
                base = (error, excess, reach)
            curves[(design, label)] = error.mean(0).tolist()
            if base is not None:
                row["error_ratio"] = round(float(error[:, -1].mean() / base[0][:, -1].mean()), 4)
                paired_columns(row, "d_error", error[:, -1] - base[0][:, -1], 5)
                paired_columns(row, "d_loss", excess[:, -1] - base[1][:, -1], 5)
                paired_columns(row, "d_rounds", reach - base[2], 5, min_pairs=plan["seeds"] / 2,
                               pairs_key="pairs_rounds")
                row["_d_error_per_seed"] = (error[:, -1] - base[0][:, -1]).tolist()
            for s in range(plan["seeds"]):
                per_seed.append({"design": design, "rule": label, "lr": best["lr"], "setting": row["setting"], "seed": s,
                                 "final_error": float(error[s, -1]), "final_excess_loss": float(excess[s, -1]),
                                 "rounds_to_target": None if np.isnan(reach[s]) else int(reach[s])})
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if not k.startswith("_")}), flush=True)
    detectable(rows, "_d_error_per_seed", "d_error_mde", 5, is_baseline=is_baseline)
    bonferroni(rows, "_d_error_per_seed", "d_error", 5, is_baseline=is_baseline)
    write_results(out, name, rows, curves, searches, per_seed, plan, time.perf_counter() - start_all, started)


def is_baseline(row):
    """FedAvg's rows, which the others are compared with."""
    return row["rule"] == "FedAvg"


def detectable(rows, per_seed_key, key, digits, *, is_baseline, power=0.8):
    """Fill ``row[key]`` of every compared row (per-seed differences in ``row[per_seed_key]``,
    kept): the paired difference detected with probability `power` by the two-sided
    Bonferroni t test over the m compared rows, ``(t_{1 - 0.025/m} + t_power) sd / sqrt(n)``
    with n - 1 degrees of freedom. Returns m."""
    from scipy.stats import t as student

    compared = [r for r in rows if r.get(per_seed_key) is not None and not is_baseline(r)]
    for r in compared:
        diff = np.asarray(r[per_seed_key], dtype=float)
        n = diff.size
        quantiles = student.ppf(1 - 0.025 / len(compared), n - 1) + student.ppf(power, n - 1)
        r[key] = round(float(quantiles * diff.std(ddof=1) / np.sqrt(n)), digits)
    return len(compared)


def shown(r, key, digits, low="low", high="high"):
    """:func:`_ladder.interval` of a row compared with FedAvg (whose aggregator, the mean, the
    baselines share), "-" for FedAvg's own."""
    return "-" if is_baseline(r) else interval({**r, "aggregator": r["rule"]}, key, digits, low, high)


def write_results(out, name, rows, curves, searches, per_seed, plan, seconds, started):
    table = write_csv(rows, out / f"{name}.csv", fieldnames=COLUMNS)
    family = sum(1 for r in rows if not is_baseline(r) and r["d_error"] != "")
    write_sidecar(table, {
        "table": table.name, "plan": plan, "bonferroni_family": family,
        "designs": [{"design": d[0], "description": d[1], "task": {**plan["task"], **d[2]},
                     "config": {**d[3], **plan.get("config", {})}} for d in DESIGNS if d[0] in plan["designs"]],
        "rules": [{"rule": r[0], "aggregator": r[1], "params": r[2], "client": r[3]} for r in RULES],
        "lr_search": searches, "per_seed": per_seed,
        "curves": [{"design": d, "rule": r, "mean_error_per_round": c} for (d, r), c in curves.items()],
        "seconds": round(seconds, 1), "provenance": [collect(started, finished=True)]})

    lines = ["| design | rule | gradients per round | setting (tried) | lr (tried) | final error | ratio to FedAvg | "
             f"Δ error vs FedAvg (95 %) | Δ error (Bonferroni, {family}) | detectable Δ (80 %) | drift error | "
             "Δ excess loss | rounds to target (seeds) | Δ rounds |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        flag = "" if r["lr_choice"] == "interior" else f" **{r['lr_choice']}**"
        setting = "-" if r["settings_tried"] == "" else (
            f"{r['setting'] or '-'}{'' if r['setting_choice'] == 'interior' else ' **' + r['setting_choice'] + '**'}"
            f" ({r['settings_tried']})")
        rule = r["rule"] + ("" if r["reference_free"] else " (oracle curvature)")
        trained = r["lr"] != ""
        rounds = (f"{r['rounds_to_target'] if r['rounds_to_target'] != '' else '-'} "
                  f"({r['seeds_reached']}/{r['seeds']})" if trained else "-")
        lines.append(f"| {r['design']} | {rule} | {r['gradients_per_round']} | {setting} | "
                     f"{r['lr']}{flag} ({r['lrs_tried']}) | "
                     f"{r['final_error'] if trained else '-'} | {r['error_ratio'] if r['error_ratio'] != '' else '-'} | "
                     f"{shown(r, 'd_error', 4)} | {shown(r, 'd_error', 4, 'bonf_low', 'bonf_high')} | "
                     f"{r['d_error_mde'] if r['d_error_mde'] != '' else '-'} | "
                     f"{r['drift_error'] if r['drift_error'] != '' else '-'} | {shown(r, 'd_loss', 4)} | {rounds} | "
                     f"{shown(r, 'd_rounds', 4)} ({r['pairs_rounds'] or 0}) |")
    designs = "; ".join(f"{d[0]}: {d[1]}" for d in DESIGNS if d[0] in plan["designs"])
    write_page(
        out, name,
        f"gaussian-sgd clients as a federation (mianalysis.federated.quadratic): {plan['task']['n_clients']} clients, "
        f"d = {plan['task']['d']}, curvature eigenvalues in {plan['task']['eigenvalues']}, sigma "
        f"{plan['task']['sigma']} unless the design says otherwise, tau {plan['task']['tau']}; all clients every "
        f"round. Designs: {designs}. {plan['seeds']} seeds (paired: the same start, targets and noise under every "
        f"rule). Error: |theta - theta*|^2 of the global model after the last round, mean over seeds. Each rule's "
        f"learning rate is the lowest final mean excess loss on the ladder {plan['ladder']}, searched until it is "
        f"interior (flagged where it is at an end) on {plan['seeds']} separate tuning seeds (the federation's seed "
        f"1), and with it the setting of FedProx (mu) and of FedAvgM, FedAdam and FedYogi (the server's eta) on "
        f"its grid, stepping outwards likewise; every number below is of the chosen rate (and setting) rerun on the "
        f"evaluation seeds (seed 0). Gradients per round: what each client computes per round (its local steps, "
        f"2 per Hutchinson probe, 1 per empirical-Fisher draw). Δ: the rule minus FedAvg, paired by seed, mean and "
        f"t interval over seeds (95 %, and Bonferroni over the table's {family} comparisons); detectable Δ: the "
        f"difference that Bonferroni test finds with 80 % power; drift error: where the rule "
        f"converges with exact gradients at its rate (FedAvg, FedProx, exact-curvature Fisher); rounds to the target "
        f"error {plan['target_error']} over the seeds where both reached it (Δ rounds blank, '-', where fewer than "
        f"half the seeds give such a pair; the pairs in brackets). {seconds:.0f} s.\n\n"
        + "\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(rows, curves, out / f"{name}.png", plan)


def replot(out, name):
    """The figure again from the written table and sidecar (no training)."""
    rows, curves, plan = read_results(out, name, floats="d_error", curve_keys=("design", "rule"),
                                      curve_values="mean_error_per_round")
    plot(rows, curves, out / f"{name}.png", plan)


def plot(rows, curves, path, plan):
    """One panel per design: the mean error to theta* per round of every rule at its chosen
    rate (log scale); below, the paired difference to FedAvg in final error with its
    Bonferroni interval, per design and rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    designs = list(dict.fromkeys(d for d, _ in curves))
    labels = [r[0] for r in RULES]
    colours = {label: ("k" if i == 0 else plt.cm.tab20(i - 1)) for i, label in enumerate(labels)}
    ncol = min(4, len(designs))
    nrow = -(-len(designs) // ncol)
    fig = plt.figure(figsize=(4.6 * ncol, 3.9 * nrow + 5.8))
    grid = fig.add_gridspec(nrow + 1, ncol, height_ratios=[1] * nrow + [1.35])
    for i, design in enumerate(designs):
        ax = fig.add_subplot(grid[i // ncol, i % ncol])
        for label in labels:
            if (design, label) in curves:
                ax.semilogy(curves[(design, label)], color=colours[label], lw=2.2 if label == "FedAvg" else 1.4,
                            ls="--" if label == "FedAvg" else "-", label=label)
        ax.axhline(plan["target_error"], color="tab:red", ls=":", lw=1)
        description = next(r["description"] for r in rows if r["design"] == design)
        ax.set_title(f"{design}\n({description})", fontsize=10)
        ax.set_xlabel("round", fontsize=10)
        ax.set_ylabel("mean |theta - theta*|^2", fontsize=10)
        ax.xaxis.get_major_locator().set_params(integer=True)
        if i == 0:
            ax.legend(fontsize=7, loc="best")
    ax = fig.add_subplot(grid[nrow, :])
    others = labels[1:]
    width = 0.8 / len(others)
    for j, label in enumerate(others):
        for i, design in enumerate(designs):
            r = next((r for r in rows if r["design"] == design and r["rule"] == label and r["d_error"] != ""), None)
            if r is None:
                continue
            low, high = r["d_error_bonf_low"], r["d_error_bonf_high"]
            err = None if low == "" or not np.isfinite(low) else [[r["d_error"] - low], [high - r["d_error"]]]
            ax.errorbar([i + (j - (len(others) - 1) / 2) * width], [r["d_error"]], yerr=err, fmt="o", ms=4,
                        color=colours[label], capsize=2, label=label if i == 0 else None)
    ax.axhline(0, color="k", lw=1)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xticks(range(len(designs)))
    ax.set_xticklabels(designs, fontsize=9)
    ax.set_ylabel("final error minus FedAvg's\n(paired by seed, Bonferroni t interval)", fontsize=10)
    ax.legend(fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.suptitle(f"gaussian-sgd federation ({plan['task']['n_clients']} clients, d = {plan['task']['d']}, "
                 f"{plan['seeds']} seeds): each rule at the learning rate (and setting) chosen on separate "
                 "tuning seeds", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
