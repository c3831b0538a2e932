"""The default estimator set of :func:`mianalysis.analyze`, ``estimators="auto"``: per client
pair, checkpoint and tensor, an estimate inside its calibrated regime or a labelled lower bound.

The rule, in order (the regimes are those of :mod:`mianalysis.analysis.inference.regime`, measured by
``python experiments/calibration.py --regimes``):

1. The Gaussian copula estimate (``mi_copula``) where the runs and joint dimension lie in
   its calibrated regime (at least ``COPULA_MIN_RUNS_PER_DIM`` runs per joint dimension):
   it survives monotone maps of each parameter, which trained parameters need, and equals
   the Gaussian estimate on Gaussian ones.
2. Otherwise, and wherever the copula estimate turns out outside its regime after all (more
   bits than calibrated, or a singular covariance that forced shrinkage), the cross-fitted
   projection lower bound (``mi_bound``): with fewer runs than dimensions no calibrated
   estimate exists, and the bound says how much MI there is at least.
3. KSG as well (``mi_ksg``) where its regime holds (few joint dimensions, many runs): a
   check that assumes nothing of the dependence's form; a KSG estimate that turns out
   outside its regime (too many bits, tied samples) is left out, and the primary row says so.

Every row made by the rule says which estimator it is and why in its ``note`` (it starts
with ``auto: ``), and the sidecar records the rule (``settings["estimator_choice"]``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .regime import COPULA_MIN_RUNS_PER_DIM, KSG_MAX_JOINT_DIMS, KSG_MIN_RUNS, estimate_regime_note

__all__ = ["AUTO", "AUTO_ESTIMATORS", "PRIMARY", "FALLBACK", "EXTRA", "AUTO_PREFIX", "Choice", "choose",
           "fallback_reason", "fallback_note", "omitted_note", "choice_settings", "describe_rule"]

AUTO = "auto"
PRIMARY = "copula"  # an estimate, where it is calibrated
FALLBACK = "bound"  # a lower bound, elsewhere
EXTRA = "ksg"  # as well, where it is calibrated
AUTO_ESTIMATORS = (PRIMARY, FALLBACK, EXTRA)  # what "auto" may run, in the order of the table's rows
AUTO_PREFIX = "auto: "


@dataclass(frozen=True)
class Choice:
    """One estimator the rule runs on a pair, and why.

    Attributes
    ----------
    estimator : str
        "copula", "bound" or "ksg".
    note : str
        What the row's note says ("auto: copula, an estimate (...)").
    reason : str
        Why, alone ("2000 runs >= 2.2 x 400 joint dims: its calibrated regime"):
        what :func:`mianalysis.mi` says.
    """

    estimator: str
    note: str
    reason: str = ""


def choose(n_runs: int, n_features: int) -> list[Choice]:
    """The estimators the rule runs on `n_runs` runs of `n_features` varying joint
    dimensions, before any estimate: the primary one (copula or bound), then KSG where its
    regime holds.

    Examples
    --------
    >>> from mianalysis.analysis.inference.choice import choose
    >>> [c.note for c in choose(400, 716)]
    ['auto: bound, a lower bound (400 runs < 2.2 x 716 joint dims: no calibrated estimate)']
    >>> [c.estimator for c in choose(2000, 400)], [c.estimator for c in choose(2000, 4)]
    (['copula'], ['copula', 'ksg'])
    """
    d = max(int(n_features), 1)  # no varying parameter: the estimate is 0 whatever runs it
    if not estimate_regime_note(PRIMARY, max(n_runs, 2), d, 0.0):
        why = (f"{n_runs} runs >= {COPULA_MIN_RUNS_PER_DIM} x {d} joint dims: its calibrated regime, "
               "for a Gaussian copula")
        out = [Choice(PRIMARY, f"{AUTO_PREFIX}copula, an estimate ({why})", why)]
    else:
        why = f"{n_runs} runs < {COPULA_MIN_RUNS_PER_DIM} x {d} joint dims: no calibrated estimate"
        out = [Choice(FALLBACK, f"{AUTO_PREFIX}bound, a lower bound ({why})", why)]
    if not estimate_regime_note(EXTRA, max(n_runs, 2), d, 0.0):
        why = f"{d} joint dims, {n_runs} runs: its calibrated regime"
        out.append(Choice(EXTRA, f"{AUTO_PREFIX}ksg as well ({why})", why))
    return out


def fallback_reason(reason: str) -> str:
    """Why a bound was made because the copula estimate was outside its regime (`reason`)."""
    return f"the copula estimate is {reason}"


def fallback_note(reason: str) -> str:
    """The note of a bound made because the copula estimate was outside its regime (`reason`)."""
    return f"{AUTO_PREFIX}bound, a lower bound ({fallback_reason(reason)})"


def omitted_note(reason: str) -> str:
    """What the primary row says of a KSG estimate left out (`reason`: why it was outside)."""
    return f"auto: no ksg row (its estimate is {reason})"


def describe_rule() -> str:
    """The rule in one sentence (the CLI help and the sidecar)."""
    return (f"per pair, checkpoint and tensor: the Gaussian copula estimate (mi_copula) where runs >= "
            f"{COPULA_MIN_RUNS_PER_DIM} x the varying joint dims (its calibrated regime) and it lies inside it, "
            f"else the held-out lower bound (NWJ, valid for any distribution) (mi_bound); KSG (mi_ksg) as well where joint dims <= "
            f"{KSG_MAX_JOINT_DIMS} and runs >= {KSG_MIN_RUNS} and its estimate lies inside its regime")


def choice_settings() -> dict[str, object]:
    """What the sidecar records of the rule (``settings["estimator_choice"]``)."""
    return {"rule": AUTO, "primary": PRIMARY, "fallback": FALLBACK, "extra": EXTRA,
            "copula_min_runs_per_dim": COPULA_MIN_RUNS_PER_DIM, "ksg_max_joint_dims": KSG_MAX_JOINT_DIMS,
            "ksg_min_runs": KSG_MIN_RUNS, "description": describe_rule()}
