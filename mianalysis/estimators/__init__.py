"""Mutual information estimators: Gaussian log-determinant (also conditional) (with its analytic null), KSG
(with its tie and lattice check), Gaussian copula, the held-out lower bound (NWJ, valid for any distribution), permutation test,
and the registry of estimators the analyses read."""

from .bound import ProjectionBound, projection_bound, projection_mi_bound
from .calibration import OutsideCalibrationWarning
from .copula import gaussian_copula_mi
from .gaussian import gaussian_cmi, gaussian_mi
from .gaussian_null import GaussianMINull, gaussian_mi_null
from .ksg import KSG_NOISE, KSGTies, MarginalDistances, TiedSamplesWarning, ksg_mi, ksg_ties
from .registry import Estimator, estimator_names, get_estimator, register_estimator, unregister_estimator
from .significance import PermutationTestResult, mi_permutation_test

__all__ = [
    "gaussian_mi", "gaussian_cmi", "gaussian_mi_null", "GaussianMINull", "ksg_mi", "MarginalDistances",
    "KSG_NOISE", "mi_permutation_test", "PermutationTestResult", "gaussian_copula_mi", "Estimator",
    "register_estimator", "unregister_estimator", "get_estimator", "estimator_names", "projection_mi_bound",
    "projection_bound", "ProjectionBound", "ksg_ties", "KSGTies", "TiedSamplesWarning", "OutsideCalibrationWarning"
]
