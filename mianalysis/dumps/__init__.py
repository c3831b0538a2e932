"""Dumps: samples of every client's parameter vector at every checkpoint, on disk.

- :mod:`~mianalysis.dumps.format`: :class:`ParameterDump` (the folder format, chunk
  checksums, reading, and the chunk writes every writer goes through).
- :mod:`~mianalysis.dumps.manifest`: what ``manifest.json`` holds and the checks on it
  (format version, metric names, checkpoints, meta).
- :mod:`~mianalysis.dumps.layout`: layouts of the flattened parameter vector (tensors and
  their columns), non-finite checks.
- :mod:`~mianalysis.dumps.writer`: :class:`DumpWriter`, for a
  training loop the user already has: records in any order, chunks written when complete.
- :mod:`~mianalysis.dumps.sketch`: :class:`Sketch`, a seeded sparse projection of each tensor
  recorded instead of the parameters of a large model (``DumpWriter(..., sketch=...)``).
- :mod:`~mianalysis.dumps.importers`: ``ROOT/CLIENT/CHECKPOINT/RUN.{pt,safetensors}``
  streamed into a dump (``mianalysis import``).
- :mod:`~mianalysis.dumps.knowledge`: what the task that made a dump knows beyond its
  samples (its random streams, an exact MI), registered by the tasks and asked for with a
  dump's meta by the analysis.
- :mod:`~mianalysis.dumps.arrays`: a dump as a Dask array or an xarray dataset, and its
  export to zarr (the ``dask`` and ``zarr`` extras).
"""

from .manifest import (CENTRAL, DTYPE, FORMAT_VERSION, MANIFEST, OPTIMUM, REFERENCE_CLIENTS, DumpError, check_checkpoint,
                       check_manifest, check_meta,
                       check_metric_names, parse_manifest)
from .layout import LayoutEntry, NonFinite, find_nonfinite, layout_columns, layout_from_shapes, select_layout
from .format import CREATING, ParameterDump, discard_unwritten_dump, unwritten_dump_discarded
from .arrays import export_zarr, to_dask, to_xarray
from .importers import import_checkpoints
from .writer import DumpWriter, IncompleteChunkWarning
from .sketch import JL_CONSTANT, SKETCH_SUFFIX, Sketch, jl_error, jl_size
from .knowledge import TaskKnowledge, exact_mi_of, register_task_knowledge, task_knowledge, task_streams

__all__ = [
    "ParameterDump", "DumpWriter", "IncompleteChunkWarning", "Sketch", "jl_error", "jl_size", "JL_CONSTANT",
    "SKETCH_SUFFIX", "DumpError", "LayoutEntry", "NonFinite",
    "import_checkpoints", "to_dask", "to_xarray", "export_zarr", "layout_from_shapes", "select_layout",
    "layout_columns", "find_nonfinite",
    "check_manifest", "unwritten_dump_discarded", "discard_unwritten_dump", "FORMAT_VERSION", "MANIFEST", "DTYPE",
    "CENTRAL", "OPTIMUM", "REFERENCE_CLIENTS",
    "CREATING", "parse_manifest", "check_meta", "check_metric_names", "check_checkpoint",
    "TaskKnowledge", "register_task_knowledge", "task_knowledge", "task_streams", "exact_mi_of",
]
