"""Analyses built on the estimators beside the main table: headroom of combination rules,
dependence given the global model, the additive-noise check."""

__all__ = ()  # its modules are imported by name
