"""The analysis table's columns, declared once.

Each column is one field of :class:`AnalysisRow`, a :class:`~typing.TypedDict` whose fields
carry their :class:`Column` in :data:`~typing.Annotated` metadata: its Python type is what a
type checker sees (``row["value"]`` is a float), and the metadata holds its unit, meaning,
the value of a new row that does not set it and what a table written before the column
existed reads. :data:`SCHEMA` is that declaration as a tuple of :class:`Column`, in the
order of the CSV's header, and everything that handles rows reads it: the CSV writer and
reader (:class:`~mianalysis.analysis.table.AnalysisTable`), the analysis' rows
(:func:`new_row`) and the documentation's column table (:func:`render_markdown`). Adding a
column is one field here.

A missing float is ``numpy.nan`` itself (the one object), so that rows compare equal
(``==`` on dicts holds for a NaN that is the same object on both sides).
"""

import math
from dataclasses import dataclass, replace
from typing import Annotated, TypedDict, cast, get_type_hints

import numpy as np

__all__ = ["Column", "AnalysisRow", "SCHEMA", "columns", "column", "column_names", "new_row", "render_markdown",
           "INTERVALS", "BY_LAYER", "TYPED", "FAMILYWISE"]

# What added the columns that tables of format version 1 may lack, and those of format 2.
BY_LAYER = "`by`"
INTERVALS = "intervals"
TYPED = "typed columns"
FAMILYWISE = "family-wise inference"


@dataclass(frozen=True)
class Column:
    """One column of the analysis table.

    In :class:`AnalysisRow` a column is declared as ``name: Annotated[type, Column(...)]``:
    its `name` and `dtype` are then the field's (:data:`SCHEMA` fills them in).

    Parameters
    ----------
    name : str
        The column's name (the CSV header's).
    dtype : type
        ``int``, ``float``, ``str`` or ``bool``: the value in a row, and how the CSV's text
        is read (:meth:`parse`).
    unit : str
        The unit of its values ("" where it has none).
    meaning : str
        What it holds, in one or two sentences (the documentation's column table).
    default : object, optional
        Its value in a new row that does not set it (:func:`new_row`); None: every row
        sets it. A table written before the column existed reads this value too, unless
        `derived` says otherwise.
    format : int, default=1
        The table format version (the sidecar's ``format_version``) that has it.
    since : str, default=""
        What added it within that format (:data:`BY_LAYER`, :data:`INTERVALS`,
        :data:`TYPED`, :data:`FAMILYWISE`); "": every table of the format has it, and a
        table without it is not an analysis table.
    derived : str, default=""
        How a table without it gets its value when it is not `default`, in words (the code
        is :func:`mianalysis.analysis.table.complete_row`).
    choices : tuple of str, default=()
        The values a ``str`` column may take; empty: any.
    """

    name: str = ""
    dtype: type = object
    unit: str = ""
    meaning: str = ""
    default: object = None
    format: int = 1
    since: str = ""
    derived: str = ""
    choices: tuple[str, ...] = ()

    @property
    def optional(self) -> bool:
        """Whether a table may lack it (it came after the first tables of its format)."""
        return bool(self.since) or self.format > 1

    def parse(self, text: str | None) -> object:
        """The value of the CSV field `text`: an empty float field is NaN.

        Raises
        ------
        ValueError
            If `text` is not a value of the column (a message naming the column, the
            values it can take and `text`).
        """
        if self.dtype is float:
            try:
                return np.nan if text in ("", None) else float(text)
            except ValueError:
                raise ValueError(f"`{self.name}` must be a number or empty; got {text!r}") from None
        if self.dtype is int:
            try:
                return int(cast(str, text))
            except (TypeError, ValueError):
                raise ValueError(f"`{self.name}` must be an integer; got {text!r}") from None
        if self.dtype is bool:
            flag = {"true": True, "false": False}.get(str(text).lower())
            if flag is None:
                raise ValueError(f"`{self.name}` must be True or False; got {text!r}")
            return flag
        return self.check(text)

    def check(self, value: object) -> object:
        """`value` as the column holds it (a float, an int, a bool; a ``str`` column's value
        among its `choices`, where it has them).

        Raises
        ------
        ValueError
            If a ``str`` column with choices is given another value.
        """
        if self.dtype is float:
            return float(cast(float, value))
        if self.dtype is bool:
            return bool(value)
        if self.dtype is int:
            return int(cast(int, value))
        if self.choices and value not in self.choices:
            raise ValueError(f"`{self.name}` must be one of {list(self.choices)}; got {value!r}")
        return value


class AnalysisRow(TypedDict):
    """One row of an analysis table: a quantity of one client pair (or one client) at one
    checkpoint (and tensor). Every row has every field; a row of an older table gets those it
    lacks as their :class:`Column` says. The fields, in the CSV's order, are the table's
    columns (:data:`SCHEMA`; the documentation's column table is :func:`render_markdown`)."""

    checkpoint: Annotated[int, Column(meaning="Index of the checkpoint in the dump (0, 1, ...).")]
    iteration: Annotated[int, Column(unit="iterations (rounds)", meaning="Training iteration of the checkpoint "
                                     "(the round, for a federated dump).")]
    client_a: Annotated[str, Column(meaning="The first client of the pair, or the client of a per-client row.")]
    client_b: Annotated[str, Column(meaning="The second client of the pair; empty on a per-client row (a recorded "
                                    "metric such as `loss`, `nongaussian_share`).")]
    quantity: Annotated[str, Column(meaning="What the row measures: `mi_NAME` (an MI estimator), `mi_exact`, a "
                                    "distance (`euclidean`, `manhattan`, `chebyshev`), `cosine_update`, a recorded "
                                    "metric, a diagnostic, or `delta_QUANTITY` (its change since the checkpoint "
                                    "before).")]
    value: Annotated[float, Column(unit="bits (MI); the quantity's own otherwise",
                                   meaning="The estimate: the MI, the mean over runs of a distance or metric, or a "
                                           "change; NaN where no estimate was made, inf for identical samples.")]
    spread: Annotated[float, Column(unit="as `value`", meaning="The sd over runs of a distance or metric; NaN "
                                    "otherwise.", default=np.nan)]
    null_mean: Annotated[float, Column(unit="bits", meaning="Mean of the MI's null (shuffled pairings of the runs, "
                                       "or the analytic null); NaN without a null.", default=np.nan)]
    null_std: Annotated[float, Column(unit="bits", meaning="Sd of the MI's null; NaN without a null.",
                                      default=np.nan)]
    p_value: Annotated[float, Column(meaning="P-value of the MI against its null; NaN without a null.",
                                     default=np.nan)]
    n_runs: Annotated[int, Column(unit="runs", meaning="The runs the row was computed from.")]
    note: Annotated[str, Column(meaning="What the row rests on, in words: shrinkage, dropped parameters, the "
                                "auto choice, the calibrated regime, an incomplete dump.", default="")]
    layer: Annotated[str, Column(meaning="The tensor of the row with `by=\"layer\"`; empty for the whole parameter "
                                 "vector.", default="", since=BY_LAYER)]
    ci_low: Annotated[float, Column(unit="as `value`", meaning="Lower end of the row's confidence interval (level "
                                    "`settings[\"ci_level\"]`); NaN without one.", default=np.nan, since=INTERVALS)]
    ci_high: Annotated[float, Column(unit="as `value`", meaning="Upper end of the row's confidence interval; NaN "
                                     "without one.", default=np.nan, since=INTERVALS)]
    verdict: Annotated[str, Column(meaning="A change row's verdict from its interval: \"rising\", \"falling\", \"no "
                                   "detectable change\" or \"not made: ...\"; empty on other rows.", default="",
                                   since=INTERVALS)]
    estimate_kind: Annotated[str, Column(
        meaning="\"plain\" (the estimator as calibrated); \"shrinkage\" (a Gaussian log-determinant estimate of a "
                "Ledoit-Wolf shrunk covariance: fewer runs than twice the joint dimension, or a singular covariance; "
                "also a change from or to one); \"bound\" (a lower bound on the MI, not an estimate of it).",
        default="plain", format=2, since=TYPED, derived="from the note (the registry says which estimators give "
                                                        "bounds)",
        choices=("plain", "shrinkage", "bound"))]
    outside_calibration: Annotated[bool, Column(
        meaning="The estimate lies outside the regime where its estimator was calibrated against known MI "
                "(`mianalysis.analysis.inference.regime`), or KSG's samples are tied.",
        default=False, format=2, since=TYPED, derived="from the note")]
    null_method: Annotated[str, Column(meaning="How the null was made.", default="none", format=2, since=TYPED,
                                       derived="from the note and `p_value`",
                                       choices=("none", "permutation", "analytic", "moments"))]
    change_se: Annotated[float, Column(unit="as `value`", meaning="A change row's standard error, from the law of "
                                       "its interval; NaN on other rows.", default=np.nan, format=2,
                                       since=FAMILYWISE, derived="from the interval and the sidecar's `ci_level`")]
    change_p: Annotated[float, Column(meaning="A change row's two-sided p-value of no change; NaN on other rows.",
                                      default=np.nan, format=2, since=FAMILYWISE,
                                      derived="from the interval and the sidecar's `ci_level`")]
    p_adjusted: Annotated[float, Column(meaning="A change row's `change_p`, or an MI row's `p_value`, adjusted over "
                                        "its family (`familywise`, `family`); NaN on other rows.", default=np.nan,
                                        format=2, since=FAMILYWISE)]
    family_verdict: Annotated[str, Column(meaning="The verdict from `p_adjusted`: \"rising\", \"falling\", \"no "
                                          "detectable change\", \"above null\", \"not above null\" or \"not made: "
                                          "...\"; empty on other rows.", default="", format=2, since=FAMILYWISE)]


def _declared() -> tuple[Column, ...]:
    hints = get_type_hints(AnalysisRow, include_extras=True)
    return tuple(replace(hint.__metadata__[0], name=name, dtype=hint.__origin__) for name, hint in hints.items())


#: The table's columns, in the CSV's order: the fields of :class:`AnalysisRow`.
SCHEMA = _declared()


def columns() -> tuple[Column, ...]:
    """The table's columns (:data:`SCHEMA`, read at each call)."""
    return SCHEMA


def column(name: str) -> Column:
    """The column called `name`.

    Raises
    ------
    KeyError
        If the table has no such column.
    """
    for c in columns():
        if c.name == name:
            return c
    raise KeyError(f"the analysis table has no column {name!r}")


def column_names(*, format: int | None = None, since: str | None = None) -> tuple[str, ...]:
    """The names of the columns, in the CSV's order; only those of format version `format`
    and added by `since` where given.

    Examples
    --------
    >>> from mianalysis.analysis.schema import TYPED, column_names
    >>> column_names(since=TYPED)
    ('estimate_kind', 'outside_calibration', 'null_method')
    """
    return tuple(c.name for c in columns()
                 if (format is None or c.format == format) and (since is None or c.since == since))


def new_row(**values: object) -> AnalysisRow:
    """A row with every column: `values`, each as its column holds it (:meth:`Column.check`),
    and each column's default where `values` has none.

    Raises
    ------
    ValueError
        If `values` names a column the table does not have, lacks a column that has no
        default, or holds a value a column cannot take.

    Examples
    --------
    >>> from mianalysis.analysis.schema import new_row
    >>> row = new_row(checkpoint=0, iteration=0, client_a="a", client_b="b", quantity="euclidean", value=1,
    ...               n_runs=10)
    >>> row["value"], row["estimate_kind"], row["ci_low"]
    (1.0, 'plain', nan)
    """
    declared = columns()
    unknown = set(values) - {c.name for c in declared}
    if unknown:
        raise ValueError(f"the analysis table has no columns {sorted(unknown)}")
    missing = [c.name for c in declared if c.default is None and c.name not in values]
    if missing:
        raise ValueError(f"a row needs {missing}")
    return cast(AnalysisRow, {c.name: c.check(values[c.name]) if c.name in values else c.default for c in declared})


def _shown(value: object) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return f"`{value!r}`" if isinstance(value, str) and value else "empty" if value == "" else f"`{value}`"


def render_markdown() -> str:
    """The columns as a Markdown table (the documentation's column table): name, type,
    unit, meaning (with a string column's values), and which tables have it: every table,
    or those from a format version and feature on, with what an older table reads."""
    lines = ["| Column | Type | Unit | Meaning | Older tables |", "| --- | --- | --- | --- | --- |"]
    for c in columns():
        meaning = c.meaning + (f" One of {', '.join(f'`{v}`' for v in c.choices)}." if c.choices else "")
        if not c.optional:
            older = "every table has it"
        else:
            added = f"with {c.since} " if c.since else ""
            older = f"added {added}in format {c.format}; older tables: {c.derived or _shown(c.default)}"
        cells = [f"`{c.name}`", c.dtype.__name__, c.unit, meaning, older]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
