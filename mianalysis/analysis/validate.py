"""What :func:`mianalysis.analyze` checks before any work or file: its arguments, the dump,
and whether it may write `out`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from .._internal.validation import CONSTANT_RULE, check_choice, check_flag, check_int, check_k
from ..estimators.distances import METRICS, UPDATE_METRICS
from ..estimators import MarginalDistances
from ..estimators.registry import estimator_names, estimators_taking, get_estimator
from .inference.choice import AUTO, AUTO_ESTIMATORS, choice_settings
from .inference.familywise import FAMILIES, METHODS, familywise_settings
from .inference.intervals import DISTANCE_METHOD, UPDATE_METHOD, change_method, check_level, interval_method, level_method
from .blocks import regime_blocks
from .diagnostics.movers import check_min_moving_runs
from .inference.regime import COPULA_MIN_RUNS_PER_DIM

if TYPE_CHECKING:  # names used only in type hints
    from ..dumps import ParameterDump

__all__ = ["ESTIMATORS", "GAUSSIAN_NULLS", "BY", "AnalysisRequest", "check_request", "table_settings", "check_dump",
           "check_out", "check_table_place", "check_table_out", "dump_around", "rows_settings", "start_checkpoint"]

# Analysed by default: the automatic choice per pair and checkpoint (mianalysis.analysis.inference.choice);
# any list of registered estimators may be asked for instead.
ESTIMATORS = AUTO
GAUSSIAN_NULLS = ("auto", "permutation", "analytic", "moments")
BY = ("layer", "auto")
# Tables written before the registry record these two estimators' interval methods whatever was analysed.
_RECORDED_METHODS = ("gaussian", "ksg")


@dataclass(frozen=True)
class AnalysisRequest:
    """The checked arguments of one analysis (see :func:`mianalysis.analyze` for each).

    Attributes
    ----------
    estimators, metrics : tuple of str
        With ``auto``, `estimators` are those the rule may run (copula, bound, ksg).
    k : int
        Checked once, against the number of runs when an estimator takes it.
    permutations, ci_resamples : dict of estimator -> int
    layer : str, list of str or None
    by : str or None
        As given ("auto" stays "auto"; `groups` and `by_note` say what it chose).
    groups : list of (str, columns)
        The tensor groups analysed: ``[("", columns)]``, one per tensor with ``by="layer"``,
        or with ``by="auto"`` those of :func:`mianalysis.analysis.blocks.regime_blocks`.
    n_runs : int
        The dump's completed runs, all analysed.
    standardize, verify, force : bool
    random_state : int
    distance_cache : bool or str
        As given; `reuse_distances` says whether the per-client distance matrices are used.
    reuse_distances : bool
    gaussian_null : str
    ci_level : float
    familywise, family : str
        The correction of the family-wise columns and its family
        (:mod:`mianalysis.analysis.inference.familywise`), at error rate 1 - `ci_level`.
    gaussianity : bool
        Whether the checkpoint's rows include the Gaussianity diagnostic
        (:mod:`mianalysis.analysis.diagnostics.gaussianity`).
    min_moving_runs : int
        Parameters moving in fewer runs are held at their most common value for the MI
        estimates (:mod:`mianalysis.analysis.diagnostics.movers`); 1 holds none.
    by_note : str or None
        With ``by="auto"``: what it chose and how many runs the whole vector would need
        (the sidecar's ``settings["by_choice"]``).
    """

    estimators: tuple[str, ...]
    metrics: tuple[str, ...]
    k: int
    permutations: dict[str, int]
    layer: str | Sequence[str] | None
    by: str | None
    groups: list[tuple[str, Any]]
    n_runs: int
    standardize: bool
    verify: bool
    force: bool
    random_state: int
    distance_cache: bool | str
    reuse_distances: bool
    gaussian_null: str
    ci_resamples: dict[str, int]
    ci_level: float
    familywise: str = "holm"
    family: str = "pair"
    gaussianity: bool = False
    auto: bool = False
    min_moving_runs: int = 1
    by_note: str | None = None


def check_request(dump: ParameterDump, *, estimators: str | Sequence[str], metrics: Sequence[str], k: int,
                  n_permutations: int | Mapping[str, int], layer: str | Sequence[str] | None, by: str | None,
                  standardize: bool, random_state: int, distance_cache: bool | str, verify: bool, force: bool,
                  gaussian_null: str, ci_resamples: int | Mapping[str, int] | None,
                  ci_level: float, familywise: str = "holm", family: str = "pair",
                  gaussianity: bool = False, min_moving_runs: int = 1) -> AnalysisRequest:
    """Every argument of :func:`mianalysis.analyze` checked against `dump`, before any work
    or file (a ValueError or TypeError naming the argument)."""
    from ..dumps import layout_columns, select_layout

    auto = _is_auto(estimators)
    estimators = AUTO_ESTIMATORS if auto else tuple(estimators)
    metrics = tuple(metrics)
    for e in estimators:
        get_estimator(e, "estimators")
    for m in metrics:
        check_choice(m, "metrics", METRICS + UPDATE_METRICS)
    _check_start(dump, metrics)
    if by is not None:
        check_choice(by, "by", BY)
    standardize = check_flag(standardize, "standardize")
    check_flag(verify, "verify")
    check_flag(force, "force")
    check_flag(gaussianity, "gaussianity")
    permutations = _per_estimator(n_permutations, estimators, "n_permutations", default=0)
    random_state = check_int(random_state, "random_state", low=0)
    check_choice(gaussian_null, "gaussian_null", GAUSSIAN_NULLS)
    if ci_resamples is None:
        ci_resamples = {e: get_estimator(e).ci_resamples for e in estimators}
    resamples = _per_estimator(ci_resamples, estimators, "ci_resamples", default=0)
    ci_level = check_level(ci_level)
    check_choice(familywise, "familywise", METHODS)
    check_choice(family, "family", FAMILIES)
    cols = dump.layer_columns(layer)
    tensors = [(e.name, layout_columns([e])) for e in (dump.layout if layer is None else select_layout(dump.layout, layer))]
    groups = [("", cols)] if by is None else tensors
    _check_clients(dump)
    n_runs = dump.completed_runs
    if n_runs < 2:
        raise ValueError(f"dump {dump.path} has {n_runs} completed runs; analysis needs at least 2")
    by_note = None
    if by == "auto":  # the whole vector where the runs cover it, else blocks that they do
        choice = regime_blocks(tensors or [("", np.arange(dump.n_params)[cols])], n_runs, COPULA_MIN_RUNS_PER_DIM)
        groups, by_note = choice.groups, choice.note
    min_moving_runs = check_min_moving_runs(min_moving_runs, n_runs, "min_moving_runs",
                                            f"the dump's {n_runs} completed runs")
    # Once on the path, before any work or file: against the runs (each run is one sample) for KSG.
    # "auto" may run KSG: `k` is checked as for KSG, whatever the runs (as the old default did).
    k = check_k(k, n_runs, samples="the number of runs") if estimators_taking("k", estimators) else \
        check_int(k, "k", low=1)
    reuse = MarginalDistances.cache_fits(n_runs, count=len(dump.clients), distance_cache=distance_cache)
    return AnalysisRequest(
        estimators=estimators, metrics=metrics, k=k, permutations=permutations, layer=layer, by=by, groups=groups,
        n_runs=n_runs, standardize=standardize, verify=bool(verify), force=bool(force), random_state=random_state,
        distance_cache=distance_cache, reuse_distances=reuse, gaussian_null=gaussian_null, ci_resamples=resamples,
        ci_level=ci_level, familywise=familywise, family=family, gaussianity=bool(gaussianity),
        auto=auto, min_moving_runs=min_moving_runs, by_note=by_note)


def _check_clients(dump: ParameterDump) -> None:
    """ValueError unless the dump has two clients to pair (the reference clients "central"
    and "optimum" are in no pair): every distance and MI is of a client pair."""
    from ..dumps import REFERENCE_CLIENTS

    clients = [c for c in dump.clients if c not in REFERENCE_CLIENTS]
    if len(clients) < 2:
        has = f"one: {clients[0]}" if clients else "none"
        held = [c for c in dump.clients if c in REFERENCE_CLIENTS]
        reference = (f" (besides the reference {', '.join(map(repr, held))}, which is in no pair)" if held else "")
        raise ValueError(f"dump {dump.path}: the analysis needs at least two clients; the dump has {has}{reference}")


def _is_auto(estimators: object) -> bool:
    """Whether `estimators` asks for the automatic choice ("auto", alone); a TypeError or
    ValueError naming `estimators` when it is neither that nor a list of names."""
    if isinstance(estimators, str):
        if estimators != AUTO:
            raise ValueError(f"`estimators` must be {AUTO!r} or a list of registered estimators "
                             f"{list(estimator_names())}; got the string {estimators!r} (a list: [{estimators!r}])")
        return True
    if not isinstance(estimators, Sequence):
        raise TypeError(f"`estimators` must be {AUTO!r} or a list of registered estimators "
                        f"{list(estimator_names())}; got {estimators!r}")
    if AUTO in estimators:
        if len(estimators) > 1:
            raise ValueError(f"`estimators`: {AUTO!r} chooses the estimators itself and goes alone; got "
                             f"{list(estimators)}")
        return True
    return False


def start_checkpoint(dump: ParameterDump) -> int | None:
    """The index of the checkpoint at iteration 0, each run's start, or None if the dump
    records none (the updates of ``cosine_update`` are measured from it)."""
    return dump.checkpoints.index(0) if 0 in dump.checkpoints else None


def _check_start(dump: ParameterDump, metrics: Sequence[str]) -> None:
    """ValueError when an update metric is asked of a dump without a start checkpoint."""
    wanted = [m for m in metrics if m in UPDATE_METRICS]
    if wanted and start_checkpoint(dump) is None:
        shown = dump.checkpoints if len(dump.checkpoints) <= 8 else [*dump.checkpoints[:8], "..."]
        raise ValueError(
            f"`metrics` {wanted[0]!r} compares the clients' updates since each run's start, the checkpoint at "
            f"iteration 0; dump {dump.path} has no such checkpoint (iterations {shown}): record the initial "
            "parameters as iteration 0 (DumpWriter's first checkpoint, or from_arrays' `checkpoints`), or leave "
            f"{wanted[0]!r} out")


def _per_estimator(value: int | Mapping[str, int], estimators: Sequence[str], name: str,
                   default: int) -> dict[str, int]:
    """`value` (an int, or a dict estimator -> int) as a dict over `estimators` of ints >= 0."""
    if not isinstance(value, Mapping):
        value = {e: value for e in estimators}
    unknown = set(value) - set(estimator_names())
    if unknown:
        raise ValueError(f"`{name}` names unknown estimators {sorted(unknown)}; known: {list(estimator_names())}")
    return {e: check_int(value.get(e, default), name, low=0) for e in estimators}


def table_settings(dump: ParameterDump, request: AnalysisRequest) -> dict[str, Any]:
    """The settings a table records (its sidecar's ``settings``): the dump and its completed
    chunks, and the arguments; an analysis resumes or replaces a table only with the same."""
    recorded = dict.fromkeys(_RECORDED_METHODS + request.estimators)
    ci_method = {**{f"mi_{e}": level_method(e) for e in recorded}, "distances": DISTANCE_METHOD}
    # An estimate's interval from a formula, its changes' from resamples or the influence rule: both recorded.
    ci_method.update({f"delta_mi_{e}": change_method(e) for e in recorded if level_method(e) != interval_method(e)})
    # Only a table with an update metric (cosine_update) records its method: default tables keep their settings.
    ci_method.update({m: UPDATE_METHOD for m in request.metrics if m in UPDATE_METRICS})
    settings = {"dump": str(Path(dump.path).resolve()), "n_runs": request.n_runs, "chunks": dump.chunks_digest(),
                "estimators": list(request.estimators), "metrics": list(request.metrics), "k": request.k,
                "permutations": request.permutations, "layer": request.layer, "by": request.by,
                "ksg_standardize": request.standardize, "random_state": request.random_state,
                "distance_cache": request.reuse_distances, "ci_level": request.ci_level,
                "ci_resamples": request.ci_resamples,
                "ci_method": ci_method}
    if request.by_note is not None:  # by="auto": what it chose, and what the whole vector needs
        settings["by_choice"] = request.by_note
    if request.auto:  # which estimator each row is, and why: the rule (each row's note applies it)
        settings["estimator_choice"] = choice_settings()
    if request.gaussian_null not in ("auto", "permutation"):  # tables of the default analysis keep their settings
        settings["gaussian_null"] = request.gaussian_null
    if request.gaussianity:  # likewise: only a table with the diagnostic records it
        settings["gaussianity"] = True
    settings["familywise"] = familywise_settings(request.familywise, request.family, round(1 - request.ci_level, 12))
    rule: dict[str, Any] = dict(CONSTANT_RULE)  # which parameters were dropped as constant
    if request.min_moving_runs > 1:  # only a table that holds rare movers records it (default tables keep theirs)
        rule["min_moving_runs"] = request.min_moving_runs
    settings["constant_rule"] = rule
    return json.loads(json.dumps(settings))


# Settings that only post-process the rows: a table or journal that differs in these alone
# holds the same rows (the family-wise columns are made again from them at the end).
_POSTPROCESSING = ("familywise",)


def rows_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` without those that only post-process the rows (``familywise``): what
    decides whether an earlier table or journal holds the rows of this analysis."""
    return {k: v for k, v in settings.items() if k not in _POSTPROCESSING}


def check_dump(dump: ParameterDump) -> None:
    """The dump's file sizes and the SHA-256 of every completed chunk
    (:meth:`ParameterDump.verify`): a DumpError naming what is damaged, and that nothing was
    analysed. Non-finite values are named later, for the analysed columns only."""
    from ..dumps import DumpError

    try:
        dump.verify(finite=False)
    except DumpError as exc:
        raise DumpError(f"{exc}; nothing was analysed: restore or recreate the dump, or pass verify=False "
                        "(mianalysis analyze --no-verify) to analyse it as it is") from None


def dump_around(path: str | os.PathLike) -> Path | None:
    """The dump folder that `path` is or lies inside (looking at the path as given and with
    links resolved), or None. A folder is a dump if it holds a manifest.json that reads as
    a dump's (or does not read at all: a damaged dump), a client_0.f32, or the marker of a
    dump being created in it."""
    from ..dumps import CREATING, MANIFEST

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


def _previous_settings(sidecar: str | os.PathLike) -> dict[str, Any] | None:
    """The settings a sidecar records, or None if it is not the record of an analysis."""
    try:
        if not os.path.isfile(sidecar) or os.path.islink(sidecar):
            return None
        record = json.loads(Path(sidecar).read_text())
    except (OSError, ValueError):
        return None
    settings = record.get("settings") if isinstance(record, dict) else None
    return settings if isinstance(settings, dict) else None


def check_out(out: str | os.PathLike, settings: Mapping[str, Any], force: bool) -> None:
    """ValueError unless an analysis with `settings` may write the table `out` (see
    :func:`mianalysis.analyze`'s `out`): never into a dump or onto a folder; over an
    existing table only when it records the same settings (or the same analysis of the same
    dump made when that held fewer runs), or with `force`."""
    from .table import sidecar_path

    out = check_table_place(out)
    if force:
        return
    sidecar = sidecar_path(out)
    requested = rows_settings(json.loads(json.dumps(settings)))
    saved = _previous_settings(sidecar)
    saved = None if saved is None else rows_settings(saved)
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
        _refuse_replacing(problem, "`out`", "force=True (mianalysis analyze --force)")


# The rule of every command that writes a table (analyze, headroom): never into a dump or onto
# a folder, even when told to replace; an existing file only when told to (analyze also
# replaces a table whose sidecar records the same analysis); the table is written through a
# new temporary file renamed into place, so a link found at `out` is replaced, never written
# through (mianalysis._internal.io.write_rows, AnalysisTable.write).
def check_table_place(out: str | os.PathLike, *, writer: str = "an analysis", name: str = "`out`") -> Path:
    """`out` as a Path; ValueError if it can never hold a table, even when told to replace it:
    the dump folder, a path inside a dump (as given or with links resolved: a link into a
    dump included) or a folder. `writer` and `name` (the option) word the message."""
    out = Path(out)
    dump = dump_around(out)
    if dump is not None:
        where = "is the dump" if os.path.realpath(out) == os.path.realpath(dump) else "is inside the dump"
        raise ValueError(f"{name} {out} {where} {dump}: {writer} never writes into a dump (it would damage it); "
                         f"choose an {name} outside it")
    if os.path.isdir(out):
        raise ValueError(f"{name} {out} is a folder; give a file name for the table, e.g. {out / 'table.csv'}")
    return out


def check_table_out(out: str | os.PathLike, force: bool, *, writer: str, name: str = "`out`",
                    force_hint: str = "force=True") -> Path:
    """`out` as a Path; ValueError unless a table (without a sidecar) may be written there:
    :func:`check_table_place`, and an existing `out` (a file or a link) is replaced only with
    `force`; `force_hint` says how to give it (e.g. "--force").

    Examples
    --------
    >>> from mianalysis.analysis.validate import check_table_out
    >>> check_table_out("new_table.csv", False, writer="headroom").name
    'new_table.csv'
    """
    out = check_table_place(out, writer=writer, name=name)
    if os.path.lexists(out) and not force:
        _refuse_replacing(f"{out} exists", name, force_hint)
    return out


def _refuse_replacing(problem: str, name: str, force_hint: str) -> NoReturn:
    raise ValueError(f"{problem}; it was left as it is: choose another {name}, or pass {force_hint} to replace it")


def _superseded(saved: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
    """Whether the saved analysis is the same analysis of the same dump made when it held
    fewer runs (an incomplete dump, analysed while its sampler was still writing): the same
    command run again once more runs are in replaces that table."""
    same = {k: v for k, v in saved.items() if k not in ("n_runs", "chunks")}
    return (same == {k: v for k, v in requested.items() if k not in ("n_runs", "chunks")}
            and isinstance(saved.get("n_runs"), int) and saved["n_runs"] < requested["n_runs"])

