"""The studies' tables: a declared schema per study and one writer, a CSV file and its JSON sidecar.

The analysis table has its own schema (:mod:`mianalysis.analysis.schema`) and class
(:class:`~mianalysis.analysis.table.AnalysisTable`); every other table the package writes is
a study's: headroom (:data:`mianalysis.analysis.studies.headroom.HEADROOM_TABLE`), the
dependence given the global model
(:data:`mianalysis.analysis.studies.global_dependence.DEPENDENCE_TABLE`), the additive
check (:data:`mianalysis.analysis.studies.additive_table.ADDITIVE_TABLE`) and a federated
run's history (:data:`mianalysis.federated.recording.HISTORY_TABLE`). Each declares its
rows once, as a :class:`~typing.TypedDict` whose fields carry their
:class:`~mianalysis.analysis.schema.Column` (type, unit, meaning; a column with a
``default`` may be absent from a table), and a :class:`StudySchema` names it and its format
version. :class:`StudyTable` writes any of them the same way: the CSV (columns in the
declared order, NaN as ``nan``) and the sidecar ``T.csv.json`` (:func:`sidecar_path`) with
the table's format and format version, its columns and their units, the settings that
made it, at what level its intervals hold (a schema with :class:`IntervalLevel`: each
interval at the table's level alone, and all of them together by Bonferroni), what else
its writer records and the session's provenance (:func:`mianalysis.provenance.collect`),
each file through a new temporary file renamed into place. :meth:`StudyTable.read` reads
one back, typed by the schema.

Examples
--------
>>> import math
>>> from typing import Annotated, TypedDict
>>> from mianalysis.analysis.schema import Column
>>> from mianalysis.analysis.study_table import StudySchema, StudyTable
>>> class SpeedRow(TypedDict):
...     run: Annotated[int, Column(meaning="The run.")]
...     speed: Annotated[float, Column(unit="m/s", meaning="How fast it went.")]
>>> SPEED = StudySchema("speed", SpeedRow, 1, "How fast each run went.")
>>> table = StudyTable(SPEED, [{"run": 0, "speed": 1.5}, {"run": 1, "speed": math.nan}], settings={"runs": 2})
>>> [c.name for c in SPEED.columns], table.sidecar["units"]
(['run', 'speed'], {'speed': 'm/s'})
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, get_type_hints, overload

import numpy as np

from .._internal.io import replaced, write_json
from .schema import Column
from .table import sidecar_path

__all__ = ["StudySchema", "StudyTable", "IntervalLevel", "declared_columns", "sidecar_path"]


def declared_columns(row_type: type) -> tuple[Column, ...]:
    """The columns a row :class:`~typing.TypedDict` declares: each field's
    :class:`~mianalysis.analysis.schema.Column` (its ``Annotated`` metadata) with the field's
    name and type, in the fields' order.

    Raises
    ------
    TypeError
        If a field carries no Column.
    """
    out = []
    for name, hint in get_type_hints(row_type, include_extras=True).items():
        meta = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Column)]
        if not meta:
            raise TypeError(f"{row_type.__name__}.{name} must be declared as Annotated[type, Column(...)]")
        out.append(replace(meta[0], name=name, dtype=hint.__origin__))
    return tuple(out)


@dataclass(frozen=True)
class IntervalLevel:
    """Where a study table's confidence intervals are, and the setting that holds their level.

    Every interval of such a table holds at that level for its own row alone: none is
    widened over the table's rows. The sidecar's ``intervals`` (:attr:`StudyTable.sidecar`)
    says so, with how many intervals the table has and the level at which all of them hold
    together by Bonferroni's inequality, ``max(0, 1 - m (1 - level))`` for ``m`` intervals
    (``simultaneous_level``), and `family`, what the table states family-wise instead.

    Parameters
    ----------
    level : str
        The entry of the table's settings that holds the intervals' level ("ci_level").
    columns : tuple of (str, str)
        The (lower end, upper end) columns of each interval of a row.
    family : str
        What the table states over several rows at once (its family-wise statement, such
        as verdicts widened over rows or p-values adjusted over them), or that it states
        nothing so, in words.

    Examples
    --------
    >>> from mianalysis.analysis.study_table import IntervalLevel
    >>> IntervalLevel("ci_level", (("low", "high"),)).describe([{"low": 0.1, "high": 0.3}] * 4, {"ci_level": 0.95})
    {'level': 0.95, 'holds': 'per row', 'intervals': 4, 'simultaneous_level': 0.8, 'family': ''}
    """

    level: str
    columns: tuple[tuple[str, str], ...]
    family: str = ""

    def describe(self, rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
        """The sidecar's ``intervals`` of a table of `rows` made with `settings`: ``level``
        (None where `settings` lack it), ``holds`` ("per row"), ``intervals`` (the rows'
        intervals with both ends finite; one row's equal intervals, such as a rule's MSE
        interval and its fit-corrected one where fitting costs nothing, count once),
        ``simultaneous_level`` (Bonferroni; None without a level) and ``family``."""
        level = settings.get(self.level)
        level = float(level) if isinstance(level, (int, float)) and 0 < level < 1 else None
        m = 0
        for row in rows:
            ends = {(_number(row.get(low)), _number(row.get(high))) for low, high in self.columns}
            m += sum(1 for low, high in ends if np.isfinite(low) and np.isfinite(high))
        joint = None if level is None else round(max(0.0, 1 - m * (1 - level)), 12)
        return {"level": level, "holds": "per row", "intervals": m, "simultaneous_level": joint,
                "family": self.family}


def _number(value: object) -> float:
    """`value` as a float; NaN where it is none (None, text that is no number)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return np.nan


@dataclass(frozen=True)
class StudySchema:
    """A study table's declaration: its name, rows, format version and what it holds.

    Parameters
    ----------
    name : str
        The study ("headroom"); the sidecar's ``format`` is "mianalysis NAME table".
    row_type : TypedDict type
        Its rows: a field per column, ``name: Annotated[type, Column(unit=..., meaning=...)]``,
        in the CSV's order. A column with a ``default`` may be absent from a table (a table
        written before it existed, or one whose rows never have it); one without must be in
        every table.
    format_version : int
        The sidecar's ``format_version``: raised when a column changes meaning or a
        required one is added; a reader refuses a newer version than its schema's.
    description : str
        What a row is, in one sentence.
    intervals : IntervalLevel, optional
        The table's confidence intervals and the setting of their level; the sidecar then
        says at what level they hold (``intervals``). None: the table has none.

    Attributes
    ----------
    columns : tuple of Column
        The declared columns, in the CSV's order (:func:`declared_columns`).
    """

    name: str
    row_type: type
    format_version: int
    description: str
    intervals: IntervalLevel | None = None
    columns: tuple[Column, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", declared_columns(self.row_type))

    @property
    def format(self) -> str:
        """The sidecar's ``format``: "mianalysis NAME table"."""
        return f"mianalysis {self.name} table"

    @property
    def required(self) -> tuple[str, ...]:
        """The columns every table has (those without a default)."""
        return tuple(c.name for c in self.columns if c.default is None)

    def column(self, name: str) -> Column:
        """The column called `name`; KeyError naming the table where it has none."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"the {self.name} table has no column {name!r}")

    def check_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """The columns of `rows`, in the declared order, after checking every value.

        Raises
        ------
        ValueError
            If `rows` is empty, a row holds a column the table does not declare, lacks one
            that another row (or the schema) requires, or holds a value its column cannot take.
        """
        if not rows:
            raise ValueError(f"the {self.name} table has no rows: nothing to write")
        unknown = sorted({k for r in rows for k in r} - {c.name for c in self.columns})
        if unknown:
            raise ValueError(f"the {self.name} table has no columns {unknown} (its columns: "
                             f"{[c.name for c in self.columns]})")
        present = [c for c in self.columns if c.name in rows[0] or c.default is None]
        for i, row in enumerate(rows):
            missing = [c.name for c in present if c.name not in row]
            if missing:
                raise ValueError(f"row {i} of the {self.name} table lacks columns {missing}")
            for c in present:
                try:
                    c.check(row[c.name])
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"row {i} of the {self.name} table: `{c.name}` cannot hold "
                                     f"{row[c.name]!r} ({exc})") from None
        return [c.name for c in present]


class StudyTable(Sequence[dict[str, Any]]):
    """A study's table: its rows, the settings that made them, what its writer records and
    the provenance, on disk as CSV and a JSON sidecar.

    A sequence of row dicts (``len``, indexing, iteration), so code written for a list of
    rows reads it unchanged; two tables are equal when their schemas' names and their rows are.

    Parameters
    ----------
    schema : StudySchema
    rows : iterable of dict
        The rows, with columns of `schema` (checked on :meth:`write`).
    settings : dict, optional
        What made the rows (the study's arguments).
    record : dict, optional
        Further entries of the sidecar (what was measured, verdicts printed).
    provenance : dict, optional
        The session's provenance (:func:`mianalysis.provenance.collect`); collected when
        the table is written if not given.

    Attributes
    ----------
    schema : StudySchema
    rows : list of dict
    settings, record : dict
    provenance : dict or None
    """

    def __init__(self, schema: StudySchema, rows: Iterable[Mapping[str, Any]] = (), *,
                 settings: Mapping[str, Any] | None = None, record: Mapping[str, Any] | None = None,
                 provenance: Mapping[str, Any] | None = None) -> None:
        self.schema = schema
        self.rows: list[dict[str, Any]] = [dict(r) for r in rows]
        self.settings: dict[str, Any] = dict(settings or {})
        self.record: dict[str, Any] = dict(record or {})
        self.provenance: dict[str, Any] | None = None if provenance is None else dict(provenance)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StudyTable):
            return self.schema.name == other.schema.name and self.rows == other.rows
        if isinstance(other, list):
            return self.rows == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by its rows

    def __repr__(self) -> str:
        return f"StudyTable({self.schema.name!r}, {len(self.rows)} rows)"

    @property
    def sidecar(self) -> dict[str, Any]:
        """What :meth:`write` puts in the sidecar: ``format``, ``format_version``,
        ``columns`` (those of the rows, in order), ``units`` (of the columns that have one),
        ``settings``, ``intervals`` (where the schema has :class:`IntervalLevel`: at what
        level the intervals hold, :meth:`IntervalLevel.describe`), the entries of `record`,
        and ``provenance`` (``table``, the CSV's name, is added on write)."""
        names = self.schema.check_rows(self.rows)
        units = {n: self.schema.column(n).unit for n in names if self.schema.column(n).unit}
        intervals = {} if self.schema.intervals is None else \
            {"intervals": self.schema.intervals.describe(self.rows, self.settings)}
        return {"format": self.schema.format, "format_version": self.schema.format_version, "columns": names,
                "units": units, "settings": self.settings, **intervals, **self.record, "provenance": self.provenance}

    def write(self, path: str | os.PathLike) -> None:
        """Write the rows as CSV to `path` (NaN as ``nan``) and :attr:`sidecar` to
        :func:`sidecar_path` of it, each through a new temporary file renamed into place
        (a link found there is replaced, never written through).

        Raises
        ------
        ValueError
            For rows the schema refuses (:meth:`StudySchema.check_rows`); nothing is written then.
        """
        from ..provenance import collect

        path = Path(path)
        record = self.sidecar  # checks the rows before anything is written
        if record["provenance"] is None:
            record["provenance"] = collect(finished=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        with replaced(path) as fh:
            writer = csv.DictWriter(fh, fieldnames=record["columns"])
            writer.writeheader()
            writer.writerows(self.rows)
        write_json(sidecar_path(path), {"format": record.pop("format"), "format_version": record.pop("format_version"),
                                        "table": path.name, **record})

    @classmethod
    def read(cls, path: str | os.PathLike, schema: StudySchema) -> StudyTable:
        """Read a table of `schema` that :meth:`write` wrote (or one written before the
        study had a sidecar: then settings and record are empty and provenance None):
        each declared column parsed to its type (``nan`` and empty float fields as NaN),
        columns it does not declare kept as text.

        Raises
        ------
        ValueError
            If `path` does not exist, lacks a column every table of `schema` has, holds a
            value a column cannot take, or its sidecar is of another table or of a newer
            format version than `schema`'s.
        """
        path = Path(path)
        if not path.exists():
            raise ValueError(f"{schema.name} table {path} does not exist")
        content = _read_sidecar(path, schema)
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            names = reader.fieldnames or []
            missing = [n for n in schema.required if n not in names]
            if missing:
                raise ValueError(f"{path} is not a {schema.name} table: missing columns {missing}")
            present = [c for c in schema.columns if c.name in names]
            rows = []
            for line, text in enumerate(reader, start=2):
                row: dict[str, Any] = dict(text)
                for c in present:
                    try:
                        row[c.name] = _parse(c, text[c.name])
                    except ValueError as exc:
                        raise ValueError(f"{path}, line {line}: {exc}") from None
                rows.append(row)
        record = {k: v for k, v in content.items()
                  if k not in ("format", "format_version", "table", "columns", "units", "settings", "intervals",
                               "provenance")}
        provenance = content.get("provenance")
        return cls(schema, rows, settings=content.get("settings") or {}, record=record,
                   provenance=provenance if isinstance(provenance, dict) else None)


def _parse(column: Column, text: str | None) -> object:
    """`column`'s value of the CSV field `text` (:meth:`~mianalysis.analysis.schema.Column.parse`;
    a float field ``nan``, as :meth:`StudyTable.write` writes NaN, is ``numpy.nan`` itself)."""
    if column.dtype is float and text is not None and text.strip().lower() == "nan":
        return np.nan
    return column.parse(text)


def _read_sidecar(path: str | os.PathLike, schema: StudySchema) -> dict[str, Any]:
    """The sidecar of table `path` as a dict ({} where there is none, or it is not a JSON
    object); ValueError for one of another table or of a newer format version."""
    try:
        content = json.loads(sidecar_path(path).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(content, dict):
        return {}
    found = content.get("format", schema.format)
    if found != schema.format:
        raise ValueError(f"{path} is a {found!r} (its sidecar {sidecar_path(path)}), not a {schema.format!r}")
    version = content.get("format_version", 1)
    if isinstance(version, int) and version > schema.format_version:
        raise ValueError(f"{path} is a {schema.name} table of format version {version} (its sidecar "
                         f"{sidecar_path(path)}); this version of mianalysis reads versions up to "
                         f"{schema.format_version}: upgrade mianalysis")
    return content
