"""Re-derive the family-wise columns of the committed analysis tables from their stored p-values.

    python experiments/refamily_tables.py            # every figures/*/*.csv analysis table
    python experiments/refamily_tables.py --check    # exit 1 if any table's columns are stale

A table's ``p_adjusted`` and ``family_verdict`` are a function of its own rows (the steps'
``change_p``, the MI rows' ``p_value``) and of the correction it records
(:func:`mianalysis.analysis.inference.familywise.apply_familywise`). When that function changes (as
when steps out of a value exact by rule, the shared start, left every family), the tables
need no new analysis: this rewrites those two columns of each CSV in place, with the
correction and permutation counts its sidecar records (Holm over each pair's steps, the
analysis' default, where it records none). Nothing else in the CSV, and nothing in its
sidecar, is touched.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
from _results import FIGURES

from mianalysis.analysis import AnalysisTable, sidecar_path
from mianalysis.analysis.inference.familywise import apply_familywise
from mianalysis.analysis.table import COLUMNS


def analysis_tables(folder: Path) -> list[Path]:
    """The CSVs of `folder` and its folders (figures/SCRIPT/) that are analysis tables (the analysis' columns, in its order)."""
    out = []
    for path in sorted([*folder.glob("*.csv"), *folder.glob("*/*.csv")]):
        with path.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if header == list(COLUMNS):
            out.append(path)
    return out


def refamily(path: Path) -> tuple[AnalysisTable, int]:
    """The table at `path` with its family-wise columns derived again, and how many rows'
    ``family_verdict`` or ``p_adjusted`` differ from the stored ones."""
    table = AnalysisTable.read(path)
    sidecar = json.loads(sidecar_path(path).read_text()) if sidecar_path(path).exists() else {}
    recorded = table.settings.get("familywise") or {}
    permutations = table.settings.get("permutations", sidecar.get("permutations"))
    new = apply_familywise(table, method=recorded.get("method", "holm"), family=recorded.get("family", "pair"),
                           alpha=recorded.get("alpha"), n_permutations=permutations)
    changed = sum(1 for a, b in zip(table, new) if a["family_verdict"] != b["family_verdict"]
                  or not (a["p_adjusted"] == b["p_adjusted"] or (np.isnan(a["p_adjusted"]) and np.isnan(b["p_adjusted"]))))
    return new, changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(FIGURES), help="the folder of tables, and of its folders' (default figures/)")
    parser.add_argument("--check", action="store_true", help="only say which tables are stale; exit 1 if any")
    args = parser.parse_args(argv)
    stale = 0
    for path in analysis_tables(Path(args.out)):
        table, changed = refamily(path)
        print(f"{path.name}: {changed} rows' family-wise columns {'differ' if args.check else 'rewritten'}")
        if changed:
            stale += 1
            if not args.check:
                table.write_rows(path)  # the CSV alone: its sidecar stays as it is
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
