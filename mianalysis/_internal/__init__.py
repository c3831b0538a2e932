"""The package's shared internals: argument checks and their messages, file output,
writer locks, memory, threads, seeding, overflow-safe scaling and the normal interval.
Any module may import them; they import nothing else of the package."""

__all__ = ()  # its modules are imported by name
