"""Where the experiment scripts write, and how: one place for the paths and the file formats.

Every path here comes from this file's own location, so a script finds the repository's
folders from whatever directory it is started in (``python experiments/x.py`` from the
root, ``python x.py`` from experiments/, or a test that loads the script by its path).

- ``FIGURES`` (figures/): the figures and the data they are drawn from, one folder per
  script (:func:`figures_of`: figures/SCRIPT/): ``NAME.png``, the table ``NAME.csv`` and its
  JSON sidecar ``NAME.csv.json`` (settings, times, provenance; the name
  :func:`mianalysis.analysis.sidecar_path` gives).
- ``PAGES`` (docs/results/tables/): the Markdown tables the scripts write, ``NAME.md``,
  which the documentation's results pages include (pymdownx.snippets in mkdocs.yml).
  A run whose ``--out`` is another folder writes its page there instead
  (:func:`pages_for`), so that a trial run never replaces a committed page.
- ``WORK`` (runs/, ignored by git): dumps and per-configuration work, resumed when rerun.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from mianalysis.analysis import sidecar_path

__all__ = ["ROOT", "FIGURES", "PAGES", "WORK", "figures_of", "carried_over_note", "carried_over_record", "pages_for",
           "portable_record", "portable_sidecar", "read_earlier", "read_sidecar", "read_summary_table",
           "repository_relative", "rows_by_design", "timed_rows", "write_atomic", "write_csv", "write_sidecar",
           "write_page"]

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"
PAGES = ROOT / "docs" / "results" / "tables"
WORK = ROOT / "runs"


def figures_of(script):
    """The folder of figures/ that holds what `script` writes (a script's path, e.g.
    ``__file__``, or its name): figures/SCRIPT/, so that the script behind a file is found
    in one look."""
    return FIGURES / Path(script).stem


def pages_for(out):
    """The folder of a script's Markdown page when its tables go to `out`: ``PAGES`` for
    figures/ or a script's folder in it, else `out` itself."""
    folder = Path(out).resolve()
    return PAGES if FIGURES.resolve() in (folder, folder.parent) else Path(out)


def write_atomic(path, text):
    """Write `text` to `path` through a temporary file and a rename: a reader sees the old
    file or the new one, never half of it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write(path, text, atomic):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if atomic:
        write_atomic(path, text)
    else:
        path.write_text(text)
    return path


def write_csv(rows, path, *, fieldnames=None, float_format=None, atomic=False):
    """Write a list of dicts as CSV (the csv module's dialect: ``\\r\\n`` line ends).

    `fieldnames` defaults to the first row's keys; with `float_format` (e.g. ``".6g"``)
    every float is written with it. Returns the path.
    """
    rows = list(rows)
    if not rows:
        raise ValueError(f"nothing to write to {path}")
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(fieldnames or rows[0]))
    writer.writeheader()
    if float_format:
        rows = [{k: (format(v, float_format) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    writer.writerows(rows)
    return _write(path, text.getvalue(), atomic)


def write_sidecar(table, record, *, atomic=False):
    """Write `record` as the JSON sidecar of the CSV `table` (``NAME.csv.json``, indented,
    ending in a newline; numbers NumPy returns are written as floats). Returns the path."""
    return _write(sidecar_path(table), json.dumps(record, indent=1, default=float) + "\n", atomic)


def repository_relative(record, root=ROOT):
    """`record` (JSON-like: dicts, lists, strings, numbers) with every string that names a
    path inside `root` (the repository) rewritten relative to it, e.g. ``runs/NAME`` for the
    dump the analysis settings record as an absolute path: a committed file must not name
    the machine it was made on."""
    prefix = str(Path(root).resolve()).rstrip(os.sep) + os.sep
    if isinstance(record, dict):
        return {k: repository_relative(v, root) for k, v in record.items()}
    if isinstance(record, list):
        return [repository_relative(v, root) for v in record]
    if isinstance(record, str) and record.startswith(prefix):
        return Path(record[len(prefix):]).as_posix()
    return record


def portable_record(record, root=ROOT):
    """`record` with :func:`repository_relative` paths, and every other absolute path (a
    scratch folder outside the repository) replaced by ``<outside the repository>/NAME``:
    what a committed file may say of where a run wrote."""
    record = repository_relative(record, root)
    if isinstance(record, dict):
        return {k: portable_record(v, root) for k, v in record.items()}
    if isinstance(record, list):
        return [portable_record(v, root) for v in record]
    if isinstance(record, str) and Path(record).is_absolute():
        return f"<outside the repository>/{Path(record).name}"
    return record


def portable_sidecar(table, root=ROOT):
    """Rewrite the sidecar of the CSV `table` (if it has one) with :func:`repository_relative`
    paths, the rest unchanged (same indentation). Returns the sidecar's path or None."""
    path = sidecar_path(table)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    portable = repository_relative(record, root)
    if portable != record:
        path.write_text(json.dumps(portable, indent=1) + "\n")
    return path


def read_sidecar(table):
    """The JSON sidecar of the CSV `table` as a dict ({} where it has none)."""
    path = sidecar_path(table)
    return json.loads(path.read_text()) if path.exists() else {}


def read_summary_table(path, columns=()):
    """The rows of a script's summary table (dicts of strings, as written), after checking
    that its header holds every name of `columns`.

    Raises
    ------
    ValueError
        One line naming the problem: the file cannot be read (missing, a folder, no
        permission), is not CSV text, or lacks some of `columns` (a table of another script).
    """
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            rows = list(reader)
    except OSError as err:
        raise ValueError(f"cannot read it ({err.strerror or err})") from None
    except (csv.Error, UnicodeDecodeError) as err:
        raise ValueError(f"not a CSV table ({err})") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise ValueError(f"missing columns {missing}: not a summary table of this script")
    return rows


def read_earlier(parser, option, path, columns=(), parse=None):
    """``(parse(rows), sidecar)`` of the earlier summary table `path` that a script's option
    `option` names (``--carry-over``, ``--replot``): its rows (:func:`read_summary_table`
    with `columns`) given to `parse` (default: the rows as read), and its sidecar
    (:func:`read_sidecar`). What every script reading an earlier table uses, before it
    writes anything.

    A table that cannot be read, is not a summary of the script (a column of `columns`
    missing) or that `parse` refuses (ValueError, or KeyError for a missing column) ends the
    script through ``parser.error`` (exit status 2) with one line naming the option, the
    path and the problem, never a traceback.
    """
    try:
        rows = read_summary_table(path, columns)
        parsed = rows if parse is None else parse(rows)
    except KeyError as err:
        parser.error(f"{option} {path}: missing column {err.args[0]!r}: not a summary table of this script")
    except ValueError as err:
        parser.error(f"{option} {path}: {err}")
    try:
        sidecar = read_sidecar(path)
    except (OSError, ValueError) as err:
        parser.error(f"{option} {path}: its sidecar {sidecar_path(path).name} cannot be read ({err})")
    if not isinstance(sidecar, dict):
        parser.error(f"{option} {path}: its sidecar {sidecar_path(path).name} is not a JSON object")
    return parsed, sidecar


def carried_over_note(cells):
    """The sentence a script's page ends with when `cells` (names) were read from an
    earlier summary table (``--carry-over``) instead of being rerun; "" for none."""
    if not cells:
        return ""
    return ("\n\nCells read from an earlier run of this script (`--carry-over`, its provenance in the sidecar), "
            "not rerun: " + ", ".join(cells) + ".")


def carried_over_record(table, cells, earlier):
    """The sidecar entry naming the `cells` copied from the summary table `table` (path),
    whose sidecar is `earlier`: its provenance and what it had itself carried over;
    {} for no cells."""
    if not cells:
        return {}
    return {"carried_over": {"from": Path(table).name, "cells": list(cells), "provenance": earlier.get("provenance"),
                             "carried_over": earlier.get("carried_over")}}


def write_page(out, name, text, *, atomic=False, beside=False):
    """Write the Markdown page ``NAME.md`` of a script whose tables go to `out` (into
    :func:`pages_for` `out`; with `beside`, into `out` itself, as a trial run's page that must
    not replace a committed one), ending in one newline. Returns the path."""
    folder = Path(out) if beside else pages_for(out)
    return _write(folder / f"{name}.md", text.rstrip("\n") + "\n", atomic)


def timed_rows(cells, *, width=45):
    """(rows, seconds): the rows of each ``(label, make_rows)`` of `cells` in turn
    (``make_rows()`` returns a list), with each cell's time in seconds under its label,
    printed as it finishes."""
    rows, seconds = [], {}
    for label, make_rows in cells:
        start = time.perf_counter()
        rows += make_rows()
        seconds[label] = round(time.perf_counter() - start, 1)
        print(f"{label:{width}s} {seconds[label]:7.1f} s", flush=True)
    return rows, seconds


def rows_by_design(designs, design_rows, runs, *, prefix, width=45):
    """(rows, seconds): the rows of `design_rows(design, runs, work)` for each design in turn,
    in a scratch folder `work` removed afterwards, with each cell's time in seconds (printed
    as it finishes).

    `runs` is one run count (the cells are the designs, named by themselves) or a sequence of
    them: then each design is run at every count in turn, design by design, and the cell
    ``(design, n)`` is named "design / n" in `seconds` and the printed line.
    """
    counts = [runs] if isinstance(runs, int) else list(runs)
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        cells = [(design if isinstance(runs, int) else f"{design} / {n}",
                  lambda design=design, n=n: design_rows(design, n, work)) for design in designs for n in counts]
        rows, seconds = timed_rows(cells, width=width)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows, seconds
