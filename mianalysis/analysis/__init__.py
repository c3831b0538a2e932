"""Dump -> analysis table, and what the table's numbers rest on.

- :func:`analyze` (:mod:`.assemble`): MI and distances between every pair of clients at
  every checkpoint of a dump, as an :class:`AnalysisTable` (:mod:`.table`: rows, settings,
  provenance; CSV + JSON sidecar) of rows :class:`AnalysisRow`, whose columns are declared
  once in :mod:`.schema`. Its steps: the checks (:mod:`.validate`), one
  checkpoint's rows (:mod:`.compute`), the journal that makes it resumable
  (:mod:`.journal`) and the assembly in checkpoint order (:mod:`.assemble`).
- What the rows rest on: confidence intervals (:mod:`.intervals`), the calibrated regime of
  each estimator (:mod:`.regime`), what the sampling design forces on the MI
  (:mod:`.design`), and the additive-noise model's prediction of MI changes
  (:mod:`.additive`, :mod:`.additive_table`), and how far the samples are from Gaussian
  (:mod:`.gaussianity`: which MI row to read).
- :func:`varying_columns`: which parameters vary, by the one relative rule for
  near-constant parameters that every estimator and the analysis apply.
"""

from .._internal.validation import varying_columns
from .assemble import analyze
from .compute import gaussian_settings
from .options import (AnalyticNull, BenjaminiHochberg, Execution, Holm, Intervals, MomentNull, NoCorrection,
                      Permutations)
from .schema import AnalysisRow
from .table import (BASE_COLUMNS, COLUMNS, ESTIMATE_KINDS, FORMAT_VERSION, NULL_METHODS, OPTIONAL_COLUMNS,
                    TYPED_COLUMNS, AnalysisTable, sidecar_path)
from .validate import BY, ESTIMATORS, GAUSSIAN_NULLS

__all__ = [
    "analyze", "AnalysisTable", "AnalysisRow", "sidecar_path", "Permutations", "AnalyticNull", "MomentNull", "Intervals", "Holm",
    "BenjaminiHochberg", "NoCorrection", "Execution", "gaussian_settings", "ESTIMATORS", "GAUSSIAN_NULLS", "BY", "COLUMNS",
    "BASE_COLUMNS", "TYPED_COLUMNS", "OPTIONAL_COLUMNS", "ESTIMATE_KINDS", "NULL_METHODS", "FORMAT_VERSION",
    "varying_columns"
]
