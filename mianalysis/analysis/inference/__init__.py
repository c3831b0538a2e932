"""Inference on the analysis table: intervals, family-wise verdicts, the calibration regime
and the automatic choice of estimator."""

__all__ = ()  # its modules are imported by name
