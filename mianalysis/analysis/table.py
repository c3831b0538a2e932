"""The analysis table: rows, the settings that made them and their provenance, on disk as a
CSV file and a JSON sidecar.

:func:`mianalysis.analyze` returns an :class:`AnalysisTable`; :meth:`AnalysisTable.read`
reads one back, from tables of every format version. A table is a sequence of row dicts
(``len``, indexing, iteration), so code written for a list of rows reads it unchanged.

Format versions (the sidecar's ``format_version``):

- 1 (no ``format_version``): the columns of :data:`BASE_COLUMNS`; what an estimate is,
  whether it lies outside the calibrated regime and which null it has were said only in
  the free-text ``note``.
- 2: the typed columns of :data:`TYPED_COLUMNS` as well. Reading a table without them
  derives them from its notes (:func:`columns_from_note`), which gives the values the
  analysis computes (``tests/test_table.py`` checks both on a committed old table).
  Later in version 2, the inference columns of :data:`INFERENCE_COLUMNS`: each change's
  standard error and p-value (``change_se``, ``change_p``), and the family-wise adjusted
  p-value and verdict (``p_adjusted``, ``family_verdict``; see
  :mod:`mianalysis.analysis.inference.familywise`). A table without them gets ``change_se`` and
  ``change_p`` from each change's interval and the level its sidecar records
  (:func:`~mianalysis.analysis.inference.intervals.se_from_interval`), and no family-wise columns
  (:func:`~mianalysis.analysis.inference.familywise.apply_familywise` gives them to any table).
  Later still, the rows of the Gaussianity diagnostic (``nongaussian_share``,
  ``copula_disagrees``; :func:`mianalysis.analyze`'s `gaussianity`): new quantities in the
  same columns, so tables without them read as before.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast, overload

import numpy as np

from .._internal.io import new_file
from .inference.intervals import change_df, change_test, se_from_interval
from .inference.regime import is_outside
from . import schema
from .schema import FAMILYWISE, SCHEMA, TYPED, AnalysisRow, column, column_names

__all__ = [
    "AnalysisTable", "BASE_COLUMNS", "TYPED_COLUMNS", "COLUMNS", "OPTIONAL_COLUMNS", "ESTIMATE_KINDS", "NULL_METHODS",
    "FORMAT_VERSION", "INFERENCE_COLUMNS", "sidecar_path", "columns_from_note", "complete_row", "is_bound_quantity",
    "AnalysisRow"
]

# The column tuples, as other modules name them; every one is read from the one declaration,
# :mod:`mianalysis.analysis.schema` (its fields' meanings are there and in the docs' column table).
BASE_COLUMNS = column_names(format=1)
TYPED_COLUMNS = column_names(since=TYPED)
INFERENCE_COLUMNS = column_names(since=FAMILYWISE)
COLUMNS = column_names()
# Tables written before `by`, intervals, the typed or the inference columns lack these.
OPTIONAL_COLUMNS = tuple(c.name for c in SCHEMA if c.optional)
ESTIMATE_KINDS = column("estimate_kind").choices
NULL_METHODS = column("null_method").choices
FORMAT_VERSION = 2


def sidecar_path(table: str | os.PathLike) -> Path:
    """The JSON sidecar of a CSV table: its full name plus ``.json`` (``t.csv`` -> ``t.csv.json``),
    so that any table name maps to one sidecar and it never clashes with another output
    (``NAME.json`` stays free for a file of its own). An experiment's record
    (:func:`mianalysis.report.experiment.run_experiment`) is the sidecar of its table and holds the
    table's own sidecar under ``"analysis"``, which :meth:`AnalysisTable.read` reads."""
    return Path(str(table) + ".json")


def columns_from_note(note: object, p_value: object = np.nan) -> dict[str, Any]:
    """The typed columns that a row's `note` (and `p_value`) imply: how a table written
    before they existed (format version 1) is read.

    Parameters
    ----------
    note : str
        The row's note.
    p_value : float, optional
        The row's p-value: a finite one without an analytic null's note is a permutation
        test's.

    Returns
    -------
    dict
        ``estimate_kind`` ("shrinkage" when the note names a Ledoit-Wolf shrinkage
        estimate, else "plain"), ``outside_calibration`` and ``null_method``.

    Examples
    --------
    >>> from mianalysis.analysis.table import columns_from_note
    >>> columns_from_note("ledoit-wolf shrinkage: 40 runs <= 2 x 60 joint dimensions; "
    ...                   "outside calibration: shrinkage estimate (40 runs <= 2 x 60 joint dims)", 0.02)
    {'estimate_kind': 'shrinkage', 'outside_calibration': True, 'null_method': 'permutation'}
    >>> columns_from_note("analytic null (exact)", 0.5)["null_method"]
    'analytic'
    """
    text = str(note or "")
    if "analytic null (" in text:  # "analytic null (exact)" or "(Bartlett chi-square)"; not "no analytic null"
        null_method = "analytic"
    elif "permutation-moment null (" in text:  # not "no moment null"
        null_method = "moments"
    else:
        null_method = "permutation" if np.isfinite(_float(p_value)) else "none"
    return {"estimate_kind": "shrinkage" if "ledoit-wolf shrinkage" in text.lower() else "plain",
            "outside_calibration": is_outside(text), "null_method": null_method}


def is_bound_quantity(quantity: str) -> bool:
    """Whether `quantity` (``mi_NAME`` or ``delta_mi_NAME``) is of a registered estimator whose
    rows are lower bounds.

    Examples
    --------
    >>> from mianalysis.analysis.table import is_bound_quantity
    >>> is_bound_quantity("mi_bound"), is_bound_quantity("delta_mi_bound"), is_bound_quantity("mi_copula")
    (True, True, False)
    """
    from ..estimators.registry import estimator_names, get_estimator

    name = quantity.removeprefix("delta_")
    if not name.startswith("mi_"):
        return False
    name = name.removeprefix("mi_")
    return name in estimator_names() and get_estimator(name).kind == "bound"


def complete_row(row: Mapping[str, Any], *, level: float = 0.95,
                 ci_resamples: Mapping[str, Any] | None = None) -> AnalysisRow:
    """`row` with every optional column: the columns of later formats that it lacks, as a
    table without them is read (:mod:`mianalysis.analysis.schema`: each column's default,
    such as an empty layer and verdict, no interval and no family-wise columns; the typed
    columns derived from its note). A row that has them all is returned as it is (the same
    dict).

    A change row (``delta_*``) without ``change_se`` and ``change_p`` gets them from its
    interval: the se by :func:`~mianalysis.analysis.inference.intervals.se_from_interval` at `level`
    (the table's ``ci_level``), with Student's t for an MI change when `ci_resamples` (the
    table's ``ci_resamples``) records its estimator's resamples, as the analysis made the
    interval; the p-value by :func:`~mianalysis.analysis.inference.intervals.change_test` around the
    row's value (the midpoint of the interval). Other rows get NaN. (Tables without these
    columns predate the influence-value intervals of MI changes, so their MI changes are all
    from resamples.)"""
    optional = [c for c in schema.columns() if c.optional]
    if isinstance(row, dict) and all(c.name in row for c in optional):
        return cast(AnalysisRow, row)
    out = dict(row)
    for c in optional:
        if not c.derived:
            out.setdefault(c.name, c.default)
    if not all(c in row for c in TYPED_COLUMNS):
        for key, value in columns_from_note(row.get("note", ""), row.get("p_value", np.nan)).items():
            out.setdefault(key, value)
        if "estimate_kind" not in row and is_bound_quantity(str(out.get("quantity", ""))):
            out["estimate_kind"] = "bound"  # a note cannot say it; the estimator's registry entry does
    if "change_se" not in row or "change_p" not in row:
        se, p = np.nan, np.nan
        quantity = str(out.get("quantity", ""))
        if quantity.startswith("delta_"):
            df = change_df(quantity, ci_resamples)
            se = se_from_interval(_float(out["ci_low"]), _float(out["ci_high"]), level, df)
            p = change_test(_float(out.get("value")), se, df)
        out.setdefault("change_se", se)
        out.setdefault("change_p", p)
    return cast(AnalysisRow, out)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


class AnalysisTable(Sequence[AnalysisRow]):
    """An analysis table: its rows, the settings that made them and their provenance.

    A sequence of row dicts (:class:`~mianalysis.analysis.schema.AnalysisRow`), one per
    (checkpoint, client pair or client, quantity, layer), with the columns of
    :data:`COLUMNS` (:mod:`mianalysis.analysis.schema`; see :func:`mianalysis.analyze`, Returns):
    ``len(table)``, ``table[i]`` and ``for row in table`` work as on a list of rows. Two
    tables are equal when their rows are (settings and provenance aside).

    Parameters
    ----------
    rows : iterable of dict
        The rows. A row without some optional column (a hand-made row, or one of an older
        table) gets it as :func:`complete_row` says.
    settings : dict, optional
        The analysis settings (the arguments of :func:`mianalysis.analyze`, the dump and its
        completed chunks); empty when unknown.
    provenance : list of dict, optional
        The provenance of every session that computed the rows, oldest first
        (:mod:`mianalysis.provenance`); empty when unknown.
    record : dict, optional
        The sidecar's other entries: ``dump_verified``, ``dump_runs`` and
        ``dump_provenance`` for a table of :func:`mianalysis.analyze`, or what another
        tool recorded there.

    Attributes
    ----------
    settings : dict
    provenance : list of dict
    record : dict

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import ParameterDump, analyze
    >>> rng = np.random.default_rng(0)
    >>> a = rng.standard_normal((2, 500, 2))
    >>> dump = ParameterDump.from_arrays("ab", {"a": a, "b": a + rng.standard_normal((2, 500, 2))})
    >>> table = analyze(dump, estimators=["gaussian"], metrics=[], gaussian_null="analytic")
    >>> len(table), table.settings["estimators"]
    (3, ['gaussian'])
    >>> [(r["iteration"], r["estimate_kind"], r["null_method"]) for r in table.select("mi_gaussian", "a", "b")]
    [(0, 'plain', 'analytic'), (1, 'plain', 'analytic')]
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]] = (), *, settings: Mapping[str, Any] | None = None,
                 provenance: Sequence[Mapping[str, Any]] | None = None,
                 record: Mapping[str, Any] | None = None) -> None:
        self.settings: dict[str, Any] = dict(settings or {})
        level, resamples = self.settings.get("ci_level"), self.settings.get("ci_resamples")
        if not (isinstance(level, float) and 0 < level < 1):  # unknown (a table of no analysis): the default
            level = 0.95
        self._rows = [complete_row(r, level=level, ci_resamples=resamples) for r in rows]
        self.provenance: list[dict[str, Any]] = [dict(p) for p in provenance or ()]
        self.record: dict[str, Any] = dict(record or {})

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]]) -> AnalysisTable:
        """`rows` itself if it is a table, else a table of them (no settings, no provenance)."""
        return rows if isinstance(rows, AnalysisTable) else cls(rows)

    @overload
    def __getitem__(self, index: int) -> AnalysisRow: ...

    @overload
    def __getitem__(self, index: slice) -> list[AnalysisRow]: ...

    def __getitem__(self, index: int | slice) -> AnalysisRow | list[AnalysisRow]:
        return self._rows[index]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[AnalysisRow]:
        return iter(self._rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AnalysisTable):
            return self._rows == other._rows
        if isinstance(other, list):
            return self._rows == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by its rows

    def __repr__(self) -> str:
        quantities = sorted({r["quantity"] for r in self._rows})
        return f"AnalysisTable({len(self._rows)} rows; quantities {quantities})"

    @property
    def rows(self) -> list[AnalysisRow]:
        """The rows, as a list (the table's own: change it only to change the table)."""
        return self._rows

    def select(self, quantity: str, client_a: str | None = None, client_b: str | None = None, *,
               layer: str | None = None) -> list[AnalysisRow]:
        """Rows of one quantity, sorted by checkpoint.

        Parameters
        ----------
        quantity : str
            "mi_gaussian", "euclidean", "delta_mi_ksg", "loss", ...
        client_a, client_b : str, optional
            Only the rows of this client (and pair); None: any.
        layer : str, optional
            Only the rows of this tensor ("" for the whole parameter vector); None: any.

        Returns
        -------
        list of dict
        """
        hits = [r for r in self._rows if r["quantity"] == quantity
                and (client_a is None or r["client_a"] == client_a) and (client_b is None or r["client_b"] == client_b)
                and (layer is None or r["layer"] == layer)]
        return sorted(hits, key=lambda r: r["checkpoint"])

    @property
    def sidecar(self) -> dict[str, Any]:
        """What :meth:`write` puts in the JSON sidecar: ``format_version``, ``settings``, the
        entries of `record` and ``provenance`` (and ``table``, the CSV's name, on write)."""
        return {"format_version": FORMAT_VERSION, "settings": self.settings, **self.record,
                "provenance": self.provenance}

    def record_with_dump(self) -> dict[str, Any] | None:
        """How the table was made, as a figure's title and axes read it
        (:func:`mianalysis.report.plots.figure_title`, :func:`mianalysis.report.plots.checkpoint_label`): the
        entries of :attr:`sidecar` and, while the dump its settings name (``settings["dump"]``)
        is readable, that dump's meta (task, init, shared streams; ``flower`` or ``federated``
        for a dump of rounds) under ``dump_meta``, with ``shared`` [] where the dump records
        none (such a dump shared nothing). None for a table without a sidecar (no settings,
        record or provenance); a dump that is gone leaves ``dump_meta`` out."""
        from ..dumps import MANIFEST

        if not (self.settings or self.record or self.provenance):
            return None
        record = self.sidecar
        try:
            meta = json.loads((Path(str(self.settings.get("dump", ""))) / MANIFEST).read_text())["meta"]
        except (OSError, ValueError, KeyError, TypeError):
            return record
        if isinstance(meta, dict):
            record["dump_meta"] = {"shared": [], **meta}
        return record

    def write(self, path: str | os.PathLike) -> None:
        """Write the rows as CSV (NaN as an empty field) to `path` and the settings,
        record and provenance to its sidecar (:func:`sidecar_path`), each through a new
        temporary file renamed into place (never written through a link found there)."""
        path = Path(path)
        self.write_rows(path)
        sidecar = sidecar_path(path)
        tmp = sidecar.with_name(sidecar.name + ".tmp")
        record = self.sidecar
        with new_file(tmp) as fh:
            fh.write(json.dumps({"format_version": record.pop("format_version"), "table": path.name, **record},
                                indent=1) + "\n")
        os.replace(tmp, sidecar)

    def write_rows(self, path: str | os.PathLike) -> None:
        """Write the rows alone as the CSV :meth:`write` writes (NaN as an empty field) to
        `path`, through a new temporary file renamed into place; a sidecar there is left as
        it is (for a table whose sidecar another writer made, such as an experiment's)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(str(path) + ".tmp")
        with new_file(tmp) as fh:
            writer = csv.DictWriter(fh, fieldnames=column_names())
            writer.writeheader()
            for row in self._rows:
                writer.writerow({k: ("" if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()})
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: str | os.PathLike) -> AnalysisTable:
        """Read a table that :meth:`write` (or :func:`mianalysis.analyze` with `out`) wrote,
        of any format version: numbers as floats and ints, the typed columns as str and
        bool (derived from the notes when the table predates them), settings, record and
        provenance from its sidecar (empty without one, or with one that is not JSON).

        Raises
        ------
        ValueError
            If `path` does not exist, is not an analysis table (a column is missing), holds
            a value a typed column cannot take, or its sidecar records a newer format.
        """
        path = Path(path)
        if not path.exists():
            raise ValueError(f"results table {path} does not exist")
        settings, provenance, record = _read_sidecar(path)
        rows = []
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            declared = schema.columns()
            missing = {c.name for c in declared if not c.optional} - set(reader.fieldnames or ())
            if missing:
                raise ValueError(f"{path} is not an analysis table: missing columns {sorted(missing)}")
            # A column the table lacks stays absent (complete_row makes it); one it has that
            # is not declared stays text.
            present = [c for c in declared if c.name in (reader.fieldnames or ())]
            for line, text in enumerate(reader, start=2):
                row: dict[str, object] = dict(text)
                for c in present:
                    try:
                        row[c.name] = c.parse(text[c.name])
                    except ValueError as exc:
                        raise ValueError(f"{path}, line {line}: {exc}") from None
                rows.append(row)
        return cls(rows, settings=settings, provenance=provenance, record=record)  # completes the rows


def _read_sidecar(path: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """(settings, provenance, record) from the sidecar of table `path`; empty where it has none
    or one that is not a JSON object. ValueError for a format newer than this version reads."""
    try:
        content = json.loads(sidecar_path(path).read_text())
    except (OSError, ValueError):
        return {}, [], {}
    if not isinstance(content, dict):
        return {}, [], {}
    if "format_version" not in content and isinstance(content.get("analysis"), dict):
        content = content["analysis"]  # an experiment's record around the table's sidecar
    version = content.get("format_version", 1)
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise ValueError(f"{path} is a table of format version {version} (its sidecar {sidecar_path(path)}); this "
                         f"version of mianalysis reads versions up to {FORMAT_VERSION}: upgrade mianalysis")
    settings = content.get("settings")
    provenance = content.get("provenance")
    record = {k: v for k, v in content.items() if k not in ("format_version", "table", "settings", "provenance")}
    return (settings if isinstance(settings, dict) else {},
            [p for p in provenance if isinstance(p, dict)] if isinstance(provenance, list) else [], record)
