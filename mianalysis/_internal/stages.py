"""The package's stages in data-flow order, declared once.

Data flow: tasks -> sampler -> dump -> estimators and analysis -> tables -> report. Each
stage is a set of module prefixes and the stages it may import; a module belongs to the
stage of the longest prefix that names it. tests/test_import_structure.py reads every
import of every module (inside functions and under ``TYPE_CHECKING`` included) and fails
on one that reaches a stage not listed here, so what a lower stage needs from a higher one
reaches it as an argument (a dump convention, a value the caller computes).

The producers (tasks, sampling, federated, flower) and the consumers (estimators, analysis)
sit side by side above the dump: neither imports the other.
"""

from __future__ import annotations

__all__ = ["STAGES", "stage_of"]

# name -> (module prefixes, stages it may import besides itself); lowest first.
STAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "internal": (("mianalysis._version", "mianalysis._internal", "mianalysis.provenance"), ()),
    "scaleout": (("mianalysis.scaleout",), ("internal",)),
    "dumps": (("mianalysis.dumps",), ("internal",)),
    "estimators": (("mianalysis.estimators",), ("internal",)),
    "tasks": (("mianalysis.tasks",), ("internal",)),
    "sampling": (("mianalysis.sampling",), ("internal", "scaleout", "dumps", "tasks")),
    "federated": (("mianalysis.federated",), ("internal", "dumps", "tasks")),
    "flower": (("mianalysis.flower",), ("internal", "dumps", "tasks", "federated")),
    "analysis": (("mianalysis.analysis",), ("internal", "scaleout", "dumps", "estimators")),
    "studies": (("mianalysis.analysis.studies",), ("internal", "scaleout", "dumps", "estimators", "analysis")),
    "report": (("mianalysis.report",), ("internal", "scaleout", "dumps", "estimators", "tasks", "sampling",
                                         "federated", "analysis", "studies")),
    "entry": (("mianalysis.cli", "mianalysis.__main__"), ("internal", "scaleout", "dumps", "estimators", "tasks",
                                                          "sampling", "federated", "flower", "analysis", "studies",
                                                          "report")),
}
# The package's own __init__ re-exports the public API of every stage.
ROOT = "mianalysis"


def stage_of(module: str) -> str | None:
    """The stage of a module name (e.g. "mianalysis.analysis.compute" -> "analysis"), the
    package itself -> "entry", or None where no stage names it."""
    if module == ROOT:
        return "entry"
    best: tuple[int, str] | None = None
    for name, (prefixes, _) in STAGES.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), name)
    return None if best is None else best[1]
