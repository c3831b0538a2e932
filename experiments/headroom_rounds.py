"""Headroom against theta* as FL runs it: the clients' round-end models of FedAvg, round by round.

Issue 51, item 3 ("measure it as FL runs it too"). In each round every client starts from the
global model, trains `--epochs` local epochs of plain SGD on its own examples in the run's
random order, and the server averages the three round-end models (FedAvg, equal client
sizes). At every round the clients' errors ``e_k = theta_k - theta*`` (their round-end models
against the federation's exact optimum) are combined by each rule, and each rule's MSE
``E||sum_k W_k e_k||^2`` over runs is compared with averaging's, paired by run (95 %
intervals). Averaging's combination is the next global model, so its MSE is the global
model's squared distance to theta*; a ratio below 1 says that this round's models could have
been combined better, not what the better combination would do to the later rounds.

Tasks (convex in the trained parameters, so theta* is exact):

- softmax-regression (a linear softmax on 8x8 digits, 650 parameters, 3 clients of 200
  examples, l2 0.01, SGD lr 0.5, batches of 20: the task's defaults), splits "iid" and
  "label-skew", data seeds 0, 1, 2 (three federations each). Its theta* minimises the pooled
  objective (the mean cross-entropy over the 600 examples plus the L2 term): it is fixed by
  the data seed, the same in every run, because nothing drawn per run (the start, the order
  of the examples) enters the objective; it only moves the path.
- digits-head (digits-lenet's pretrained LeNet body frozen, the 84 -> 10 head, 850
  parameters, a softmax regression on the body's features; each client 20 base images per
  digit drawn from the training set, augmented once per run: rotation, zoom, shift; its
  split, "balanced" in the tables, is the task's own: it has no label-skew split), trained
  here by SGD with lr 0.05 and batches of 20 (not the paper's Adam at 1e-5, whose 4 steps
  move each weight by at most 4e-5) and with l2 0.01 instead of the task's 1e-3. The body's
  features are large, so the Hessian's largest eigenvalue is some tens and SGD is stable
  only at small rates; with l2 1e-3 theta* lies much further from the pretrained head, along
  directions whose curvature is near l2, which the few hundred steps of 20 rounds hardly
  enter (a ratio near 1 from clients that stayed near the start says nothing); with l2 0.01
  the movement table shows how much of the way they cover. Data seeds 0, 1, 2, one design
  (below). The run's augmentation enters its objective, so here theta* is per run: the
  pooled objective of that run's augmented features, minimised again in every run.

theta* is found in float64 by Newton's method to a gradient norm <= 1e-8
(`mianalysis.tasks.convex.softmax_optimum`), once per data seed for softmax-regression and
once per run for digits-head.

Designs (the paper's, with the data order the run's stochastic stream: for a task without
augmentation it plays the part augmentation plays in the paper): the start "fixed" (one point
for every run: for softmax-regression one draw of weights N(0, 1/64), biases 0, from the data
seed; for digits-head the pretrained head) or "per-run" (drawn per run: weights N(0, 1/64);
the pretrained head plus N(0, 0.01^2) on every weight and bias), and the order (digits-head:
the order and the augmentation) "shared" between the clients of a run (the same permutation
of positions in each epoch; the same augmentation draw for the images in the same position)
or drawn by each client ("nothing shared"). What a design forces:

- fixed start, nothing shared: in round 1 the clients are independent (functions of their
  own orders from one fixed point); from round 2 on they all start from the global model,
  which depends on every client's earlier orders, so they are dependent (independent only
  given the global model). Independence at the start does not last a round in FL. The
  movement table gives the clients' mean correlation over runs in rounds 1, 2 and the last.
- per-run start: the clients share the start, so they are dependent from round 1.
- order shared: the clients take the same positions in the same order, but their examples
  differ; with softmax-regression's examples (pool indices in sorted order, the pool shuffled
  and stratified) a position carries unrelated examples in different clients, so sharing the
  order can couple them only through the order itself (the tables compare the two designs).
  digits-head's base images are ordered by digit, so a shared augmentation turns the same
  digit in every client the same way.
- in every design the errors contain the global model's error at the start of the round,
  which all clients share: the smaller the clients' moves in a round against it, the closer
  their errors are to equal and every combination to the average (the movement table gives
  both distances).

Rules (all at every round unless said): "mean" (FedAvg), "inverse_variance" and
"blue_coordinate" (fitted against theta*: oracles, cross-fitted over 2 folds of runs, as
`mianalysis.analysis.studies.headroom.headroom_rows` does; blue_coordinate's corrected ratio
divides by the fitting cost), "curvature" (the weights ``(sum_j H_j)^-1 H_k`` of the clients'
exact Hessians at theta*, as in headroom_convex.py: it needs theta*; per run for digits-head,
whose theta* is per run) and "fisher_full_own" (what a federation can run: the same weights
from each client's Hessian at its own round-end model; measured at rounds 1, 2, 5, 10 and the
last). Both curvature rules are solved by conjugate gradients per run to a relative
residual of 1e-10 (experiments/_convex.py), without forming the Hessians.

Per cell and round the script also reports the global model's distance to theta*
(``|theta_g - theta*|`` before and after the round), each client's distance moved in the
round ``|theta_k - theta_g|`` against ``|theta_0 - theta*|``, and the clients' mean
correlation over runs (`mean_correlation`). Verdicts per cell at the first
and the last round (`headroom_verdicts`, Bonferroni over cells x 2 rounds, as
headroom_convex.py gives them; curvature at theta* is left out of the verdicts, as it is not
runnable); the page's table of the first and last round widens every interval over all the
intervals it shows (Bonferroni).

    python experiments/headroom_rounds.py [--runs 300] [--head-runs 200] [--rounds 20] [--epochs 2] [--quick]

Writes figures/headroom_rounds/headroom_rounds.csv (one row per cell, round and rule),
figures/headroom_rounds/headroom_rounds_movement.csv (one row per cell and round: distances),
figures/headroom_rounds/headroom_rounds.png, their sidecars and docs/results/tables/headroom_rounds.md
(``--quick``: figures/headroom_rounds/headroom_rounds_quick.*, its page beside them; with --out DIR, the
tables and figure go into DIR, and the page too where DIR is not figures/).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from _convex import (LEVEL, combined_errors, familywise_verdicts, from_dump, interval_df, per_run_row, probabilities,
                     to_dump, widened)
from _results import figures_of, timed_rows, write_csv, write_page, write_sidecar

from mianalysis.analysis.inference.intervals import mean_interval, normal_interval
from mianalysis.analysis.studies.headroom import combine_errors, headroom_rows, rule_weights
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task
from mianalysis.tasks.convex import softmax_objective, softmax_optimum

FIGURES = figures_of(__file__)  # figures/headroom_rounds/: where this script writes

SOFTMAX, HEAD = "softmax-regression", "digits-head"
SPLITS = ("iid", "label-skew")
DATA_SEEDS = (0, 1, 2)
# (start, shared): the paper's designs
DESIGNS = {"fixed start, nothing shared": ("fixed", False), "fixed start, order shared": ("fixed", True),
           "per-run start, nothing shared": ("per-run", False), "per-run start, order shared": ("per-run", True)}
HEAD_DESIGNS = ("fixed start, nothing shared",)
RUNS, HEAD_RUNS, QUICK_RUNS, QUICK_HEAD_RUNS = 300, 200, 24, 12
ROUNDS, EPOCHS, QUICK_ROUNDS = 20, 2, 6
FISHER_ROUNDS = (1, 2, 5, 10)  # and the last
SEED = 0  # the seed of the starts, orders and augmentations; the data seed picks the federation
N_CLASSES = 10
FOLDS = 2
HEADROOM_RULES = ("mean", "inverse_variance", "blue_coordinate")
RULE_LIST = (*HEADROOM_RULES, "curvature", "fisher_full_own")
SHOWN = ("inverse_variance", "blue_coordinate", "curvature", "fisher_full_own")  # the page's headline table
HEAD_L2, HEAD_LR, HEAD_BATCH, HEAD_START_NOISE = 0.01, 0.05, 20, 0.01
LEAD = ("cell", "task", "split", "data_seed", "design")
HEAD_SPLIT = "balanced"  # digits-head's own: every client 20 base images of every digit


def cell_name(task, split, data_seed, design):
    return f"{task}, {split}, data seed {data_seed}, {design}"


# ---------------------------------------------------------------------------- the federations
@dataclass
class Federation:
    """One federation: every client's examples (augmented features, the bias as a last
    feature of value 1), its objective's settings and theta* (augmented, per run or one)."""

    task: str
    split: str
    data_seed: int
    x: np.ndarray  # (Rx, K, n, D1): Rx = 1 where the examples are the same in every run
    y: np.ndarray  # (K, n)
    star: np.ndarray  # (Rx, C, D1)
    star_grad_norm: float  # the largest over runs
    l2: float
    lr: float
    batch_size: int
    fixed_start: np.ndarray  # (C, D1)
    start_sd: float  # of the per-run draw around `start_center`
    start_center: np.ndarray  # (C, D1)
    noisy_bias: bool  # whether the per-run draw perturbs the biases too
    precondition_hessian: np.ndarray | None  # sum_k H_k at theta* (augmented order), when theta* is one


def _augment(features):
    features = np.asarray(features, dtype=np.float64)
    return np.concatenate([features, np.ones((*features.shape[:-1], 1))], axis=-1)


def _augmented_order(n_classes, n_features):
    """The dump index of each augmented coordinate (class-major, bias last in each class)."""
    c, d = np.meshgrid(np.arange(n_classes), np.arange(n_features + 1), indexing="ij")
    return np.where(d < n_features, c * n_features + d, n_classes * n_features + c).ravel()


def summed_hessian(x, y, theta, l2):
    """``sum_k H_k(theta)`` (augmented order) of the clients' own objectives, from the
    package's `softmax_objective` (dump order): the conjugate gradients' preconditioner."""
    order = _augmented_order(N_CLASSES, x.shape[-1] - 1)
    total = sum(softmax_objective(x[k, :, :-1], y[k], n_classes=N_CLASSES, l2=l2)(to_dump(theta))[2]
                for k in range(x.shape[0]))
    return total[np.ix_(order, order)]


def softmax_federation(split, data_seed, **settings):
    """softmax-regression's federation (`settings`: further task settings, e.g. the tests'
    smaller clients): its examples and its one theta*."""
    task = get_task(SOFTMAX, split=split, data_seed=data_seed, **settings)
    s = task.settings
    parts = [task.client_examples(k) for k in range(task.n_clients)]
    x = _augment(np.stack([f for f, _ in parts]))[None]
    y = np.stack([labels for _, labels in parts])
    found = softmax_optimum(*task.pooled_examples(), n_classes=N_CLASSES, l2=float(s["l2"]))
    star = from_dump(found.theta, N_CLASSES)
    d = x.shape[-1] - 1
    fixed = np.zeros((N_CLASSES, d + 1))
    fixed[:, :d] = np.random.default_rng([SEED, data_seed, 1]).normal(size=(N_CLASSES, d)) / np.sqrt(d)
    return Federation(SOFTMAX, split, data_seed, x, y, star[None], found.grad_norm, float(s["l2"]), float(s["lr"]),
                      int(s["batch_size"]), fixed, 1 / np.sqrt(d), np.zeros((N_CLASSES, d + 1)), False,
                      summed_hessian(x[0], y, star, float(s["l2"])))


def _generator(data_seed, run, client):
    import torch

    state = np.random.SeedSequence([SEED, data_seed, 3, run, client]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def head_federation(data_seed, runs, shared, **settings):
    """digits-head's federation of `runs` runs: each run's augmented features (the same
    augmentation draw for every client where `shared`) and its own theta*; `settings` are
    further task settings (the tests' tiny pretraining)."""
    task = get_task(HEAD, **{"data_seed": data_seed, "l2": HEAD_L2, "lr": HEAD_LR, "batch_size": HEAD_BATCH,
                             **settings})
    l2 = float(task.settings["l2"])
    feats, labels = [], []
    for k in range(task.n_clients):
        data = task.client_data(k, [_generator(data_seed, r, 0 if shared else k) for r in range(runs)])
        feats.append(data.inputs.numpy())
        labels.append(data.targets[0].numpy())
    x = _augment(np.stack(feats, axis=1))  # (R, K, n, 85), float32 features in float64, as the task's optimum
    y = np.stack(labels)
    stars, norms = [], []
    for r in range(runs):
        found = softmax_optimum(x[r, :, :, :-1].reshape(-1, x.shape[-1] - 1), y.reshape(-1), n_classes=N_CLASSES,
                                l2=l2)
        stars.append(from_dump(found.theta, N_CLASSES))
        norms.append(found.grad_norm)
    weight, bias = (p.double().numpy() for p in task.fixed_params())
    head = np.concatenate([weight, bias[:, None]], axis=1)
    return Federation(HEAD, HEAD_SPLIT, data_seed, x, y, np.stack(stars), float(max(norms)), l2,
                      float(task.settings["lr"]), int(task.settings["batch_size"]), head, HEAD_START_NOISE, head, True,
                      None)


def draw_starts(fed, kind, runs):
    """(runs, C, D1): `fed`'s fixed start for every run, or a draw per run (the same draws
    in every design of a data seed: runs are paired by seed)."""
    if kind == "fixed":
        return np.broadcast_to(fed.fixed_start, (runs, *fed.fixed_start.shape)).copy()
    noise = np.random.default_rng([SEED, fed.data_seed, 0]).normal(size=(runs, *fed.fixed_start.shape)) * fed.start_sd
    if not fed.noisy_bias:
        noise[..., -1] = 0.0
    return fed.start_center + noise


# ---------------------------------------------------------------------------- FedAvg, vectorised over runs
def fedavg_rounds(x, y, start, *, rounds, epochs, lr, batch_size, l2, shared_order, rng):
    """FedAvg with plain SGD clients on softmax regression, every run at once.

    Parameters
    ----------
    x : ndarray of shape (Rx, K, n, D1)
        Augmented features (Rx = 1: the same examples in every run).
    y : ndarray of shape (K, n)
        Labels.
    start : ndarray of shape (R, C, D1)
        Each run's initial global model.
    rounds, epochs, lr, batch_size, l2
        Rounds; local epochs per round (each a fresh permutation of the client's examples,
        minibatches of `batch_size` in that order, the last one smaller where it does not
        divide); SGD's step; the L2 coefficient (every parameter, the bias too).
    shared_order : bool
        The clients of a run take the same permutation (of positions) in each epoch.
    rng : numpy.random.Generator
        The orders: every epoch draws one permutation per run and client, shared or not
        (client 0's is the shared one), so designs are paired by run.

    Yields
    ------
    (int, ndarray (R, C, D1), ndarray (R, K, C, D1))
        The round (from 1), the global model the round started from and the clients'
        round-end models; the next global model is their mean.
    """
    rx, k, n, d1 = x.shape
    runs = start.shape[0]
    xf = np.ascontiguousarray(x).reshape(-1, d1)
    yf = np.broadcast_to(y, (rx, k, n)).reshape(-1)
    offset = ((np.arange(runs)[:, None] * k if rx > 1 else 0) + np.arange(k)[None, :]) * n  # (R, K)
    global_model = np.array(start, dtype=np.float64)
    for t in range(1, rounds + 1):
        models = np.repeat(global_model[:, None], k, axis=1)
        w = models.reshape(runs * k, N_CLASSES, d1)
        for _ in range(epochs):
            perm = rng.permuted(np.broadcast_to(np.arange(n), (runs, k, n)), axis=-1)
            if shared_order:
                perm[:, 1:] = perm[:, :1]
            flat = (offset[..., None] + perm).reshape(runs * k, n)
            xp, yp = xf[flat], yf[flat]
            for s in range(0, n, batch_size):
                xb, yb = xp[:, s:s + batch_size], yp[:, s:s + batch_size]
                b = xb.shape[1]
                z = np.matmul(xb, w.transpose(0, 2, 1))  # (R K, b, C)
                z -= z.max(axis=-1, keepdims=True)
                np.exp(z, out=z)
                z /= z.sum(axis=-1, keepdims=True)
                z.reshape(-1, N_CLASSES)[np.arange(runs * k * b), yb.reshape(-1)] -= 1.0
                grad = np.matmul(z.transpose(0, 2, 1), xb)
                w *= 1.0 - lr * l2
                w -= (lr / b) * grad
        yield t, global_model, models
        global_model = models.mean(axis=1)


# ---------------------------------------------------------------------------- one round's measurements
def _preconditioner(fed, runs):
    """``(R, P) -> (R, P)``: a Cholesky solve with the sum of the clients' Hessians at theta*
    (one for every run where theta* is one; else run by run at that run's theta*)."""
    from scipy.linalg import cho_factor, cho_solve

    if fed.precondition_hessian is not None:
        factor = cho_factor(fed.precondition_hessian)
        return lambda b: cho_solve(factor, b.T).T
    factors = [cho_factor(summed_hessian(fed.x[r], fed.y, fed.star[r], fed.l2)) for r in range(runs)]
    return lambda b: np.stack([cho_solve(f, row) for f, row in zip(factors, b)])


def _interval_columns(values, prefix):
    m, low, high = mean_interval(values, LEVEL)
    return {prefix: m, f"{prefix}_low": low, f"{prefix}_high": high}


def round_rows(fed, models, star_prob, precondition, *, fisher):
    """The rows of one round: each rule's MSE against theta* and its ratio to the mean's,
    and the conjugate-gradient residuals; `models` (R, K, C, D1) are the round-end models,
    `star_prob` the clients' probabilities at theta*."""
    runs, k = models.shape[:2]
    errors_aug = models - fed.star[:, None]
    errors = np.moveaxis(to_dump(errors_aug), 1, 0)  # (K, R, P), a dump's order
    rows = headroom_rows(errors, rules=list(HEADROOM_RULES), folds=FOLDS, level=LEVEL)
    base = combine_errors(rule_weights("mean", errors), errors)
    curv, residual, _ = combined_errors(fed.x, star_prob, errors_aug, fed.l2, precondition)
    rows.append(per_run_row("curvature", np.sum(curv**2, axis=(1, 2)), base,
                            "(sum_j H_j)^-1 H_k, Hessians at theta*", runs))
    residuals = {"curvature": residual}
    if fisher:
        own, residual, _ = combined_errors(fed.x, probabilities(fed.x, models), errors_aug, fed.l2, precondition)
        rows.append(per_run_row("fisher_full_own", np.sum(own**2, axis=(1, 2)), base,
                                "(sum_j H_j)^-1 H_k, each client's Hessian at its own round-end model", runs))
        residuals["fisher_full_own"] = residual
    for r in rows:
        r["cg_residual"] = residuals.get(r["rule"], np.nan)
    return rows


def mean_correlation(models):
    """The clients' mean correlation over runs: for each pair of clients and each coordinate
    that moves (variance above 1e-10 of the largest: pixels that are 0 in every image leave
    theirs at the start's decay), the correlation of the two clients' values over runs,
    averaged; `models` (R, K, ...)."""
    flat = models.reshape(*models.shape[:2], -1)
    c = flat - flat.mean(axis=0)
    var = np.mean(c**2, axis=0)  # (K, P)
    keep = var.min(axis=0) > 1e-10 * var.max()
    k = flat.shape[1]
    return float(np.mean([np.mean(np.mean(c[:, i, keep] * c[:, j, keep], axis=0) / np.sqrt(var[i, keep] * var[j, keep]))
                          for i in range(k) for j in range(i + 1, k)]))


def correlation_columns(models, groups=10):
    """`mean_correlation` with its 95 % delete-a-group jackknife interval (run r in group
    r % `groups`; Student's t with `groups` - 1 degrees of freedom): ``client_correlation``,
    ``_low``, ``_high``."""
    value = mean_correlation(models)
    group = np.arange(models.shape[0]) % groups
    left_out = np.array([mean_correlation(models[group != g]) for g in range(groups)])
    se = np.sqrt((groups - 1) / groups * np.sum((left_out - left_out.mean()) ** 2))
    low, high = normal_interval(value, se, LEVEL, groups - 1)
    return {"client_correlation": value, "client_correlation_low": low, "client_correlation_high": high}


def movement_row(fed, t, start, before, models):
    """Distances of round `t`: the start's, the global model's before and after the round and
    each client's move in the round, means over runs with 95 % intervals."""
    star = to_dump(fed.star)
    gap = np.linalg.norm(to_dump(start) - star, axis=1)
    out = {"round": t} | _interval_columns(gap, "start_distance")
    out |= _interval_columns(np.linalg.norm(to_dump(before) - star, axis=1), "global_before")
    after = np.linalg.norm(to_dump(models.mean(axis=1)) - star, axis=1)
    out |= _interval_columns(after, "global_after") | _interval_columns(after / gap, "global_after_fraction")
    for c in range(models.shape[1]):
        moved = np.linalg.norm(to_dump(models[:, c] - before), axis=1)
        out |= _interval_columns(moved, f"moved_{c}") | _interval_columns(moved / gap, f"moved_fraction_{c}")
        out |= _interval_columns(np.linalg.norm(to_dump(models[:, c]) - star, axis=1), f"client_distance_{c}")
    return out | correlation_columns(models)


def fisher_rounds(rounds):
    return sorted({t for t in FISHER_ROUNDS if t <= rounds} | {rounds})


def cell_result(fed, design, runs, *, rounds=ROUNDS, epochs=EPOCHS):
    """(rows, movement rows, info) of one federation and design over `rounds` rounds."""
    from threadpoolctl import threadpool_limits

    kind, shared = DESIGNS[design]
    lead = {"cell": cell_name(fed.task, fed.split, fed.data_seed, design), "task": fed.task, "split": fed.split,
            "data_seed": fed.data_seed, "design": design, "start": kind, "shared": "order" if shared else "nothing"}
    start = draw_starts(fed, kind, runs)
    rng = np.random.default_rng([SEED, fed.data_seed, 2])
    star_prob = probabilities(fed.x, np.broadcast_to(fed.star[:, None], (runs, fed.x.shape[1], *fed.star.shape[1:])))
    wanted = fisher_rounds(rounds)
    rows, moves = [], []
    with threadpool_limits(limits=1):  # small products: a second thread only waits (and the cores are shared)
        precondition = _preconditioner(fed, runs)
        for t, before, models in fedavg_rounds(fed.x, fed.y, start, rounds=rounds, epochs=epochs, lr=fed.lr,
                                               batch_size=fed.batch_size, l2=fed.l2, shared_order=shared, rng=rng):
            ids = lead | {"round": t, "reference": "optimum (exact theta*)", "n_clients": models.shape[1],
                          "n_params": fed.star[0].size}
            rows += [ids | r for r in round_rows(fed, models, star_prob, precondition, fisher=t in wanted)]
            moves.append(lead | movement_row(fed, t, start, before, models))
    info = {"star_grad_norm": fed.star_grad_norm, "cg_residual_max": float(np.nanmax([r["cg_residual"] for r in rows]))}
    return rows, moves, info


# ---------------------------------------------------------------------------- tables as written
TEXT_COLUMNS = ("cell", "task", "split", "design", "start", "shared", "rule", "weights", "reference", "exact_note",
                "note")  # the rest are numbers (an empty cell: NaN)
INT_COLUMNS = ("data_seed", "round", "n_clients", "n_params", "n_runs")


def read_rows(path):
    """The rows of a table this script wrote (CSV), numbers as numbers: what the page and
    the figure are made from, so that the page quotes the committed table to the digit."""
    import csv

    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [{k: (v if k in TEXT_COLUMNS else int(v) if k in INT_COLUMNS else float(v) if v != "" else np.nan)
             for k, v in r.items()} for r in rows]


# ---------------------------------------------------------------------------- the table's family
def headline(rows, level=LEVEL):
    """The rows of the first and last round of each cell for the rules of `SHOWN`, each with
    its interval (blue_coordinate: fit-corrected) widened over all of them (Bonferroni):
    ``fw_low``, ``fw_high`` and ``familywise_level``."""
    last = max(int(r["round"]) for r in rows)
    picked = [r for r in rows if int(r["round"]) in (1, last) and r["rule"] in SHOWN]
    to = 1 - (1 - level) / len(picked)
    out = []
    for r in picked:
        key = "ratio_corrected" if r["rule"] == "blue_coordinate" else "ratio"
        value = float(r[key])
        low, high = widened(value, float(r[f"{key}_low"]), float(r[f"{key}_high"]), level, to, interval_df(r))
        out.append({k: r[k] for k in (*LEAD, "round", "rule")} | {"value": value, "fw_low": low, "fw_high": high,
                                                                   "familywise_level": to})
    return out


def verdicts(rows):
    """{cell: [line at round 1, line at the last round]}: `familywise_verdicts` over the
    cells, on the rules without curvature at theta* (not runnable), the lines saying "round"."""
    last = max(int(r["round"]) for r in rows)
    judged = [r | {"iteration": r["round"]} for r in rows
              if int(r["round"]) in (1, last) and r["rule"] in HEADROOM_RULES]
    found = familywise_verdicts(judged)
    return {cell: [line.replace("iteration ", "round ", 1) for line in lines] for cell, lines in found.items()}


# ---------------------------------------------------------------------------- the page and figure
def _fmt(value, low, high, digits=".3f"):
    if not np.isfinite(value):
        return "-"
    return f"{value:{digits}} [{low:{digits}}, {high:{digits}}]"


def _correlation(row):
    if row is None:
        return "-"
    return _fmt(*(row[f"client_correlation{x}"] for x in ("", "_low", "_high")))


def markdown(rows, moves, found, settings, command):
    table = headline(rows)
    last = max(int(r["round"]) for r in rows)
    fw = table[0]["familywise_level"]
    s = settings
    tasks = {r["task"] for r in rows}
    described = []
    if SOFTMAX in tasks:
        described.append("softmax-regression (650 parameters, 3 clients of 200 examples, l2 0.01, lr 0.5, batches "
                         f"of 20; theta* one per data seed), {s['runs']} runs per cell")
    if HEAD in tasks:
        described.append(f"digits-head (850 parameters, frozen pretrained body, l2 {HEAD_L2}, SGD lr {HEAD_LR}, "
                         f"batches of {HEAD_BATCH}; theta* per run, as the run's augmentation enters the objective), "
                         f"{s['head_runs']} runs per cell")
    epochs = f"{s['epochs']} local epoch{'s' if s['epochs'] != 1 else ''}"
    lines = [
        f"Headroom against each run's exact optimum theta* as FedAvg runs it: every round each client starts from "
        f"the global model, trains {epochs} of SGD on its own examples in the run's random order, "
        f"the server averages; {s['rounds']} rounds. Errors e_k = theta_k - theta* of the clients' round-end "
        "models; MSE = E||sum_k W_k e_k||^2 over runs, as a ratio to averaging's (averaging = the next global "
        f"model), paired by run. {'; '.join(described)}. inverse_variance and blue_coordinate "
        "are fitted against theta* (oracles; cross-fitted over 2 folds, blue_coordinate fit-corrected); curvature "
        "weights (sum_j H_j)^-1 H_k with the Hessians at theta* (needs theta*); fisher_full_own the same weights "
        "from each client's Hessian at its own round-end model (runnable). 95 % intervals: `headroom_rows`' for "
        "the fitted rules (a t interval where its `interval_df` says so), the paired delta-method interval of "
        "`ratio_interval` for curvature and fisher_full_own. Ratios below with intervals widened "
        f"over the {len(table)} intervals of this table (Bonferroni, each at {fw:.5f}). Made by `{command}`.", "",
        "| task | split | data seed | design | round | inverse_variance | blue_coordinate (corrected) | curvature "
        "| fisher_full_own |", "|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in table:
        by.setdefault((r["cell"], int(r["round"])), {})[r["rule"]] = r
    for (cell, t), here in by.items():
        r0 = next(iter(here.values()))
        cols = [_fmt(here[rule]["value"], here[rule]["fw_low"], here[rule]["fw_high"]) if rule in here else "-"
                for rule in SHOWN]
        lines.append(f"| {r0['task']} | {r0['split']} | {r0['data_seed']} | {r0['design']} | {t} | "
                     + " | ".join(cols) + " |")
    lines += ["", f"How far things are from theta* (means over runs, 95 %): |theta_0 - theta*| the start's distance; "
              "the global model's distance after round 1 and after the last round (as a fraction of the start's); "
              "each client's distance moved in round 1 and in the last round, |theta_k - theta_g| from the global "
              "model it started from, as a fraction of |theta_0 - theta*| (the mean over the 3 clients); and how "
              "dependent the clients' round-end models are: the correlation over runs of two clients' values of a "
              "parameter, averaged over the parameters that move and the pairs of clients (95 %, a jackknife over 10 "
              "groups of runs).", "",
              "| task | split | data seed | design | abs(theta_0 - theta*) | global after round 1 | global after the "
              f"last round (round {last}) | fraction left | moved in round 1 (fraction) | moved in round {last} "
              f"(fraction) | client correlation, round 1 | round 2 | round {last} |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in [m for m in moves if int(m["round"]) == last]:
        first, second = (next((f for f in moves if f["cell"] == m["cell"] and int(f["round"]) == t), None)
                         for t in (1, 2))
        k = sum(1 for key in m if key.startswith("moved_fraction_") and key.count("_") == 2)

        def moved(row):
            return np.mean([row[f"moved_fraction_{c}"] for c in range(k)])
        lines.append(f"| {m['task']} | {m['split']} | {m['data_seed']} | {m['design']} "
                     f"| {_fmt(m['start_distance'], m['start_distance_low'], m['start_distance_high'], '.2f')} "
                     f"| {first['global_after']:.2f} | {m['global_after']:.2f} "
                     f"| {_fmt(*(m[f'global_after_fraction{x}'] for x in ('', '_low', '_high')))} "
                     f"| {moved(first):.3f} | {moved(m):.3f} | {_correlation(first)} | {_correlation(second)} "
                     f"| {_correlation(m)} |")
    lines += ["", f"Verdicts (`headroom_verdicts` on mean, inverse_variance and blue_coordinate, family-wise 95 % "
              f"over the {len(found)} cells x 2 rounds; the best runnable rule it can name is the mean: "
              "fisher_full_own is judged in the first table):", ""]
    for cell, cell_lines in found.items():
        lines += [f"- {cell}: {line}" for line in cell_lines]
    return "\n".join(lines) + "\n"


def draw(rows, moves, path, title):
    """Ratio to averaging per round (one panel per task, split and design; a line per rule
    and data seed) and, last, the global model's distance to theta* as a fraction of the
    start's, per cell."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = list(dict.fromkeys((r["task"], r["split"], r["design"]) for r in rows))
    ncols = 4
    nrows = -(-(len(panels) + 1) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 3.3 * nrows), squeeze=False)
    for ax in axes.ravel()[len(panels) + 1:]:
        ax.remove()
    styles = {0: "-", 1: "--", 2: ":"}
    for ax, (task, split, design) in zip(axes.ravel(), panels):
        here = [r for r in rows if (r["task"], r["split"], r["design"]) == (task, split, design)]
        for i, rule in enumerate(SHOWN):
            seeds = sorted({int(r["data_seed"]) for r in here})
            for seed in seeds:
                sel = [r for r in here if r["rule"] == rule and int(r["data_seed"]) == seed]
                key = "ratio_corrected" if rule == "blue_coordinate" else "ratio"
                x = [int(r["round"]) for r in sel]
                y = [float(r[key]) for r in sel]
                low = [float(r[f"{key}_low"]) for r in sel]
                high = [float(r[f"{key}_high"]) for r in sel]
                ax.plot(x, y, styles.get(seed, "-"), marker="o" if rule == "fisher_full_own" else None, ms=3,
                        color=f"C{i}", lw=1, label=rule if seed == seeds[0] else None)
                ax.fill_between(x, low, high, color=f"C{i}", alpha=0.2, lw=0)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_ylim(0, 1.3)  # a ratio beyond (few runs) is in the table
        ax.set_title(f"{task}, {split}\n{design}", fontsize=8)
        ax.set_xlabel("round", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("MSE / MSE of the average", fontsize=8)
        ax.tick_params(labelsize=7)
    axes.ravel()[0].legend(fontsize=7)
    ax = axes.ravel()[len(panels)]
    cells = list(dict.fromkeys(m["cell"] for m in moves))
    for cell in cells:
        sel = [m for m in moves if m["cell"] == cell]
        color = "C0" if sel[0]["task"] == SOFTMAX and sel[0]["split"] == "iid" else (
            "C1" if sel[0]["task"] == SOFTMAX else "C2")
        ax.plot([int(m["round"]) for m in sel], [float(m["global_after_fraction"]) for m in sel], color=color, lw=0.7)
    for color, label in (("C0", "softmax, iid"), ("C1", "softmax, label-skew"), ("C2", HEAD)):
        ax.plot([], [], color=color, label=label)
    ax.set_yscale("log")
    ax.set_title("|global - theta*| / |theta_0 - theta*|, every cell", fontsize=8)
    ax.set_xlabel("round", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------------------- command line
def _check(parser, args):
    for name in ("runs", "head_runs"):
        value = getattr(args, name)
        if value is not None and value < 2 * FOLDS:
            parser.error(f"--{name.replace('_', '-')} must be >= {2 * FOLDS} (2 folds of at least 2 runs); got {value}")
    for name, low in (("rounds", 1), ("epochs", 1)):
        value = getattr(args, name)
        if value is not None and value < low:
            parser.error(f"--{name} must be >= {low}; got {value}")
    if len(set(args.data_seeds)) != len(args.data_seeds) or min(args.data_seeds) < 0:
        parser.error(f"--data-seeds must be distinct integers >= 0; got {' '.join(map(str, args.data_seeds))}")
    if len(set(args.splits)) != len(args.splits):
        parser.error(f"--splits must be distinct; got {' '.join(args.splits)}")
    if args.quick and (args.runs is not None or args.head_runs is not None or args.rounds is not None):
        parser.error("--quick sets the runs and rounds itself: give it without --runs, --head-runs and --rounds")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        parser.error(f"--out {args.out}: not a folder")


def _command(args, settings):
    parts = ["python experiments/headroom_rounds.py"]
    if args.quick:
        parts.append("--quick")
    for option, value, default in (("--runs", args.runs, RUNS), ("--head-runs", args.head_runs, HEAD_RUNS),
                                   ("--rounds", args.rounds, ROUNDS), ("--epochs", args.epochs, EPOCHS)):
        if value is not None and value != default:
            parts.append(f"{option} {value}")
    if args.splits != list(SPLITS):
        parts.append("--splits " + " ".join(args.splits))
    if args.data_seeds != list(DATA_SEEDS):
        parts.append("--data-seeds " + " ".join(map(str, args.data_seeds)))
    if args.no_head:
        parts.append("--no-head")
    return " ".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help=f"softmax-regression runs per cell (default {RUNS})")
    parser.add_argument("--head-runs", type=int, default=None, help=f"digits-head runs per cell (default {HEAD_RUNS})")
    parser.add_argument("--rounds", type=int, default=None, help=f"default {ROUNDS}")
    parser.add_argument("--epochs", type=int, default=None, help=f"local epochs per round (default {EPOCHS})")
    parser.add_argument("--splits", nargs="+", choices=SPLITS, default=list(SPLITS))
    parser.add_argument("--data-seeds", type=int, nargs="+", default=list(DATA_SEEDS))
    parser.add_argument("--no-head", action="store_true", help="leave digits-head out")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_RUNS} runs ({QUICK_HEAD_RUNS} digits-head), {QUICK_ROUNDS} rounds, into "
                             "headroom_rounds_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args(argv)
    _check(parser, args)
    started = utc_now()
    settings = {"runs": QUICK_RUNS if args.quick else (args.runs or RUNS),
                "head_runs": QUICK_HEAD_RUNS if args.quick else (args.head_runs or HEAD_RUNS),
                "rounds": QUICK_ROUNDS if args.quick else (args.rounds or ROUNDS), "epochs": args.epochs or EPOCHS}
    command = _command(args, settings)
    name = "headroom_rounds_quick" if args.quick else "headroom_rounds"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rounds, epochs = settings["rounds"], settings["epochs"]

    def softmax_cells(split, seed):
        fed = softmax_federation(split, seed)
        return [cell_result(fed, design, settings["runs"], rounds=rounds, epochs=epochs) for design in DESIGNS]

    def head_cells(seed):
        made = []
        for design in HEAD_DESIGNS:
            fed = head_federation(seed, settings["head_runs"], DESIGNS[design][1])
            made.append(cell_result(fed, design, settings["head_runs"], rounds=rounds, epochs=epochs))
        return made

    jobs = [(f"{SOFTMAX}, {split}, data seed {seed}", lambda split=split, seed=seed: softmax_cells(split, seed))
            for split in args.splits for seed in args.data_seeds]
    if not args.no_head:
        jobs += [(f"{HEAD}, data seed {seed}", lambda seed=seed: head_cells(seed)) for seed in args.data_seeds]
    results, seconds = timed_rows(jobs, width=40)
    rows = [r for part, _, _ in results for r in part]
    moves = [m for _, part, _ in results for m in part]
    info = {cell_name(p[0]["task"], p[0]["split"], p[0]["data_seed"], p[0]["design"]): i for p, _, i in results}
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    movement = write_csv(moves, out / f"{name}_movement.csv", float_format=".6g")
    rows, moves = read_rows(table), read_rows(movement)  # the page and figure quote the tables as written
    found = verdicts(rows)
    page = markdown(rows, moves, found, settings, command)
    write_page(out, name, page, beside=args.quick)  # a trial's page stays beside its tables, never among the committed
    title = (f"FedAvg, {epochs} local epochs a round: MSE of each rule / MSE of the average (the next global model) "
             "against theta*, 95 % pointwise bands; data seed 0 solid, 1 dashed, 2 dotted")
    draw(rows, moves, out / f"{name}.png", title)
    record = {"table": table.name, "movement_table": movement.name, **settings, "seed": SEED,
              "splits": args.splits, "data_seeds": args.data_seeds, "designs": list(DESIGNS),
              "head_designs": [] if args.no_head else list(HEAD_DESIGNS), "rules": list(RULE_LIST),
              "fisher_rounds": fisher_rounds(rounds), "folds": FOLDS, "reference": "optimum",
              "head_lr": HEAD_LR, "head_batch_size": HEAD_BATCH, "verdicts": found, "cells": info,
              "seconds": seconds, "command": command, "provenance": collect(started, finished=True)}
    for path, content in ((table, record), (movement, {"table": movement.name, "rows_table": table.name,
                                                       "command": command, "provenance": record["provenance"]})):
        write_sidecar(path, content)
    print(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
