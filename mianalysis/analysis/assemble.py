"""Dump -> analysis table: :func:`analyze` checks its arguments (:mod:`.validate`), computes
each checkpoint (:mod:`.compute`), here or on Dask workers, journals it (:mod:`.journal`)
and assembles the table in checkpoint order, with the changes between checkpoints
(:mod:`.table`)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .._internal.io import progress_bar
from .._internal.locking import WriterLock
from ..estimators.distances import METRICS
from .compute import ChangeInputs, CheckpointAnalysis, Part
from .inference.familywise import apply_familywise
from .journal import Journal
from .options import Correction, Execution, Intervals, Null, execution_keywords, option_keywords
from .schema import AnalysisRow
from .table import AnalysisTable, complete_row
from .validate import ESTIMATORS, check_dump, check_out, check_request, table_settings

if TYPE_CHECKING:  # names used only in type hints
    import distributed

    from ..dumps import ParameterDump

__all__ = ["analyze", "Assembly"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_R = TypeVar("_R")


def analyze(dump: ParameterDump | str | os.PathLike, *, estimators: str | Sequence[str] = ESTIMATORS,
            metrics: Sequence[str] = METRICS, k: int = 3, n_permutations: int | Mapping[str, int] = 0,
            layer: str | Sequence[str] | None = None, by: str | None = None, standardize: bool = True,
            random_state: int = 0, out: str | os.PathLike | None = None, progress: bool = False,
            distance_cache: bool | str = "auto", verify: bool = True, force: bool = False,
            gaussian_null: str = "auto", ci_resamples: int | Mapping[str, int] | None = None,
            ci_level: float = 0.95, scheduler: str | None = None, client: distributed.Client | None = None,
            timeout: float | None = None, familywise: str = "holm", family: str = "pair",
            gaussianity: bool = False, min_moving_runs: int = 1, null: Null | None = None,
            interval: Intervals | None = None, correction: Correction | None = None,
            execution: Execution | None = None) -> AnalysisTable:
    """MI and distances between every pair of clients at every checkpoint of a dump.

    A client named "central" (the reference client of ``ParameterSampler(reference=
    "central")``, where the federation should be) is in no pair; its metric rows are kept.
    A dump with fewer than two other clients has no pair and is refused (ValueError).

    Parameters
    ----------
    dump : ParameterDump or path
        Its completed runs are analysed. A dump that is not complete (still being sampled,
        or stopped) is analysed as far as it goes, and every row's ``note`` says so
        ("dump incomplete: 40 of 200 runs"), as does the sidecar (``dump_runs``).
    estimators : "auto" or sequence of str, default="auto"
        "auto" (:mod:`mianalysis.analysis.inference.choice`): per pair, checkpoint and tensor, an
        estimate inside its calibrated regime or a labelled lower bound. The Gaussian copula
        estimate (rows ``mi_copula``) where there are at least 2.2 runs per varying joint
        dimension (its calibrated regime, :mod:`mianalysis.analysis.inference.regime`) and the estimate
        lies inside that regime; else the held-out lower bound (NWJ, valid for any distribution) (``mi_bound``,
        ``estimate_kind`` "bound"); KSG too (``mi_ksg``) where joint dims <= 4 and runs >=
        2000 and its estimate is inside its regime. Each such row's note starts with
        "auto: " and says which estimator it is and why (e.g. "auto: bound, a lower bound
        (400 runs < 2.2 x 716 joint dims: no calibrated estimate)"); the sidecar records the
        rule (``settings["estimator_choice"]``). A pair whose estimator changes between
        checkpoints has no change row across the switch. `n_permutations` and
        `ci_resamples` given per estimator apply to "copula", "bound" and "ksg".
        Otherwise a list of registered estimators
        (:func:`mianalysis.estimators.registry.estimator_names`), each run on every pair:
        "gaussian", "ksg", "copula" (:func:`mianalysis.gaussian_copula_mi`, run as the
        Gaussian estimator on each parameter's normal scores, with the same shrinkage rule
        and notes), "bound" (:func:`mianalysis.projection_mi_bound`) or one added by
        :func:`~mianalysis.estimators.registry.register_estimator`; rows ``mi_NAME``.
        ``["gaussian", "ksg"]`` is the default of versions before "auto".
    metrics : sequence of str, default=("euclidean", "manhattan", "chebyshev")
        "euclidean", "manhattan", "chebyshev": mean paired distance between the clients'
        samples (run i of a with run i of b). "cosine_update", when asked for: the mean
        over runs of the cosine similarity of the clients' updates since the run's start,
        cos(theta_a - theta_a0, theta_b - theta_b0) with theta_0 each client's parameters
        at the checkpoint at iteration 0 (:func:`mianalysis.update_cosines`; a dump without
        that checkpoint is a ValueError before any work). Its interval and change rows are
        made as the distances' (normal, over runs; paired per run), over the runs where
        both updates are non-zero (the note counts any left out); at the start itself the
        updates are zero and the row is NaN, with a note, as is the change from it. Not in
        the default: it needs the start checkpoint, which not every dump records, and
        default tables keep their rows.
    k : int, default=3
        Neighbours for KSG, ``1 <= k < n_runs`` (each run is one sample, and every sample
        needs k neighbours other than itself); checked before any work or file, with or
        without the distance cache.
    n_permutations : int or dict of estimator -> int, default=0
        If > 0, a permutation test per MI estimate: null mean, sd and p-value. A dict sets
        the number per estimator (e.g. ``{"gaussian": 100, "ksg": 10}``; missing ones 0).
    layer : str or list of str, optional
        Analyse only these tensors of the parameter vector (see ParameterDump.layer_columns).
    by : {None, "layer", "auto"}, default=None
        None: MI and distances of the whole (selected) parameter vector, column ``layer``
        empty. "layer": the same rows once per tensor of ``dump.layout`` (those `layer`
        selects), computed on that tensor's columns alone and named in the ``layer``
        column; each equals what ``layer=NAME`` gives. "auto": the whole vector where the
        runs cover a calibrated estimate of it (2.2 runs per joint dimension), else its
        tensors split into the fewest consecutive blocks the runs cover (``layer`` names
        them, e.g. ``fc1.weight[0:42]``), and the sidecar's ``settings["by_choice"]`` says
        how many runs the whole vector would need
        (:func:`mianalysis.analysis.blocks.regime_blocks`). A block's MI is at most the
        whole vector's (data processing): read per-block rows about the whole model as
        lower bounds. Recorded metrics (loss) come once per checkpoint, with ``layer``
        empty.
    standardize : bool, default=True
        KSG: divide each parameter by its sd over runs before the neighbour search
        (:func:`mianalysis.ksg_mi`'s `standardize`), so that the widest parameters (biases
        next to small weights) do not decide every max-norm distance (what it gains on
        known-MI data: docs/guide/analysis.md, Cost and accuracy). Recorded in the
        sidecar's settings (``ksg_standardize``).
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
        :func:`~mianalysis.analysis.table.sidecar_path`); the CSV itself holds only results. While it runs it holds the
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
        whole dump once (its cost: docs/guide/analysis.md). With False the sidecar records
        ``"dump_verified": false``.
    force : bool, default=False
        Replace an existing `out` that is not a previous analysis with the same settings.
    gaussian_null : {"auto", "permutation", "analytic", "moments"}, default="auto"
        Null of the ``mi_gaussian`` and ``mi_copula`` rows (the copula's: that of the
        normal scores). "permutation": `n_permutations` shuffles. "analytic": null mean, sd
        and p-value from :func:`mianalysis.gaussian_mi_null` (Wilks' Lambda, no shuffles;
        exact for Gaussian parameters, too small a p-value where the clients' vectors have
        heavy tails: docs/results/tables/copula_null_size.md), noted "analytic null (exact)"
        or "(Bartlett chi-square)". "moments": the p-value of Pillai's trace from its exact
        mean and variance over all permutations and a gamma tail
        (:func:`mianalysis.estimators.moment_null.permutation_moment_null`; no shuffles,
        about three shuffles' cost), the null mean and sd of the Gaussian law with the sd
        scaled by the permutation variance's inflation, noted "permutation-moment null".
        "auto": "moments" where `n_permutations` asks for a null and a shuffle would cost at
        least 1e9 multiply-adds (runs x p x q) with at least 4 runs per joint dimension
        (:func:`mianalysis.analysis.compute.moments_apply`, where its measured size holds:
        docs/results/tables/moment_null_size.md), else the shuffles; so at the paper's size
        (26,400 runs of 850 parameters) and not at small ones. The analytic and moment nulls
        fall back to `n_permutations` for estimates with shrinkage (noted); every row says
        its null in ``null_method``.
    ci_resamples : int or dict of estimator -> int, optional
        Resamples of the runs behind each MI estimate's confidence interval: bootstrap
        resamples for "gaussian", random halves for "ksg" (:mod:`mianalysis.analysis.inference.intervals`
        says why; the registry entry's ``interval`` and ``ci_resamples``). Default
        ``{"gaussian": 20, "ksg": 10, "copula": 20}``; 0 (or 1) gives no MI interval.
        The Gaussian and copula estimates use them only for shrinkage estimates and for
        changes between checkpoints below 4 runs per joint dimension: their level
        intervals come from the Wishart formula and, from 4 runs per joint dimension on,
        their changes' from the runs' influence values
        (:func:`mianalysis.analysis.inference.intervals.change_method`).
        A bootstrap resample costs one Gaussian estimate and a half about 1/4 of a KSG
        estimate; the interval uses Student's t quantile for the standard error of so few
        resamples (2.09 for 20 and 2.26 for 10 at 95 %, instead of 1.96). Distance intervals
        need no resamples and are always given.
    ci_level : float, default=0.95
        Level of every interval. Level, resamples and method per quantity are recorded in
        the sidecar's settings (``ci_level``, ``ci_resamples``, ``ci_method``).
    familywise : {"holm", "bh", "none"}, default="holm"
        The correction behind the columns ``p_adjusted`` and ``family_verdict``
        (:mod:`mianalysis.analysis.inference.familywise`): Holm (family-wise error rate),
        Benjamini-Hochberg (false discovery rate) or none (each test alone), at the error
        rate 1 - `ci_level`. Holm by default: it holds under any dependence between the
        tests, and consecutive changes of a pair are negatively correlated, which BH's
        guarantee does not cover. Recorded in the sidecar's settings (``familywise``:
        method, family, alpha); it does not change any other column, so a table that
        differs only in it is replaced (and a journal resumed) as one of the same analysis.
    family : {"pair", "cell"}, default="pair"
        The family corrected over: one client pair's steps (and checkpoints, for the null
        tests) of one quantity and layer, or all pairs' of one quantity and layer. Pair by
        default: findings are stated per pair, and "every pair rises" needs no correction
        over pairs; a statement counting pairs ("2 of 3 pairs rise") needs "cell".
    gaussianity : bool, default=False
        Also give, per checkpoint (and layer), how far the samples are from Gaussian, so
        that a reader knows which MI row to read (:mod:`mianalysis.analysis.diagnostics.gaussianity`):
        per client in a pair a row ``nongaussian_share`` (``client_b`` empty; the share of
        its varying parameters whose marginal rejects normality, D'Agostino-Pearson with
        Holm's correction over the parameters at 1 - `ci_level`; the note gives the test,
        the counts and which estimate to read), and per pair whose ``mi_gaussian`` and
        ``mi_copula`` rows both have an interval a row ``copula_disagrees`` (1 when their
        intervals do not overlap, then read mi_copula; else 0). Off by default: the test
        makes a few passes over every client's samples at every checkpoint, and the
        default table keeps its rows. Recorded in the sidecar's settings (``gaussianity``)
        only when on.
    min_moving_runs : int, default=1
        Hold each client's parameters that leave their most common value in fewer than this
        many runs at that value for the MI estimates (:mod:`mianalysis.analysis.diagnostics.movers`):
        a few such parameters moving in the same runs make a client's covariance singular
        (its Gaussian estimates then shrinkage numbers without a verdict), while the MI they
        can carry is at most their entropy, which each MI row's note bounds ("held 5
        parameters moving in fewer than 2 runs ...; they can add at most 0.0012 bits").
        Distances use every parameter. 1 (the default) holds none; at most half the runs.
        Recorded in the sidecar's settings (``constant_rule["min_moving_runs"]``) when above 1.
        Where every varying parameter of a client is held, its pairs' MI rows have no
        estimate (NaN, the note "every varying parameter of client_a held ...: no
        estimate"): held parameters are not constant by design, so such a row is never an
        exact MI of 0, and the steps from or to it have the verdict "not made: no estimate
        (...)".
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
    null : Permutations, MomentNull or AnalyticNull, optional
        The MI rows' null as one object (:mod:`mianalysis.analysis.options`):
        ``Permutations(n)`` is ``n_permutations=n`` (``Permutations(n, moments="never")``
        adds ``gaussian_null="permutation"``); ``MomentNull(otherwise=Permutations(n))`` is
        ``gaussian_null="moments", n_permutations=n``; ``AnalyticNull(otherwise=
        Permutations(n))`` is ``gaussian_null="analytic", n_permutations=n``. Given with
        `n_permutations` or `gaussian_null` at another value than its default: ValueError.
    interval : Intervals, optional
        ``Intervals(level, resamples)``: ``ci_level=level, ci_resamples=resamples`` (not
        with those keywords).
    correction : Holm, BenjaminiHochberg or NoCorrection, optional
        ``Holm(family)``: ``familywise="holm", family=family``; likewise "bh" and "none"
        (not with those keywords).
    execution : Execution, optional
        ``Execution(progress, distance_cache, scheduler, client, timeout)``: those five
        keywords as one object (not with those keywords), where and how the table is
        computed.

    Returns
    -------
    table : AnalysisTable
        Tidy table (a sequence of row dicts, with the analysis ``settings`` and this
        session's ``provenance``; see :class:`~mianalysis.analysis.table.AnalysisTable`)
        with the columns declared once in :mod:`mianalysis.analysis.schema` (rows
        :class:`~mianalysis.analysis.schema.AnalysisRow`; their unit and meaning are the
        column table of docs/guide/analysis.md). ``quantity`` is "mi_gaussian", "mi_ksg", "mi_exact" (bits; the exact MI,
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
        Ledoit-Wolf shrinkage. Other rows have an empty verdict. The typed columns say
        what the notes say in words: ``estimate_kind`` ("plain", or "shrinkage" for a
        Ledoit-Wolf estimate and a change from or to one), ``outside_calibration``
        (the estimate lies outside the calibrated regime) and ``null_method`` ("none",
        "permutation" or "analytic"). Each change row also has its standard error
        ``change_se`` and the two-sided p-value ``change_p`` of "no change", from the same
        law as its interval (:func:`~mianalysis.analysis.inference.intervals.change_test`), and
        ``p_adjusted`` and ``family_verdict``: the p-value adjusted over its family
        (`familywise`, `family`) and the verdict from it ("rising", "falling", "no
        detectable change", or the per-step "not made: ..."). An MI row with a null has
        its p-value adjusted over the same family of checkpoints and ``family_verdict``
        "above null", "not above null" or, where the permutation p-value's floor 1 /
        (n_permutations + 1) makes any corrected rejection impossible, "not made: ..."
        saying how many permutations it had and what p the correction needs.

    Notes
    -----
    The Gaussian estimator is bias-corrected while runs outnumber twice the joint
    dimension, and uses Ledoit-Wolf shrinkage otherwise; parameters that are constant over
    runs are dropped (they carry no information; the estimators drop them the same way):
    exactly constant, or with an sd over runs of at most 4 float32 spacings of their
    magnitude (rounding noise; :func:`mianalysis._internal.validation.varying_columns`), the rule the
    sidecar records (``settings["constant_rule"]``).
    Each such choice is written in the row's ``note`` (and a shrinkage estimate's
    ``estimate_kind`` is "shrinkage"). When all of a client's parameters
    are constant over runs, its MI with any client is 0 (null 0, p-value 1 with
    permutations), as :func:`mianalysis.gaussian_mi`, :func:`mianalysis.ksg_mi` and
    :func:`mianalysis.mi_permutation_test` return; this includes clients that all start
    from one fixed point. At a checkpoint where two clients' varying parameters are
    identical in every run (all clients start from the same random point) MI is reported
    as infinite, with a note.

    An MI estimate outside the regime where the estimator was calibrated against known MI
    (``python experiments/calibration.py --regimes``) says so in its note, e.g.
    "outside calibration: shrinkage estimate (400 runs <= 2 x 200 joint dims)" or
    "outside calibration: > 4 joint dims" (see :func:`mianalysis.analysis.inference.regime.estimate_regime_note`),
    and its ``outside_calibration`` is True; :mod:`mianalysis.report.plots` draws such points hollow.

    The MI rows of a dump the sampler wrote also say what its sampling design forces on
    the dependence between clients (:func:`mianalysis.analysis.diagnostics.design.design_note`), e.g. "design:
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
    >>> table = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], n_permutations=99)
    >>> for row in table:
    ...     print(row["quantity"], round(row["value"], 3), row["p_value"])
    euclidean 1.125 nan
    mi_gaussian 0.625 0.01

    The default, ``estimators="auto"``: 1000 runs of 2 + 2 parameters are in the copula
    estimate's calibrated regime (not KSG's, which needs 2000 runs):

    >>> row, = analyze(dump, metrics=[])
    >>> row["quantity"], row["note"]
    ('mi_copula', 'auto: copula, an estimate (1000 runs >= 2.2 x 4 joint dims: its calibrated regime, for a Gaussian copula)')

    The exact values: the mean distance between a and b is sqrt(0.8 pi / 2) = 1.121 (a
    Rayleigh mean), and the MI is -(2 / 2) log2(1 - 0.6^2) = 0.644 bits.
    """

    from ..dumps import ParameterDump

    if not isinstance(dump, ParameterDump):
        dump = ParameterDump.open(dump)
    run = execution_keywords(execution, progress=progress, distance_cache=distance_cache, scheduler=scheduler,
                             client=client, timeout=timeout)
    progress, distance_cache, scheduler, client, timeout = (
        run["progress"], run["distance_cache"], run["scheduler"], run["client"], run["timeout"])
    options = option_keywords(null=null, interval=interval, correction=correction, n_permutations=n_permutations,
                              gaussian_null=gaussian_null, ci_resamples=ci_resamples, ci_level=ci_level,
                              familywise=familywise, family=family)
    request = check_request(dump, estimators=estimators, metrics=metrics, k=k, layer=layer, by=by,
                            standardize=standardize, random_state=random_state, distance_cache=distance_cache,
                            verify=verify, force=force, gaussianity=gaussianity, min_moving_runs=min_moving_runs,
                            **options)
    settings = table_settings(dump, request)
    if out is not None:
        check_out(out, settings, force)  # before the lock: a refused `out` leaves nothing behind
    if verify:
        check_dump(dump)
    job = CheckpointAnalysis(dump, request)
    distributed = scheduler is not None or client is not None
    with contextlib.ExitStack() as stack:
        if distributed:  # reached first: a scheduler that cannot be reached leaves nothing behind
            from ..scaleout import CONNECT_TIMEOUT, connect, run_unordered

            wait = CONNECT_TIMEOUT if timeout is None else timeout
            dask = stack.enter_context(connect(scheduler, client=client, timeout=wait))
        if out is not None:  # one writer per table: the lock of `out` covers its journal and the final CSV
            stack.enter_context(WriterLock(out))
            check_out(out, settings, force)  # again: another analysis may have written it meanwhile
        journal = Journal(None if out is None else Path(str(out) + ".partial"), settings)
        assembly = Assembly(job, journal)
        per_checkpoint = len(job.pairs) * len(request.groups)
        bar = progress_bar(len(assembly.todo) * per_checkpoint, unit="pair", desc="analyzing", enabled=progress)
        if not distributed:
            for t in assembly.todo:
                assembly.add(t, job(t, progress=bar.update))
        else:  # each checkpoint on a worker, with its own distance matrices; assembled here in order
            computed = run_unordered(dask, job, assembly.todo, name="analyze-checkpoint", timeout=wait)
            with contextlib.closing(computed):
                for t, part in _in_order(computed, assembly.todo):
                    bar.update(per_checkpoint)
                    assembly.add(t, part)
        bar.close()
        table = assembly.table({"dump_verified": bool(verify),
                                "dump_runs": {"analysed": request.n_runs, "total": dump.n_runs,
                                              "complete": dump.complete},
                                "dump_provenance": dump.provenance})
        table = apply_familywise(table, method=request.familywise, family=request.family,
                                 alpha=settings["familywise"]["alpha"], n_permutations=request.permutations)
        if out is not None:
            table.write(out)
            journal.remove()
    return table


class Assembly:
    """The rows of an analysis in checkpoint order, assembled as the checkpoints' parts
    arrive: each part's rows, then its changes since the checkpoint before (rows
    ``delta_*``), saved to the journal checkpoint by checkpoint.

    Parameters
    ----------
    job : CheckpointAnalysis
        What computes a checkpoint's part (and, for a checkpoint resumed from the journal,
        the resamples its changes need again).
    journal : Journal
        Read first: the checkpoints an earlier session finished are not computed again.
    """

    def __init__(self, job: CheckpointAnalysis, journal: Journal) -> None:
        self.job, self.journal = job, journal
        self.rows: list[AnalysisRow] = []
        done = set()
        for t, saved in journal.read():
            self.rows += [complete_row(r) for r in saved]  # rows of an older journal get the typed columns
            done.add(t)
        n_checkpoints = len(job.dump.checkpoints)
        if done:
            log.info("resuming the analysis journal %s: %d of %d checkpoints already analysed",
                     journal.path, len(done), n_checkpoints)
        self.todo = [t for t in range(n_checkpoints) if t not in done]
        self._columns = dict(job.groups)
        self._resampled: dict[tuple[int, str], dict[tuple[int, int, str], ChangeInputs]] = {}

    def add(self, t: int, part: Part) -> None:
        """Add checkpoint t's part (see :class:`CheckpointAnalysis`) and its changes since t - 1."""
        first = len(self.rows)
        metric_rows, per_group = part
        self.rows.extend(metric_rows)
        for group, group_rows, group_resampled in per_group:
            self.rows.extend(group_rows)
            self._resampled[t, group] = group_resampled
            if t > 0:
                self._add_changes(t, group)
        self.journal.append(t, self.rows[first:])
        log.debug("analysed checkpoint %d (iteration %d): %d rows", t, self.job.dump.checkpoints[t],
                  len(self.rows) - first)

    def _add_changes(self, t: int, group: str) -> None:
        """The rows delta_QUANTITY of checkpoint t: paired change since t - 1, its interval, a verdict."""
        job, dump = self.job, self.job.dump
        if (t - 1, group) not in self._resampled:  # resumed after t - 1: its resamples again (same indices, seeds)
            before = [np.asarray(dump.samples(c, index=t - 1)[:, self._columns[group]], dtype=np.float64)
                      for c in range(len(dump.clients))]
            self._resampled[t - 1, group] = job.with_intervals(t - 1, before, job.of_checkpoint(self.rows, t - 1, group))
        prev, now = self._resampled.pop((t - 1, group)), self._resampled[t, group]
        self.rows.extend(job.changes(t, group, job.of_checkpoint(self.rows, t, group),
                                     job.of_checkpoint(self.rows, t - 1, group), prev, now))

    def table(self, record: Mapping[str, Any]) -> AnalysisTable:
        """The table: the rows by checkpoint (stable: the order within a checkpoint is kept),
        the journal's settings, `record` (what the sidecar says of the dump) and the
        provenance of every session that computed it, this one ended now."""
        rows = sorted(self.rows, key=lambda r: r["checkpoint"])
        return AnalysisTable(rows, settings=self.journal.settings, provenance=self.journal.finished_sessions(),
                             record=record)


def _in_order(results: Iterable[tuple[_T, _R]], order: Sequence[_T]) -> Iterator[tuple[_T, _R]]:
    """(item, result) pairs that arrive in any order, passed on in the order of `order`."""
    waiting = {}
    position = 0
    for item, result in results:
        waiting[item] = result
        while position < len(order) and order[position] in waiting:
            yield order[position], waiting.pop(order[position])
            position += 1
