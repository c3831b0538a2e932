"""mianalysis: is averaging the right way to combine federated clients' parameters?

Treat each client's trained parameter vector as a random variable, sample it many times,
and measure how clients relate: mutual information and distances between their
parameter vectors.

Importing the package loads NumPy and SciPy only; Numba compiles the KSG kernel on first
use, and PyTorch and Matplotlib are loaded by the parts that need them.
"""

# The version lives in _version.py (pyproject.toml reads it there, tool.setuptools.dynamic), so
# that modules needing it (provenance records) do not import the package itself.
from ._version import __version__

import logging as _logging

# Library messages go to the "mianalysis" logger; an application decides where they appear
# (the command line prints them on stderr, -v/-q).
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

from ._internal.locking import LockedError
from ._internal.validation import ConstantFeatureWarning
from .analysis.studies.additive import (AdditivePrediction, AdditiveTest, additive_model_mi, additive_model_test,
                       additive_model_verdict, isotropic_additive_mi)
from .analysis import AnalysisTable, analyze
from .analysis.inference.judged import JudgedMI, mi
from .estimators.distances import mean_paired_distance, mean_update_cosine, paired_distances, update_cosines
from .dumps import DumpError, DumpWriter, ParameterDump, Sketch
from .estimators import (GaussianMINull, MarginalDistances, OutsideCalibrationWarning, PermutationTestResult,
                         TiedSamplesWarning, gaussian_cmi, gaussian_copula_mi, gaussian_mi, gaussian_mi_null, ksg_mi,
                         ksg_ties, mi_permutation_test, projection_mi_bound)
from .analysis.studies.headroom import headroom
from .report import report
from .sampling import ParameterSampler

# Modules use one another through public names (tests/test_layout.py checks it). A
# folder's private modules (estimators/_kernels.py, estimators/_neighbours.py) serve that
# folder only; the folder _internal holds the package's shared internals, which any module
# may import: argument checks and their messages, writer locks, thread settings,
# overflow-safe scaling, the memory left to the process, and the normal interval of an
# estimate and its se. (Provenance records are the
# public module mianalysis.provenance: scripts outside the package record them too.)
SHARED_INTERNALS = ("mianalysis._internal",)

__all__ = [
    "mi",
    "JudgedMI",
    "OutsideCalibrationWarning",
    "gaussian_mi",
    "gaussian_cmi",
    "gaussian_mi_null",
    "GaussianMINull",
    "ksg_mi",
    "gaussian_copula_mi",
    "projection_mi_bound",
    "ksg_ties",
    "TiedSamplesWarning",
    "MarginalDistances",
    "mi_permutation_test",
    "PermutationTestResult",
    "ConstantFeatureWarning",
    "paired_distances",
    "mean_paired_distance",
    "update_cosines",
    "mean_update_cosine",
    "ParameterDump",
    "DumpWriter",
    "Sketch",
    "DumpError",
    "LockedError",
    "ParameterSampler",
    "analyze",
    "AnalysisTable",
    "headroom",
    "report",
    "additive_model_mi",
    "isotropic_additive_mi",
    "additive_model_verdict",
    "AdditiveTest",
    "additive_model_test",
    "AdditivePrediction",
]
