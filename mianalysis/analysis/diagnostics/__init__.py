"""Diagnostics of a dump before estimation: Gaussianity, rare movers, the sampling design."""

__all__ = ()  # its modules are imported by name
