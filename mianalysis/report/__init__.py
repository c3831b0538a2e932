"""A dump's report: its analysis table, figures and a Markdown summary, in one folder.

:func:`report` (``mianalysis report DUMP --out DIR``) analyses a dump with the defaults of
:func:`mianalysis.analyze` and a permutation null for every MI row, and writes into `DIR`:

- ``table.csv`` (and its sidecar ``table.csv.json``): the analysis table;
- ``mi.png``, ``distances.png`` and, when the dump recorded metrics, ``metrics.png``;
- ``report.md``: first the bottom line (:mod:`mianalysis.report.bottom_line`: what a reader
  may conclude, quoting the table), then what each row of the table means, which rows to read
  (:mod:`mianalysis.analysis.reading`), what the sampling design forces on the MI
  (:mod:`mianalysis.analysis.diagnostics.design`) and the trend verdicts with their family-wise
  correction (:func:`mianalysis.report.experiment.trend_summary`).

A report never replaces a file it did not write: `DIR` is new, empty, or holds an earlier
report (only its files, with a ``report.md`` starting with :data:`HEADING`), which is then
replaced; ``report.md`` is written first, so that a report interrupted at any moment is
finished by the same call. Without that file only the table's journal and temporary
files (an analysis interrupted at once) may be there. Every file is written new: a file or
symbolic link found in its place is removed first, never written through (a link's
target outside the folder is left as it is). A report whose analysis is refused (a dump
with no completed runs, or with one client) leaves nothing behind: no placeholder
``report.md``, no folder it made, and an earlier report's files as they were.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.io import new_file
from .._internal.validation import check_int
from ..analysis import AnalysisTable, analyze
from ..analysis.diagnostics.design import design_note
from ..analysis.reading import p_value_floor, reading_guide, row_kinds
from ..analysis.validate import dump_around

if TYPE_CHECKING:  # names used only in type hints
    from ..dumps import ParameterDump

__all__ = ["report", "Report", "REPORT_PERMUTATIONS", "REPORT_FILES", "HEADING", "check_report_folder",
           "reference_headroom"]

# A permutation null for every MI row: 100 shuffles give p-values down to 1/101 = 0.0099, below
# 0.05 with room for a family-wise correction; KSG's and the Gaussian nulls reuse each client's
# distance matrix and covariance factors, so they cost a fraction of the estimates' own time.
REPORT_PERMUTATIONS = 100
TABLE = "table.csv"
SUMMARY = "report.md"
FIGURES = {"mi": "mi.png", "distances": "distances.png", "metrics": "metrics.png"}
REPORT_FILES = (TABLE, TABLE + ".json", *FIGURES.values(), SUMMARY)
# The first line of every report.md: how a folder is known to hold a report.
HEADING = "# mianalysis report"


@dataclass(frozen=True)
class Report:
    """What :func:`report` wrote.

    Attributes
    ----------
    table : AnalysisTable
        The analysis table (written to ``table.csv``).
    out_dir : pathlib.Path
        The report's folder.
    files : tuple of pathlib.Path
        Every file written, the summary last.
    summary : str
        The Markdown text of ``report.md``.
    seconds : float
        Wall-clock time of the analysis, figures and summary.
    """

    table: AnalysisTable
    out_dir: Path
    files: tuple[Path, ...]
    summary: str
    seconds: float


def _own(name: str) -> bool:
    """Whether a file name in a report folder is one a report writes (the table's journal,
    lock and temporary files included)."""
    return name in REPORT_FILES or name.startswith((TABLE + ".", "." + TABLE + ".", "." + SUMMARY + "."))


def check_report_folder(out_dir: str | os.PathLike, dump: str | os.PathLike | None = None) -> bool:
    """ValueError unless a report may be written into `out_dir`; whether it holds an earlier
    report (which the new one replaces).

    `out_dir` may be missing, an empty folder, a folder of report files only whose
    ``report.md`` starts with :data:`HEADING`, or (a report interrupted during its
    analysis) one holding only the table's journal, lock or temporary files; a folder with
    any other file (a report's file names without that ``report.md`` included), a file, a
    dump or a folder inside a dump (`dump` or any other) is refused, naming the problem.

    Parameters
    ----------
    out_dir : path
    dump : path, optional
        The dump to be reported on (`out_dir` may not be inside it).

    Returns
    -------
    bool
        True when `out_dir` holds an earlier report.
    """
    out = Path(out_dir)
    inside = dump_around(out)
    if inside is not None or (dump is not None and Path(os.path.realpath(out)).is_relative_to(os.path.realpath(dump))):
        raise ValueError(f"`out_dir` {out} is inside the dump {inside or dump}: a report never writes into a dump; "
                         "choose a folder outside it")
    if os.path.lexists(out) and not out.is_dir():
        raise ValueError(f"`out_dir` {out} exists and is not a folder; give a new or empty folder")
    if not out.is_dir():
        return False
    names = sorted(os.listdir(out))
    if not names:
        return False
    foreign = [n for n in names if not _own(n)]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"`out_dir` {out} holds files that are not a report's ({shown}); a report never replaces "
                         "them: give a new or empty folder")
    summary = out / SUMMARY
    try:
        earlier = summary.is_file() and summary.read_text(encoding="utf-8").startswith(HEADING)
    except (OSError, UnicodeDecodeError):
        earlier = False
    if os.path.lexists(summary) and not earlier:
        raise ValueError(f"`out_dir` {out} holds a {SUMMARY} that is not a mianalysis report's (its first line is not "
                         f"{HEADING!r}); give a new or empty folder")
    # Without our report.md, a report's file names prove nothing (a user's own mi.png): only the
    # table's journal, lock and temporary files (an analysis interrupted before any report file
    # was written) may be there, and are resumed.
    named = [n for n in names if n in REPORT_FILES]
    if not earlier and named:
        shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
        raise ValueError(f"`out_dir` {out} holds {shown} but no {SUMMARY} of a mianalysis report: a report never "
                         "replaces files it did not write: give a new or empty folder")
    return earlier


def report(dump: ParameterDump | str | os.PathLike, out_dir: str | os.PathLike, *,
           n_permutations: int = REPORT_PERMUTATIONS, estimators: Sequence[str] | None = None,
           random_state: int = 0, progress: bool = False, by: str | None = "auto") -> Report:
    """Analyse a dump and write its table, figures and a Markdown summary into `out_dir`.

    The analysis is :func:`mianalysis.analyze` with its defaults (estimators, distances,
    intervals, family-wise correction) and `n_permutations` shuffles for the null of every
    MI row. ``report.md`` says what the dump and design are, what each row kind of the
    table means, which MI rows to read (inside the calibrated regime, outside it, lower
    bounds, shrinkage numbers, infinite or zero at the start), the p-value floor and the
    trend verdicts with their correction.

    Parameters
    ----------
    dump : ParameterDump or path
    out_dir : path
        A new or empty folder, or one holding an earlier report (replaced); never a folder
        with other files, nor one inside a dump (:func:`check_report_folder`).
    n_permutations : int, default=100
        Shuffles of the runs' pairing per MI row (p-values down to 1/(n + 1)); >= 1.
    estimators : sequence of str, optional
        MI estimators; default: those of :func:`mianalysis.analyze`.
    random_state : int, default=0
    progress : bool, default=False
    by : {"auto", None, "layer"}, default="auto"
        As :func:`mianalysis.analyze`'s `by`: by default the whole vector where the runs
        cover a calibrated estimate of it, else its tensors in blocks that they cover
        (the report says how many runs the whole vector would need).

    Returns
    -------
    Report

    Raises
    ------
    ValueError
        A path that is not a dump (DumpError), an `out_dir` that may not be written, or a
        dump the analysis refuses (no completed runs, fewer than two clients); nothing is
        left behind then (an earlier report in `out_dir` stays as it was).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import ParameterDump, report
    >>> rng = np.random.default_rng(0)
    >>> start = rng.standard_normal((1, 200, 2)).repeat(3, axis=0)      # 3 checkpoints, 200 runs
    >>> a = start + rng.standard_normal((3, 200, 2)) * [[[0]], [[1]], [[2]]]
    >>> b = start + rng.standard_normal((3, 200, 2)) * [[[0]], [[1]], [[2]]]
    >>> dump = ParameterDump.from_arrays("dump", {"a": a, "b": b}, checkpoints=[0, 1, 2])
    >>> done = report(dump, "report", n_permutations=19)
    >>> [f.name for f in done.files]
    ['table.csv', 'table.csv.json', 'mi.png', 'distances.png', 'report.md']
    >>> print(done.summary.splitlines()[0])
    # mianalysis report
    """
    from ..dumps import ParameterDump

    started = time.perf_counter()
    check_int(n_permutations, "n_permutations", low=1)
    dump = dump if isinstance(dump, ParameterDump) else ParameterDump.open(dump)
    out = Path(out_dir)
    earlier = check_report_folder(out, dump.path)
    options: dict[str, Any] = {} if estimators is None else {"estimators": tuple(estimators)}
    made = [p for p in (out, *out.parents) if not os.path.lexists(p)]  # the folders this report creates
    out.mkdir(parents=True, exist_ok=True)
    placeholder = out / SUMMARY
    if not earlier:  # first, so that a report interrupted at any later moment is known as ours when rerun
        with new_file(placeholder, "w") as fh:
            fh.write(f"{HEADING}\n\nBeing written (or interrupted): run the same report again to finish it.\n")
    table_path = out / TABLE
    try:
        table = analyze(dump, n_permutations=n_permutations, random_state=random_state, out=table_path,
                        progress=progress, force=earlier, by=by, **options)
    except (ValueError, TypeError):  # refused (no runs, one client, ...): nothing of this report is left
        if not earlier:
            _remove_placeholder(placeholder, made)
        raise
    record: dict[str, Any] = {**table.sidecar, "dump_meta": {"shared": [], **dict(dump.meta)}}
    files = [table_path, Path(str(table_path) + ".json")]
    files += _figures(table, out, record)
    headroom = reference_headroom(dump)
    seconds = time.perf_counter() - started
    summary = summary_text(table, dump, files, n_permutations=n_permutations, seconds=seconds, record=record,
                           headroom=headroom)
    with new_file(out / SUMMARY, "w") as fh:
        fh.write(summary)
    files.append(out / SUMMARY)
    return Report(table=table, out_dir=out, files=tuple(files), summary=summary, seconds=seconds)


def reference_headroom(dump: ParameterDump) -> list[dict[str, Any]] | None:
    """Rows of :func:`mianalysis.headroom` at the dump's last checkpoint against its reference
    client (:data:`mianalysis.dumps.REFERENCE_CLIENTS`), for the bottom line; None where the
    dump has no reference client or headroom refuses it (too few runs, nothing to combine).

    Every rule but the full best linear combination ("blue", a (K d) x (K d) fit that costs
    tens of seconds at a few hundred parameters): the best per-coordinate combination stands
    for it, and ``mianalysis headroom`` measures it.
    """
    from ..analysis.studies.headroom import RULES, headroom
    from ..dumps import REFERENCE_CLIENTS

    if not any(c in REFERENCE_CLIENTS for c in dump.clients) or not dump.checkpoints:
        return None
    try:
        return headroom(dump, iterations=[dump.checkpoints[-1]], rules=[r for r in RULES if r != "blue"])
    except ValueError:
        return None


def _remove_placeholder(placeholder: Path, made: Sequence[Path]) -> None:
    """Remove what a refused report wrote before its analysis was refused: the placeholder
    ``report.md`` (while it is still the placeholder) and the folders it made, while empty."""
    try:
        if placeholder.is_file() and not placeholder.is_symlink() and "Being written" in placeholder.read_text(
                encoding="utf-8"):
            placeholder.unlink()
        for folder in made:  # the report's folder first, then the parents it made
            folder.rmdir()
    except OSError:  # a folder another process wrote into meanwhile: left, with what is in it
        pass


def _new_binary(path: Path, data: bytes) -> Path:
    """Write `data` to `path` as a new regular file (:func:`new_file`: a file or symbolic link
    found there is removed first, the link itself, never its target)."""
    with new_file(path, "wb") as fh:
        fh.write(data)
    return path


def _save_png(fig: Any, path: Path, **options: Any) -> Path:
    """Draw `fig` as PNG in memory, close it, and write it to `path` by :func:`_new_binary`."""
    import matplotlib.pyplot as plt

    image = io.BytesIO()
    try:
        fig.savefig(image, format="png", **options)
    finally:
        plt.close(fig)
    return _new_binary(path, image.getvalue())


def _figures(table: AnalysisTable, out: Path, record: dict) -> list[Path]:
    """Draw the report's figures, each written as a new file (never through a link found in
    its place); remove an earlier report's figure (or a link in its place) that this table
    has nothing for, so that the folder shows this report only."""
    from .plots import FIGURE_QUANTITIES, FIGURES as DRAW, figure_metrics, metric_names

    written = []
    quantities = {r["quantity"] for r in table}
    for kind in ("mi", "distances"):
        path = out / FIGURES[kind]
        if any(q in quantities for q in FIGURE_QUANTITIES[kind]) or (kind == "mi" and _mi_quantities(table)):
            # as plots.save_figure draws it: nothing cut off, the legends below the panels included
            written.append(_save_png(DRAW[kind](table, None, record=record), path, dpi=120, bbox_inches="tight"))
        elif os.path.lexists(path):
            path.unlink()
    path = out / FIGURES["metrics"]
    if metric_names(table):
        written.append(_save_png(figure_metrics(table, record=record), path, dpi=120, bbox_inches="tight"))
    elif os.path.lexists(path):
        path.unlink()
    return written


def _mi_quantities(table: AnalysisTable) -> list[str]:
    return [q for q in dict.fromkeys(str(r["quantity"]) for r in table) if q.startswith("mi_") and q != "mi_exact"]


def summary_text(table: AnalysisTable, dump: ParameterDump, files: Sequence[Path], *, n_permutations: int,
                 seconds: float | None = None, record: dict | None = None,
                 headroom: Sequence[dict] | None = None) -> str:
    """The Markdown text of ``report.md`` (see :func:`report`): the bottom line
    (:func:`~mianalysis.report.bottom_line.bottom_line`, with `headroom`'s rows where given)
    first, then the details."""
    from .bottom_line import BOTTOM_LINE, bottom_line
    from .experiment import TRENDS, trend_summary
    from .plots import checkpoint_label

    label = checkpoint_label(record)
    settings = table.settings
    level = settings.get("ci_level", 0.95)
    meta = dict(dump.meta)
    design = design_note(meta) or ("design: not recorded (a dump the sampler did not write): what makes the clients "
                                   "dependent is not known to the analysis")
    estimators = _held_estimators(table)
    metrics = ", ".join(str(m) for m in settings.get("metrics", []))
    lines = [HEADING, "", f"## {BOTTOM_LINE}", ""]
    lines += [f"- {paragraph}" for paragraph in bottom_line(table, label=label, headroom=headroom)]
    lines += ["", "## Dump and analysis", "",
             f"Dump `{dump.path}`: {dump.completed_runs} of {dump.n_runs} runs, clients {', '.join(dump.clients)}, "
             f"{label}s {', '.join(map(str, dump.checkpoints))}, {dump.n_params} parameters"
             + (f" (task {meta['task']})" if meta.get("task") else "") + ".",
             "",
             f"Analysed by `mianalysis.analyze`: {estimators}; "
             f"distances {metrics}; "
             f"{level:.0%} intervals; {n_permutations} permutations per MI row, so no p-value is below "
             f"1/(shuffles + 1) = {p_value_floor(n_permutations)}"
             + (f". Analysis, figures and this summary took {seconds:.0f} s." if seconds is not None else "."),
             "", f"{design[0].upper()}{design[1:]}.", "", "## Files", ""]
    what = {TABLE: "the analysis table, one row per quantity, client pair (or client) and checkpoint",
            TABLE + ".json": "its sidecar: the analysis settings and the provenance of the dump and of this analysis",
            FIGURES["mi"]: "MI per checkpoint, one panel per estimator (band: the pairs' intervals; dashed: the null), "
                           "and the default recorded metric",
            FIGURES["distances"]: "the mean distances between clients per checkpoint",
            FIGURES["metrics"]: "every recorded metric per checkpoint"}
    for f in files:
        lines.append(f"- `{f.name}`: {what.get(f.name, '')}")
    lines += ["", "## What each row means", ""]
    grouped: dict[str, list[tuple[str, int]]] = {}  # quantities with the same description: one line
    for quantity, n, text in row_kinds(table):
        grouped.setdefault(text, []).append((quantity, n))
    for text, members in grouped.items():
        counts = sorted({n for _, n in members})
        rows = f"{counts[0]} rows" + (" each" if len(members) > 1 else "") if len(counts) == 1 else "rows"
        lines.append(f"- {', '.join(f'`{q}`' for q, _ in members)} ({rows}): {text}.")
    lines += ["", "## Which rows to read", ""]
    lines += [f"- {line}" for line in reading_guide(table, label)]
    lines += ["", "## Trends", ""]
    summary = trend_summary(table)
    if summary:
        lines += [f"Rising or falling, from the {TRENDS}, at the intervals' error rate {1 - level:.2g} (the correction: "
                  "the first line below; columns `p_adjusted` and `family_verdict` of the `delta_*` rows):", "",
                  "```text", summary, "```"]
    else:
        lines.append("No trend verdicts: the table has no change rows with intervals (fewer than three checkpoints, "
                     "or no intervals).")
    return "\n".join(lines) + "\n"


def _held_estimators(table: AnalysisTable) -> str:
    """The MI estimators the table holds rows of, in words (never one it was asked for,
    ``settings["estimators"]``, that made no row: "auto" runs only some of those it may)."""
    from ..estimators.registry import estimator_names

    quantities = {str(r["quantity"]) for r in table}
    asked = [str(e) for e in table.settings.get("estimators", [])]
    held = [e for e in dict.fromkeys([*asked, *estimator_names()]) if f"mi_{e}" in quantities]
    return f"MI estimator{'s' if len(held) != 1 else ''} {', '.join(held)}" if held else "no MI estimator"
