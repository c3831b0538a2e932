"""What :mod:`mianalysis.scaleout` installs on Dask workers (imports ``distributed``: the
``dask`` extra, imported only where a scheduler is used)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from distributed import WorkerPlugin

__all__ = ["ImportPaths"]


class ImportPaths(WorkerPlugin):
    """Append folders to a worker's ``sys.path`` (after its own, shadowing nothing): the
    driver's search path and working folder, so that local workers import what the driver
    imports (e.g. a model factory in the working folder)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = list(paths)

    def setup(self, worker: Any) -> None:
        for path in self.paths:
            if path not in sys.path:
                sys.path.append(path)
