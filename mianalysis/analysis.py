"""Dump -> tidy table of MI and distances between clients per checkpoint."""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._io import progress_bar
from ._locking import WriterLock
from .provenance import collect
from ._validation import check_choice, check_flag, check_int, check_k
from .design import design_note
from .distances import METRICS, paired_distances
from .estimators import KSG_NOISE, MarginalDistances, gaussian_mi, gaussian_mi_null, mi_permutation_test
from .estimators.ksg import standardize_columns
from .estimators.registry import DISTANCE_STREAM, estimator_names, estimators_taking, get_estimator
from .regime import estimate_regime_note
from .intervals import (DISTANCE_METHOD, check_level, interval_method, mean_interval, mi_replicates, normal_interval,
                        resample_indices, trend_verdict)

if TYPE_CHECKING:  # names used only in type hints
    import distributed

    from .dumps import ParameterDump

__all__ = [
    "ESTIMATORS", "GAUSSIAN_NULLS", "COLUMNS", "BY", "OPTIONAL_COLUMNS", "gaussian_settings",
    "analyze", "sidecar_path", "write_table", "read_table", "select"
]

ESTIMATORS = ("gaussian", "ksg")  # analysed by default; any registered estimator may be asked for
GAUSSIAN_NULLS = ("permutation", "analytic")
COLUMNS = ("checkpoint", "iteration", "client_a", "client_b", "quantity", "value", "spread",
           "null_mean", "null_std", "p_value", "n_runs", "note", "layer", "ci_low", "ci_high", "verdict")
BY = ("layer",)
OPTIONAL_COLUMNS = ("layer", "ci_low", "ci_high", "verdict")  # tables written before `by` or intervals lack them
# Tables written before the registry record these two estimators' interval methods whatever was analysed.
_RECORDED_METHODS = ("gaussian", "ksg")

log = logging.getLogger(__name__)


def gaussian_settings(n_runs: int, n_features: int) -> tuple[dict[str, str], str]:
    """How the Gaussian estimator is run for `n_runs` samples of `n_features` joint
    dimensions: the plain bias-corrected estimate while the sample covariance is
    well-determined (n_runs > 2 * n_features), Ledoit-Wolf shrinkage otherwise."""
    if n_runs > 2 * n_features:
        return {}, ""
    return ({"shrinkage": "ledoit-wolf"},
            f"ledoit-wolf shrinkage: {n_runs} runs <= 2 x {n_features} joint dimensions")


def _drop_constant(x, y):
    keep_x = np.ptp(x, axis=0) > 0
    keep_y = np.ptp(y, axis=0) > 0
    dropped = int((~keep_x).sum() + (~keep_y).sum())
    return x[:, keep_x], y[:, keep_y], dropped


def _mi_row(x, y, estimator, k, permutations, rng, distances=None, distance_cache="auto", standardize=True,
            gaussian_null="permutation"):
    """(value, null_mean, null_std, p_value, note) for one estimator on one client pair;
    an estimate outside the calibrated regime says so in the note (mianalysis.regime).

    `distances`: the two clients' marginal distance matrices of their noised samples (KSG
    only); the estimate and its permutation null then cost O(n^2) each. Otherwise
    `distance_cache` is passed on to the KSG estimator and its permutation test. With
    `gaussian_null` "analytic", a plain (unshrunk) Gaussian estimate gets the null of
    :func:`gaussian_mi_null` and no permutations."""
    x, y, dropped = _drop_constant(x, y)
    notes = [f"dropped {dropped} constant parameters"] if dropped else []
    if x.shape[1] == 0 or y.shape[1] == 0:  # I(c; Y) = 0, as the estimators return (with null 0, p = 1)
        side = "client_a's" if x.shape[1] == 0 else "client_b's"
        notes.append(f"{side} parameters are constant across runs: MI is 0")
        if permutations:
            return 0.0, 0.0, 0.0, 1.0, "; ".join(notes)
        return 0.0, np.nan, np.nan, np.nan, "; ".join(notes)
    if np.array_equal(x, y):
        notes.append("identical samples (same initial point): MI is infinite")
        return np.inf, np.nan, np.nan, np.nan, "; ".join(notes)
    value, null_mean, null_std, p = _estimate(x, y, estimator, k, permutations, rng, distances, distance_cache,
                                              standardize, gaussian_null, notes)
    shrunk = any(n.startswith("ledoit-wolf shrinkage: ") for n in notes)  # a singular covariance, shrunk
    notes.append(estimate_regime_note(estimator, x.shape[0], x.shape[1] + y.shape[1], float(value), shrinkage=shrunk))
    return value, null_mean, null_std, p, "; ".join(n for n in notes if n)


def _estimate(x, y, estimator, k, permutations, rng, distances, distance_cache, standardize, gaussian_null, notes):
    """(value, null_mean, null_std, p_value) of one estimator on varying, distinct samples;
    appends the estimator's choices to `notes`."""
    if distances is not None:  # constant parameters add 0 to every max-norm distance
        if not permutations:
            return get_estimator(estimator).function(*distances, k=k), np.nan, np.nan, np.nan
        res = mi_permutation_test(*distances, estimator=estimator, n_permutations=permutations, random_state=rng, k=k)
        return res.estimate, res.null_mean, res.null_std, res.p_value
    entry = get_estimator(estimator)
    if entry.transform is not None:  # once: the estimate and every shuffle see the same transformed samples
        x, y = entry.transform(x), entry.transform(y)
    value = None
    if entry.covariance:  # a Gaussian log-determinant estimate (of the transformed samples)
        kwargs, note = gaussian_settings(x.shape[0], x.shape[1] + y.shape[1])
        if note:
            notes.append(note)
        try:
            value = gaussian_mi(x, y, **kwargs)
        except ValueError as exc:  # singular covariance: shrink, and say why
            kwargs = {"shrinkage": "ledoit-wolf"}
            notes.append(f"ledoit-wolf shrinkage: {exc}")
        if gaussian_null == "analytic" and "analytic" in entry.nulls:
            if value is not None and not kwargs:
                null = gaussian_mi_null(x.shape[0], x.shape[1], y.shape[1])
                notes.append(f"analytic null ({'exact' if null.exact_available else 'Bartlett chi-square'})")
                return value, null.mean, null.std, null.p_value(value)
            notes.append("no analytic null with shrinkage" + (f": {permutations} permutations" if permutations else ""))
        test_as = "gaussian"  # the transformed samples' test is the Gaussian estimate's
        function = gaussian_mi
    else:
        kwargs = {name: v for name, v in (("k", k), ("standardize", standardize)) if name in entry.arguments}
        if entry.distance_cache:
            kwargs = {"k": k, "distance_cache": distance_cache, "standardize": standardize}
        test_as, function = estimator, entry.function
    if permutations:
        res = mi_permutation_test(x, y, estimator=test_as, n_permutations=permutations, random_state=rng, **kwargs)
        return res.estimate, res.null_mean, res.null_std, res.p_value
    if value is None:
        value = function(x, y, **kwargs, **({"random_state": rng} if entry.random_state else {}))
    return value, np.nan, np.nan, np.nan


def analyze(dump: ParameterDump | str | os.PathLike, *, estimators: Sequence[str] = ESTIMATORS,
            metrics: Sequence[str] = METRICS, k: int = 3, n_permutations: int | Mapping[str, int] = 0,
            layer: str | Sequence[str] | None = None, by: str | None = None, standardize: bool = True,
            random_state: int = 0, out: str | os.PathLike | None = None, progress: bool = False,
            distance_cache: bool | str = "auto", verify: bool = True, force: bool = False,
            gaussian_null: str = "permutation", ci_resamples: int | None = None, ci_level: float = 0.95,
            scheduler: str | None = None, client: distributed.Client | None = None,
            timeout: float | None = None) -> list[dict]:
    """MI and distances between every pair of clients at every checkpoint of a dump.

    Parameters
    ----------
    dump : ParameterDump or path
        Its completed runs are analysed. A dump that is not complete (still being sampled,
        or stopped) is analysed as far as it goes, and every row's ``note`` says so
        ("dump incomplete: 40 of 200 runs"), as does the sidecar (``dump_runs``).
    estimators : sequence of str, default=("gaussian", "ksg")
        Registered estimators (:func:`mianalysis.estimators.registry.estimator_names`):
        "gaussian", "ksg", "copula" (:func:`mianalysis.gaussian_copula_mi`, run as the
        Gaussian estimator on each parameter's normal scores, with the same shrinkage rule
        and notes) or one added by
        :func:`~mianalysis.estimators.registry.register_estimator`; rows ``mi_NAME``.
    metrics : sequence of {"euclidean", "manhattan", "chebyshev"}
        Mean paired distance between the clients' samples (run i of a with run i of b).
    k : int, default=3
        Neighbours for KSG, ``1 <= k < n_runs`` (each run is one sample, and every sample
        needs k neighbours other than itself); checked before any work or file, with or
        without the distance cache.
    n_permutations : int or dict of estimator -> int, default=0
        If > 0, a permutation test per MI estimate: null mean, sd and p-value. A dict sets
        the number per estimator (e.g. ``{"gaussian": 100, "ksg": 10}``; missing ones 0).
    layer : str or list of str, optional
        Analyse only these tensors of the parameter vector (see ParameterDump.layer_columns).
    by : {None, "layer"}, default=None
        None: MI and distances of the whole (selected) parameter vector, column ``layer``
        empty. "layer": the same rows once per tensor of ``dump.layout`` (those `layer`
        selects), computed on that tensor's columns alone and named in the ``layer``
        column; each equals what ``layer=NAME`` gives. Recorded metrics (loss) come once
        per checkpoint, with ``layer`` empty.
    standardize : bool, default=True
        KSG: divide each parameter by its sd over runs before the neighbour search
        (:func:`mianalysis.ksg_mi`'s `standardize`), so that the widest parameters (biases
        next to small weights) do not decide every max-norm distance. On known-MI data
        with coordinates on scales from 1e-3 to 1e3 the mean error fell from 1.71 to 0.36
        nats (``figures/ksg_standardize.csv``); at equal scales it is unchanged. Recorded
        in the sidecar's settings (``ksg_standardize``).
    random_state : int, default=0
        Seed of KSG's noise and of the permutations; each (checkpoint, pair, estimator)
        draws from its own stream, so the table does not depend on what else is analysed.
    out : path, optional
        Also write the table as CSV. The analysis is then resumable: every finished
        checkpoint is appended to ``OUT.partial`` (with the settings), a rerun with the same
        arguments after an interruption continues from there, and the CSV is written
        atomically at the end, when the journal is removed. Next to it goes the JSON
        sidecar ``OUT.json`` (e.g. ``table.csv.json``): the analysis settings, the dump's
        provenance and the provenance of every session that computed the table (see
        :func:`sidecar_path`); the CSV itself holds only results. While it runs it holds the
        writer lock of `out` (``.OUT.lock`` beside it): a second analysis writing the same
        `out` gets a LockedError naming this process.

        `out` is never a file of a dump, the dump folder or a path inside one (ValueError,
        even with `force`), nor a folder. An existing `out` (or sidecar) is replaced only
        when its sidecar records an analysis with the same settings (the same dump and
        completed chunks, and the same arguments), when it records the same analysis of the
        same dump made when that held fewer runs (it was incomplete), or with
        ``force=True``. A refused call
        changes nothing on disk. Temporary files and the journal are created new, never
        written through a symbolic link found in their place.
    progress : bool, default=False
    distance_cache : {"auto", True, False}, default="auto"
        KSG: compute each client's (n_runs x n_runs) max-norm distance matrix once per
        checkpoint and derive every pair's estimate and permutation null from them, in
        O(n_runs^2) each instead of O(n_runs^2 d). Needs n_clients x n_runs^2 float64
        values in memory (11.6 GB for 3 clients x 22,000 runs); "auto" uses it when that is
        at most half the memory the process can still allocate (physical memory, cgroup
        limits, ``ulimit -v``); when it does not fit, each pair's KSG estimate
        and test still use their own distance caches where those fit. False keeps every
        KSG computation in O(n_runs) memory. Results are the same either way up to the
        tie-breaking noise, which the cache draws per client rather than per pair.
    verify : bool, default=True
        First check the dump's file sizes and the SHA-256 of every completed chunk
        (:meth:`ParameterDump.verify`), so that no result is computed from damaged runs
        (DumpError naming the file and runs, before any file is written). It reads the
        whole dump once: 0.08 s for a 55 MiB dump (3 clients x 2000 runs x 400 parameters
        x 6 checkpoints) against 4.7-6.3 s for its analysis without intervals, 0.16 s for 24
        checkpoints against 12-18 s (about 1%; ``python benchmarks/bench_verify.py``, run
        before intervals existed; the default intervals make that analysis 8.7 times longer,
        ``python benchmarks/bench_intervals.py``).
        With False the sidecar records ``"dump_verified": false``.
    force : bool, default=False
        Replace an existing `out` that is not a previous analysis with the same settings.
    gaussian_null : {"permutation", "analytic"}, default="permutation"
        Null of the ``mi_gaussian`` rows (and ``mi_copula``: the Gaussian null of the normal
        scores, an approximation there). "analytic" takes null mean, sd and p-value from
        :func:`mianalysis.gaussian_mi_null` (Wilks' Lambda; no permutations, at no cost)
        wherever the plain estimate is used, notes "analytic null (exact)" or "(Bartlett
        chi-square)", and falls back to `n_permutations` for estimates with shrinkage (noted).
        The default stays "permutation": the analytic law assumes Gaussian parameters,
        which trained networks need not be, while shuffling the pairing assumes nothing.
    ci_resamples : int or dict of estimator -> int, optional
        Resamples of the runs behind each MI estimate's confidence interval: bootstrap
        resamples for "gaussian", random halves for "ksg" (:mod:`mianalysis.intervals`
        says why; the registry entry's ``interval`` and ``ci_resamples``). Default
        ``{"gaussian": 20, "ksg": 10, "copula": 20}``; 0 (or 1) gives no MI interval.
        A bootstrap resample costs one Gaussian estimate and a half about 1/4 of a KSG
        estimate, so the default adds 20 Gaussian and about 2.5 KSG estimates per pair and
        checkpoint; the interval uses Student's t quantile for the standard error of so few
        resamples (2.09 for 20 and 2.26 for 10 at 95 %, instead of 1.96). Distance intervals
        need no resamples and are always given.
    ci_level : float, default=0.95
        Level of every interval. Level, resamples and method per quantity are recorded in
        the sidecar's settings (``ci_level``, ``ci_resamples``, ``ci_method``).
    scheduler : str, optional
        Compute the checkpoints on Dask workers (the ``dask`` extra): ``"local:N"``,
        ``"tcp://HOST:PORT"`` or a scheduler file (see :mod:`mianalysis.scaleout`). Each
        checkpoint is one task, single-threaded, with its own distance matrices and its
        permutations; this process assembles the table (and the changes between
        checkpoints) in order, journals it and writes it. The table is the same as a local
        analysis's, row for row and value for value. Workers read the dump from its
        absolute path: they need the same files at the same path (a shared file system; a
        worker that finds another dump there, or none, is a DumpError naming it), and with the
        distance cache each worker holds n_clients x n_runs^2 float64 values per task (the
        cache is used or not as it fits in *this* process's memory, so that the table is
        the same: pass ``distance_cache=False`` for workers with less).
    client : distributed.Client, optional
        An open Dask client to use instead of `scheduler` (it is left open).
    timeout : float, optional
        Seconds to reach the scheduler (default
        :data:`mianalysis.scaleout.CONNECT_TIMEOUT`; a SchedulerError, an OSError, after
        that, and nothing is written), and to wait for a worker when none is left (then a
        SchedulerError; the journal keeps the checkpoints analysed so far).

    Returns
    -------
    rows : list of dict
        Tidy table with columns ``checkpoint, iteration, client_a, client_b, quantity,
        Tidy table with columns ``checkpoint, iteration, client_a, client_b, quantity,
        value, spread, null_mean, null_std, p_value, n_runs, note, layer, ci_low, ci_high,
        verdict``. ``quantity`` is "mi_gaussian", "mi_ksg", "mi_exact" (bits; the exact MI,
        for a dump of a task that knows it, such as gaussian-sgd, when every parameter is
        analysed and not by layer), a metric name (``spread`` = sd over runs), or a
        recorded training metric such as "loss" (``client_b`` empty; mean and sd over runs).
        ``layer`` names the tensor with ``by="layer"`` and is empty otherwise (tables
        written before it existed read back with it empty). MI and distance rows carry their
        confidence interval ``[ci_low, ci_high]``. From the second checkpoint on, each MI
        and distance quantity also has a row ``delta_QUANTITY`` (e.g. "delta_mi_ksg",
        "delta_euclidean"): its change since the previous checkpoint, paired (the same
        runs, or the same resamples of them, at both) with its interval, and ``verdict``
        "rising" or "falling" only when the interval excludes 0, else "no detectable
        change"; "not made: shrinkage estimate" when either Gaussian estimate used
        Ledoit-Wolf shrinkage. Other rows have an empty verdict.

    Notes
    -----
    The Gaussian estimator is bias-corrected while runs outnumber twice the joint
    dimension, and uses Ledoit-Wolf shrinkage otherwise; parameters that are constant over
    runs are dropped (they carry no information; the estimators drop them the same way).
    Each such choice is written in the row's ``note``. When all of a client's parameters
    are constant over runs, its MI with any client is 0 (null 0, p-value 1 with
    permutations), as :func:`mianalysis.gaussian_mi`, :func:`mianalysis.ksg_mi` and
    :func:`mianalysis.mi_permutation_test` return; this includes clients that all start
    from one fixed point. At a checkpoint where two clients' varying parameters are
    identical in every run (all clients start from the same random point) MI is reported
    as infinite, with a note.

    An MI estimate outside the regime where the estimator was calibrated against known MI
    (``python experiments/calibration.py --regimes``) says so in its note, e.g.
    "outside calibration: shrinkage estimate (400 runs <= 2 x 200 joint dims)" or
    "outside calibration: > 4 joint dims" (see :func:`mianalysis.regime.estimate_regime_note`);
    :mod:`mianalysis.plots` draws such points hollow.

    The MI rows of a dump the sampler wrote also say what its sampling design forces on
    the dependence between clients (:func:`mianalysis.design.design_note`), e.g. "design:
    fixed start, no stream shared: the clients are independent (MI 0 in truth)".

    Examples
    --------
    Two clients whose 2 parameters are correlated by 0.6, 1000 runs, one checkpoint:

    >>> import numpy as np
    >>> from mianalysis import ParameterDump, analyze
    >>> rng = np.random.default_rng(0)
    >>> a = rng.standard_normal((1, 1000, 2))
    >>> b = 0.6 * a + 0.8 * rng.standard_normal((1, 1000, 2))
    >>> dump = ParameterDump.from_arrays("ab", {"a": a, "b": b})
    >>> rows = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], n_permutations=99)
    >>> for row in rows:
    ...     print(row["quantity"], round(row["value"], 3), row["p_value"])
    euclidean 1.125 nan
    mi_gaussian 0.625 0.01

    The exact values: the mean distance between a and b is sqrt(0.8 pi / 2) = 1.121 (a
    Rayleigh mean), and the MI is -(2 / 2) log2(1 - 0.6^2) = 0.644 bits.
    """
    from .dumps import DumpError, ParameterDump, layout_columns, select_layout

    if not isinstance(dump, ParameterDump):
        dump = ParameterDump.open(dump)
    estimators = tuple(estimators)
    metrics = tuple(metrics)
    for e in estimators:
        get_estimator(e, "estimators")
    for m in metrics:
        check_choice(m, "metrics", METRICS)
    k = check_int(k, "k", low=1)
    if by is not None:
        check_choice(by, "by", BY)
    standardize = check_flag(standardize, "standardize")
    check_flag(verify, "verify")
    check_flag(force, "force")
    permutations = n_permutations if isinstance(n_permutations, dict) else {e: n_permutations for e in estimators}
    unknown = set(permutations) - set(estimator_names())
    if unknown:
        raise ValueError(f"`n_permutations` names unknown estimators {sorted(unknown)}; known: {list(estimator_names())}")
    permutations = {e: check_int(permutations.get(e, 0), "n_permutations", low=0) for e in estimators}
    random_state = check_int(random_state, "random_state", low=0)
    check_choice(gaussian_null, "gaussian_null", GAUSSIAN_NULLS)
    ci_resamples = _check_ci_resamples(ci_resamples, estimators)
    ci_level = check_level(ci_level)
    cols = dump.layer_columns(layer)
    groups = [("", cols)] if by is None else [
        (e.name, layout_columns([e])) for e in (dump.layout if layer is None else select_layout(dump.layout, layer))]
    n_runs = dump.completed_runs
    if n_runs < 2:
        raise ValueError(f"dump {dump.path} has {n_runs} completed runs; analysis needs at least 2")
    if estimators_taking("k", estimators):  # before any work or file: each run is one sample (KSG)
        k = check_k(k, n_runs, samples="the number of runs")
    reuse_distances = MarginalDistances.cache_fits(n_runs, count=len(dump.clients), distance_cache=distance_cache)
    if out is not None:
        settings = {"dump": str(Path(dump.path).resolve()), "n_runs": n_runs, "chunks": dump.chunks_digest(),
                    "estimators": list(estimators), "metrics": list(metrics), "k": k, "permutations": permutations,
                    "layer": layer, "by": by, "ksg_standardize": standardize, "random_state": random_state,
                    "distance_cache": reuse_distances, "ci_level": ci_level, "ci_resamples": ci_resamples,
                    "ci_method": {**{f"mi_{e}": interval_method(e) for e in dict.fromkeys(_RECORDED_METHODS + estimators)},
                                  "distances": DISTANCE_METHOD}}
        if gaussian_null != "permutation":  # tables of the default analysis keep their settings
            settings["gaussian_null"] = gaussian_null
        _check_out(out, settings, force)  # before the lock: a refused `out` leaves nothing behind
    if verify:
        try:
            dump.verify(finite=False)  # non-finite values are named below, for the selected columns only
        except DumpError as exc:
            raise DumpError(f"{exc}; nothing was analysed: restore or recreate the dump, or pass verify=False "
                            "(mianalysis analyze --no-verify) to analyse it as it is") from None
    job = _CheckpointAnalysis(
        dump, n_runs=n_runs, estimators=estimators, metrics=metrics, k=k, permutations=permutations, groups=groups,
        standardize=standardize, random_state=random_state, distance_cache=distance_cache,
        reuse_distances=reuse_distances, gaussian_null=gaussian_null, ci_resamples=ci_resamples, ci_level=ci_level)
    distributed = scheduler is not None or client is not None
    with contextlib.ExitStack() as stack:
        if distributed:  # reached first: a scheduler that cannot be reached leaves nothing behind
            from .scaleout import CONNECT_TIMEOUT, connect, run_unordered

            dask = stack.enter_context(connect(scheduler, client=client,
                                               timeout=CONNECT_TIMEOUT if timeout is None else timeout))
        if out is not None:  # one writer per table: the lock of `out` covers its journal and the final CSV
            stack.enter_context(WriterLock(out))
        rows = []
        journal = None
        done = set()
        if out is not None:
            _check_out(out, settings, force)  # again: another analysis may have written it meanwhile
            journal = _Journal(Path(str(out) + ".partial"), settings)
            for t, saved in journal.read():
                rows += saved
                done.add(t)
            if done:
                log.info("resuming the analysis journal %s: %d of %d checkpoints already analysed",
                         journal.path, len(done), len(dump.checkpoints))

        resampled = {}  # (checkpoint, layer) -> {(a, b, quantity): per-run distances or MI replicates}
        columns = dict(groups)

        def of_checkpoint(t, group=""):
            """(a, b, quantity) -> the row of checkpoint t (and tensor `group`) that has an interval."""
            return job.of_checkpoint(rows, t, group)

        def add_changes(t, group=""):
            """The rows delta_QUANTITY of checkpoint t: paired change since t - 1, its interval, a verdict."""
            if (t - 1, group) not in resampled:  # resumed after t - 1: its resamples again (same indices, seeds)
                before = [np.asarray(dump.samples(c, t - 1)[:, columns[group]], dtype=np.float64)
                          for c in range(len(dump.clients))]
                resampled[t - 1, group] = job.with_intervals(t - 1, before, of_checkpoint(t - 1, group))
            prev, now = resampled.pop((t - 1, group)), resampled[t, group]
            rows.extend(job.changes(t, group, of_checkpoint(t, group), of_checkpoint(t - 1, group), prev, now))

        def assemble(t, part):
            """Add checkpoint t's rows (a _CheckpointAnalysis part) and its changes since t - 1."""
            first = len(rows)
            metric_rows, per_group = part
            rows.extend(metric_rows)
            for group, group_rows, group_resampled in per_group:
                rows.extend(group_rows)
                resampled[t, group] = group_resampled
                if t > 0:
                    add_changes(t, group)
            if journal is not None:
                journal.append(t, rows[first:])
            log.debug("analysed checkpoint %d (iteration %d): %d rows", t, dump.checkpoints[t], len(rows) - first)

        per_checkpoint = len(job.pairs) * len(groups)
        bar = progress_bar((len(dump.checkpoints) - len(done)) * per_checkpoint, unit="pair", desc="analyzing",
                           enabled=progress)
        todo = [t for t in range(len(dump.checkpoints)) if t not in done]
        if not distributed:
            for t in todo:
                assemble(t, job(t, progress=bar.update))
        else:  # each checkpoint on a worker, with its own distance matrices; assembled here in order
            computed = run_unordered(dask, job, todo, name="analyze-checkpoint",
                                     timeout=CONNECT_TIMEOUT if timeout is None else timeout)
            with contextlib.closing(computed):
                for t, part in _in_order(computed, todo):
                    bar.update(per_checkpoint)
                    assemble(t, part)
        bar.close()
        rows.sort(key=lambda r: r["checkpoint"])  # stable: the order within a checkpoint is kept
        if out is not None:
            tmp = Path(str(out) + ".tmp")
            with _new_file(tmp) as fh:
                _write_csv(rows, fh)
            os.replace(tmp, out)
            _write_sidecar(out, {"table": Path(out).name, "settings": journal.settings, "dump_verified": bool(verify),
                                 "dump_runs": {"analysed": n_runs, "total": dump.n_runs, "complete": dump.complete},
                                 "dump_provenance": dump.provenance, "provenance": journal.finished_sessions()})
            journal.remove()
    return rows


def _in_order(results, order):
    """(item, result) pairs that arrive in any order, passed on in the order of `order`."""
    waiting = {}
    position = 0
    for item, result in results:
        waiting[item] = result
        while position < len(order) and order[position] in waiting:
            yield order[position], waiting.pop(order[position])
            position += 1


class _CheckpointAnalysis:
    """The rows of one checkpoint, computed alone: what :func:`analyze` does per checkpoint,
    in this process or on a Dask worker (it holds the dump and the settings, never samples;
    the resample indices are drawn again where it runs, from `random_state`).

    Calling it with a checkpoint index gives ``(metric_rows, [(layer, rows, resampled)])``:
    the recorded metrics' rows, then per tensor group the rows of every pair (distances,
    MI, exact MI) with their intervals, and what the changes' intervals need
    (``resampled``: (a, b, quantity) -> per-run distances or MI replicates). The rows
    ``delta_*`` of checkpoint t are made from the parts of t - 1 and t by :meth:`changes`.
    """

    def __init__(self, dump, *, n_runs, estimators, metrics, k, permutations, groups, standardize, random_state,
                 distance_cache, reuse_distances, gaussian_null, ci_resamples, ci_level):
        self.dump, self.n_runs, self.estimators, self.metrics, self.k = dump, n_runs, estimators, metrics, k
        self.permutations, self.groups, self.standardize, self.random_state = permutations, groups, standardize, \
            random_state
        self.distance_cache, self.reuse_distances, self.gaussian_null = distance_cache, reuse_distances, gaussian_null
        self.ci_resamples, self.ci_level = ci_resamples, ci_level
        # --- reference client (issue 27, section 1): a dump's client "central" (ParameterSampler(
        # reference="central")) is where the federation should be, not a client: in no pair. ---
        self.pairs = list(itertools.combinations([c for c, name in enumerate(dump.clients) if name != "central"], 2))
        # A dump still being sampled (or stopped) is analysed as far as it goes; every row says so.
        self.incomplete = "" if dump.complete else f"dump incomplete: {n_runs} of {dump.n_runs} runs"
        self.design = design_note(dump.meta)  # what the sampling design forces on the MI rows
        self.with_interval = set(metrics) | {f"mi_{e}" for e in estimators}
        self._indices = None

    def __getstate__(self):
        return {**self.__dict__, "_indices": None}  # drawn again where it runs: settings travel, not arrays

    @property
    def indices(self):
        """Resample indices shared by every checkpoint and pair: changes are paired."""
        if self._indices is None:
            self._indices = {e: resample_indices(self.n_runs, self.ci_resamples[e], e,
                                                 np.random.default_rng([self.random_state, 1, get_estimator(e).stream]))
                             for e in self.estimators}
        return self._indices

    def row(self, t, a, b, quantity, value, spread=np.nan, null_mean=np.nan, null_std=np.nan, p=np.nan, note="",
            group="", ci=(np.nan, np.nan), verdict=""):
        dump = self.dump
        return {"checkpoint": t, "iteration": dump.checkpoints[t], "client_a": dump.clients[a],
                "client_b": "" if b is None else dump.clients[b], "quantity": quantity,
                "value": float(value), "spread": float(spread), "null_mean": float(null_mean),
                "null_std": float(null_std), "p_value": float(p), "n_runs": self.n_runs,
                "note": "; ".join(n for n in (note, self.incomplete) if n), "layer": group,
                "ci_low": float(ci[0]), "ci_high": float(ci[1]), "verdict": verdict}

    def __call__(self, t, progress=None):
        dump, n_clients = self.dump, len(self.dump.clients)
        metric_rows = []
        for c in range(n_clients):
            for name in dump.metric_names:
                values = dump.metric(c, name)[t]
                with np.errstate(invalid="ignore"):  # a metric with an infinity has no sd; the note says why
                    metric_rows.append(self.row(t, c, None, name, np.mean(values), np.std(values, ddof=1),
                                                note=_metric_note(name, values)))
        exact = _exact_mi(dump, self.groups[0][1]) if self.groups[0][0] == "" else None
        per_group = []
        for group, cols in self.groups:
            samples = [np.asarray(dump.samples(c, t)[:, cols], dtype=np.float64) for c in range(n_clients)]
            _check_finite(dump, t, samples, cols)
            distances = None
            cache_users = [e for e in self.estimators if get_estimator(e).distance_cache]
            if cache_users and self.reuse_distances:
                # Each client's marginal distances serve every pair it is in, the estimate and
                # all its permutations; tie-breaking noise is drawn per (checkpoint, client).
                distances = [MarginalDistances.of(s, noise=KSG_NOISE, standardize=self.standardize,
                                                  random_state=np.random.default_rng([self.random_state, t, c,
                                                                                      DISTANCE_STREAM]))
                             for c, s in enumerate(samples)]
            rows = []
            for a, b in self.pairs:
                x, y = samples[a], samples[b]
                for metric in self.metrics:
                    d = paired_distances(x, y, metric)
                    rows.append(self.row(t, a, b, metric, d.mean(), d.std(ddof=1), group=group))
                for estimator in self.estimators:
                    entry = get_estimator(estimator)
                    rng = np.random.default_rng([self.random_state, t, a, b, entry.stream])
                    cached = (distances[a], distances[b]) if entry.distance_cache and distances is not None else None
                    value, null_mean, null_std, p, note = _mi_row(x, y, estimator, self.k,
                                                                  self.permutations[estimator], rng, cached,
                                                                  self.distance_cache, self.standardize,
                                                                  self.gaussian_null)
                    note = "; ".join(n for n in (note, self.design) if n)
                    rows.append(self.row(t, a, b, f"mi_{estimator}", value, null_mean=null_mean, null_std=null_std,
                                         p=p, note=note, group=group))
                if exact is not None and group == "":  # the exact MI is that of the whole vector
                    rows.append(self.row(t, a, b, "mi_exact", exact(dump.checkpoints[t], a, b)))
                if progress is not None:
                    progress(1)
            per_group.append((group, rows, self.with_intervals(t, samples, self.of_checkpoint(rows, t, group))))
        return metric_rows, per_group

    def of_checkpoint(self, rows, t, group=""):
        """(a, b, quantity) -> the row of `rows` of checkpoint t (and tensor `group`) that has an interval."""
        clients = self.dump.clients
        return {(clients.index(r["client_a"]), clients.index(r["client_b"]), r["quantity"]): r
                for r in rows if r["checkpoint"] == t and r["client_b"] != "" and r["quantity"] in self.with_interval
                and r.get("layer", "") == group}

    def with_intervals(self, t, samples, of_t):
        """Fill the interval of every MI and distance row of checkpoint t (`of_t`: (a, b,
        quantity) -> row); return what their changes' intervals need."""
        out = {}
        n_runs, k, incomplete, ci_level = self.n_runs, self.k, self.incomplete, self.ci_level
        for (a, b, q), row in of_t.items():
            if q in self.metrics:
                out[a, b, q] = paired_distances(samples[a], samples[b], q)
                row["ci_low"], row["ci_high"] = mean_interval(out[a, b, q], ci_level)[1:]
            elif np.isfinite(row["value"]) and len(self.indices[q[3:]]) >= 2:  # an MI estimate
                e = q[3:]
                entry = get_estimator(e)
                if entry.interval == "half-subsampling" and "k" in entry.arguments and n_runs // 2 <= k:
                    base = row["note"][:len(row["note"]) - len(incomplete)].rstrip("; ")  # incomplete: last
                    row["note"] = "; ".join(filter(None, [base, f"no interval: halves of {n_runs} runs are too "
                                                                f"few for k={k}", incomplete]))
                    continue
                shrunk = {"shrinkage": "ledoit-wolf"} if "ledoit-wolf" in row["note"] else None
                x, y = samples[a], samples[b]
                if entry.distance_cache and self.standardize:  # as the estimate itself (MI does not change with scale)
                    x, y = standardize_columns(x), standardize_columns(y)
                out[a, b, q] = mi_replicates(x, y, e, self.indices[e], k=k, gaussian_kwargs=shrunk,
                                             seed=(self.random_state, t, a, b, entry.stream, 1))
                row["ci_low"], row["ci_high"] = normal_interval(row["value"], out[a, b, q].std(ddof=1), ci_level,
                                                                df=len(out[a, b, q]) - 1)
        return out

    def changes(self, t, group, of_t, of_prev, prev, now):
        """The rows delta_QUANTITY of checkpoint t: the paired change since t - 1 of every row
        of `of_t` (rows of t - 1: `of_prev`; what their intervals need: `prev` and `now`)."""
        added = []
        for (a, b, q), row in of_t.items():
            old = of_prev.get((a, b, q))
            if old is None:
                continue
            delta, ci = row["value"] - old["value"], (np.nan, np.nan)
            if (a, b, q) in now and (a, b, q) in prev:
                change = now[a, b, q] - prev[a, b, q]
                if q in self.metrics:
                    delta, *ci = mean_interval(change, self.ci_level)
                else:
                    ci = normal_interval(delta, change.std(ddof=1), self.ci_level, df=len(change) - 1)
            shrinkage = [f"ledoit-wolf shrinkage at checkpoint {c}" for c, r in ((t - 1, old), (t, row))
                         if "ledoit-wolf" in r["note"]]
            note = "; ".join(shrinkage)  # the change is always since checkpoint t - 1
            added.append(self.row(t, a, b, f"delta_{q}", delta, note=note, group=group, ci=ci,
                                  verdict=trend_verdict(*ci, note)))
        return added


def _exact_mi(dump, cols):
    """A function (iteration, a, b) -> the exact MI in bits of clients a and b, when the dump
    was sampled from a task that knows it (see Task.exact_mi) and every parameter is
    analysed; else None. The task is rebuilt from the dump's settings."""
    meta = dump.meta
    if not isinstance(meta, dict) or not isinstance(meta.get("task_settings"), dict):
        return None
    if not np.array_equal(np.arange(dump.n_params)[cols], np.arange(dump.n_params)):
        return None
    from .tasks import TASKS
    from .tasks.base import Task

    kind = TASKS.get(meta.get("task"))
    if kind is None or kind.exact_mi is Task.exact_mi:
        return None
    try:
        task = kind(**meta["task_settings"])
        init, shared = meta.get("init", "per-run"), tuple(meta.get("shared", ()))
        task.exact_mi(0, 0, min(1, task.n_clients - 1), init=init, shared=shared)
    except (TypeError, ValueError):  # settings this version does not know: no exact answer
        return None
    return lambda iteration, a, b: task.exact_mi(iteration, a, b, init=init, shared=shared)


def _check_ci_resamples(ci_resamples, estimators):
    """`ci_resamples` as a dict estimator -> int (see analyze)."""
    if ci_resamples is None:
        ci_resamples = {e: get_estimator(e).ci_resamples for e in estimators}
    if not isinstance(ci_resamples, dict):
        ci_resamples = {e: ci_resamples for e in estimators}
    unknown = set(ci_resamples) - set(estimator_names())
    if unknown:
        raise ValueError(f"`ci_resamples` names unknown estimators {sorted(unknown)}; known: {list(estimator_names())}")
    return {e: check_int(ci_resamples.get(e, 0), "ci_resamples", low=0) for e in estimators}


def _metric_note(name, values):
    """The note of a recorded metric's row: how many runs hold NaN (not recorded, or a
    failed evaluation) or an infinity (e.g. an overflowing loss at finite parameters)."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return ""
    return (f"{name} is not finite in {int(bad.sum())} of {values.size} runs ({int(np.isnan(values).sum())} NaN, "
            f"{int(np.isinf(values).sum())} inf)")


def _check_finite(dump, t, samples, cols):
    """DumpError naming the client, checkpoint, runs and tensor of a non-finite sample (a
    dump written by software that did not check them; see ParameterDump.verify)."""
    from .dumps import DumpError, find_nonfinite

    for c, s in enumerate(samples):
        where = find_nonfinite(s[None], [dump.checkpoints[t]], checkpoints=[t], layout=dump.layout, columns=cols)
        if where is not None:
            raise DumpError(f"dump {dump.path}: client {dump.clients[c]!r} has non-finite parameters at "
                            f"{where.describe()}; the estimators and distances need finite samples (`mianalysis "
                            "verify` checks a whole dump)")


def sidecar_path(table: str | os.PathLike) -> Path:
    """The JSON sidecar of a CSV table: its full name plus ``.json`` (``t.csv`` -> ``t.csv.json``),
    so that any table name maps to one sidecar and it never clashes with another output
    (``NAME.json`` stays free for a file of its own); the experiments write their records
    under this name too."""
    return Path(str(table) + ".json")


def _write_sidecar(table, record):
    path = sidecar_path(table)
    tmp = path.with_name(path.name + ".tmp")
    with _new_file(tmp) as fh:
        fh.write(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def _new_file(path, mode="w"):
    """`path` opened as a new regular file for writing text: a leftover file there (or a
    symbolic link planted in its place) is removed first, never written through."""
    path = Path(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, mode, newline="")


def _dump_around(path):
    """The dump folder that `path` is or lies inside (looking at the path as given and with
    links resolved), or None. A folder is a dump if it holds a manifest.json that reads as
    a dump's (or does not read at all: a damaged dump), a client_0.f32, or the marker of a
    dump being created in it."""
    from .dumps import CREATING, MANIFEST

    path = Path(os.path.abspath(path))
    seen = set()
    for candidate in [path, *path.parents, Path(os.path.realpath(path)), *Path(os.path.realpath(path)).parents]:
        if candidate in seen:
            continue
        seen.add(candidate)
        if not os.path.isdir(candidate):
            continue
        if os.path.lexists(candidate / "client_0.f32") or os.path.lexists(candidate / CREATING):
            return candidate
        manifest = candidate / MANIFEST
        if os.path.lexists(manifest):
            try:
                content = json.loads(manifest.read_bytes()) if os.path.isfile(manifest) else None
            except (OSError, ValueError):
                return candidate
            if content is None or (isinstance(content, dict) and "format_version" in content and "chunks" in content):
                return candidate
    return None


def _previous_settings(sidecar):
    """The settings a sidecar records, or None if it is not the record of an analysis."""
    try:
        if not os.path.isfile(sidecar) or os.path.islink(sidecar):
            return None
        record = json.loads(Path(sidecar).read_text())
    except (OSError, ValueError):
        return None
    settings = record.get("settings") if isinstance(record, dict) else None
    return settings if isinstance(settings, dict) else None


def _check_out(out, settings, force):
    """ValueError unless the analysis may write the table `out` (see analyze's `out`)."""
    out = Path(out)
    dump = _dump_around(out)
    if dump is not None:
        where = "is the dump" if os.path.realpath(out) == os.path.realpath(dump) else "is inside the dump"
        raise ValueError(f"`out` {out} {where} {dump}: an analysis never writes into a dump (it would damage it); "
                         "choose an `out` outside it")
    if os.path.isdir(out):
        raise ValueError(f"`out` {out} is a folder; give a file name for the table, e.g. {out / 'table.csv'}")
    if force:
        return
    sidecar = sidecar_path(out)
    requested = json.loads(json.dumps(settings))
    saved = _previous_settings(sidecar)
    problem = None
    if os.path.lexists(out):
        if not os.path.lexists(sidecar):
            problem = f"{out} exists and is not a table of an earlier analysis (no sidecar {sidecar} records its settings)"
        elif saved is None:
            problem = f"{out} exists and its sidecar {sidecar} is not the record of an analysis"
    elif os.path.lexists(sidecar) and saved is None:
        problem = f"{sidecar} exists and is not the record of an analysis"
    if problem is None and saved is not None and saved != requested and not _superseded(saved, requested):
        diff = {k: (saved.get(k), v) for k, v in requested.items() if saved.get(k) != v}
        problem = f"{out} exists and holds an analysis with other settings (saved, requested): {diff}"
    if problem is not None:
        raise ValueError(f"{problem}; it was left as it is: choose another `out`, or pass force=True "
                         "(mianalysis analyze --force) to replace it")


def _superseded(saved, requested):
    """Whether the saved analysis is the same analysis of the same dump made when it held
    fewer runs (an incomplete dump, analysed while its sampler was still writing): the same
    command run again once more runs are in replaces that table."""
    same = {k: v for k, v in saved.items() if k not in ("n_runs", "chunks")}
    return (same == {k: v for k, v in requested.items() if k not in ("n_runs", "chunks")}
            and isinstance(saved.get("n_runs"), int) and saved["n_runs"] < requested["n_runs"])


class _Journal:
    """Finished checkpoints of an analysis, one JSON line each after a line with the settings
    and the provenance of the sessions that worked on it, this one's last."""

    def __init__(self, path, settings):
        self.path = path
        self.settings = json.loads(json.dumps(settings))
        self.sessions = [collect()]

    def read(self):
        """[(checkpoint, rows)] saved by an earlier run with the same settings; starts the
        journal if there is none."""
        if os.path.islink(self.path) or (os.path.lexists(self.path) and not os.path.isfile(self.path)):
            kind = "a symbolic link" if os.path.islink(self.path) else "not a regular file"
            raise ValueError(f"{self.path} is {kind}, not an analysis journal; it is never read or written "
                             "through: remove it and rerun")
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _new_file(self.path) as fh:
                fh.write(json.dumps(self._head()) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            return []
        lines = self.path.read_text().split("\n")
        try:
            head = json.loads(lines[0])
            saved = head["settings"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{self.path} is not an analysis journal ({exc}); delete it to start again") from exc
        if saved != self.settings:
            diff = {k: (saved.get(k), v) for k, v in self.settings.items() if saved.get(k) != v}
            raise ValueError(f"{self.path} holds a partial analysis with other settings (saved, requested): {diff}; "
                             "delete it or choose another `out`")
        entries = []
        for line in lines[1:]:
            try:
                entry = json.loads(line)
            except ValueError:  # the last line of a run killed while writing it
                break
            entries.append((entry["checkpoint"], entry["rows"]))
        # The earlier sessions' provenance is kept (settings alone decide whether to resume).
        earlier = head.get("provenance")
        self.sessions = (earlier if isinstance(earlier, list) else []) + self.sessions
        # Replace the journal by its intact lines, so that appends start on a fresh line.
        tmp = self.path.with_name(self.path.name + ".tmp")
        with _new_file(tmp) as fh:
            fh.write("\n".join([json.dumps(self._head())] + lines[1:1 + len(entries)]) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        return entries

    def _head(self):
        return {"settings": self.settings, "provenance": self.sessions}

    def finished_sessions(self):
        """The sessions' provenance, this (the last) one ended now."""
        return self.sessions[:-1] + [collect(self.sessions[-1]["started"], finished=True)]

    def append(self, checkpoint, rows):
        self._write_line({"checkpoint": checkpoint, "rows": rows}, mode="a")

    def _write_line(self, obj, mode):
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)  # the journal read() created or checked
        with os.fdopen(fd, mode) as fh:
            fh.write(json.dumps(obj) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def remove(self):
        self.path.unlink(missing_ok=True)


def write_table(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike) -> None:
    """Write analysis rows as CSV (NaN as an empty field)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        _write_csv(rows, fh)


def _write_csv(rows, fh):
    writer = csv.DictWriter(fh, fieldnames=COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()})


def read_table(path: str | os.PathLike) -> list[dict]:
    """Read a CSV written by :func:`write_table` back into rows (numbers as floats/ints)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"results table {path} does not exist")
    rows = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = set(COLUMNS) - set(OPTIONAL_COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path} is not an analysis table: missing columns {sorted(missing)}")
        for row in reader:
            row.setdefault("layer", "")
            row.setdefault("verdict", "")
            for key in ("value", "spread", "null_mean", "null_std", "p_value", "ci_low", "ci_high"):
                row[key] = float(row[key]) if row.get(key, "") not in ("", None) else np.nan
            for key in ("checkpoint", "iteration", "n_runs"):
                row[key] = int(row[key])
            rows.append(row)
    return rows


def select(rows: Iterable[dict], quantity: str, client_a: str | None = None,
           client_b: str | None = None) -> list[dict]:
    """Rows of one quantity (optionally one pair), sorted by checkpoint."""
    hits = [r for r in rows if r["quantity"] == quantity
            and (client_a is None or r["client_a"] == client_a) and (client_b is None or r["client_b"] == client_b)]
    return sorted(hits, key=lambda r: r["checkpoint"])
