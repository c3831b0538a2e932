"""Mutual information estimators: Gaussian log-determinant, KSG, permutation test."""

from .gaussian import gaussian_mi
from .ksg import ksg_mi
from .significance import PermutationTestResult, mi_permutation_test

__all__ = ["gaussian_mi", "ksg_mi", "mi_permutation_test", "PermutationTestResult"]
