"""Mutual information estimators: Gaussian log-determinant (also conditional) (with its analytic null), KSG, permutation test."""

from .gaussian import gaussian_cmi, gaussian_mi
from .gaussian_null import GaussianMINull, gaussian_mi_null
from .ksg import KSG_NOISE, MarginalDistances, ksg_mi
from .significance import PermutationTestResult, mi_permutation_test

__all__ = [
    "gaussian_mi", "gaussian_cmi", "gaussian_mi_null", "GaussianMINull", "ksg_mi", "MarginalDistances",
    "KSG_NOISE", "mi_permutation_test", "PermutationTestResult"
]
