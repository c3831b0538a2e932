"""Redraw the figures in figures/ (a folder per script) from the committed tables, without sampling or training.

    python experiments/replot.py

Draws, from each table and its record:

- ``signal_rnn_*`` and ``digits_lenet_*``: the MI and distance figures (mianalysis.report.plots),
  titled from the experiment's record, the table's sidecar ``NAME.csv.json`` (task, init, shared streams, k,
  permutations) and the table (runs, estimator variant);
- ``aggregator_trends.png`` from the four rules' tables (the accuracy is their
  ``test_accuracy`` rows), and ``aggregator_trends_global.png`` where its table exists; the
  same two of the committed quick run (``aggregator_trends_quick*``);
- ``fedgradnorm.png`` from ``fedgradnorm.csv`` and its sidecar;
- ``invariance.png`` from ``invariance.csv`` and its sidecar (final-round spread);
- ``fedavg_vs_fedsgd_accuracy.png`` only where ``fedavg_vs_fedsgd_curves.json`` exists (the
  accuracy curves are not in the table; runs before it was written must be redone), with the
  range over replicates where it holds each replicate's curve;
- ``sources_of_dependence.png`` and ``digits_lenet_paper.png`` from their summary tables
  (what their scripts' ``--replot`` draws), and ``digits_lenet_seeds.png`` from its table
  (``digits_lenet_movers*`` tables have no figure).

Other files named ``*_quick*``, and ``exact_dependence_curves*`` and ``gaussian_sgd_truth*``
(their scripts recompute them in seconds), are left alone.

Each figure is drawn by the function its own script draws it with after a run, from the
internal module the two share (``_aggregator_trends_figure.py``, ``_fedgradnorm_figure.py``,
``_invariance_figure.py``, ``_fedavg_vs_fedsgd_figure.py``, ``_sources_of_dependence_summary.py``,
``_digits_lenet_paper_figure.py``, ``_digits_lenet_seeds_figure.py``); no script is imported.
"""

import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the internal modules beside it, from any folder

import _aggregator_trends_figure as aggregator_trends  # noqa: E402
import _digits_lenet_paper_figure as digits_lenet_paper  # noqa: E402
import _digits_lenet_seeds_figure as digits_lenet_seeds  # noqa: E402
import _fedavg_vs_fedsgd_figure as fedavg_vs_fedsgd  # noqa: E402
import _fedgradnorm_figure as fedgradnorm  # noqa: E402
import _invariance_figure as invariance  # noqa: E402
import _sources_of_dependence_summary as sources_of_dependence  # noqa: E402
from _results import FIGURES, read_summary_table  # noqa: E402

from mianalysis.analysis import AnalysisTable, sidecar_path  # noqa: E402
from mianalysis.report.plots import save_figure  # noqa: E402

SKIP = ("_quick", "sources_of_dependence", "exact_dependence_curves", "gaussian_sgd_truth", "digits_lenet_paper",
        "digits_lenet_seeds", "digits_lenet_movers", "digits_lenet_paired")
CORE = ("signal_rnn_", "digits_lenet_")


def _csv_rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def replot_core(figures):
    """The MI and distance figures of every core experiment table with a record."""
    done = []
    for table in sorted(figures.glob("*/*.csv")):
        name = table.stem
        if not name.startswith(CORE) or any(s in name for s in SKIP):
            continue
        record_path = sidecar_path(table)
        record = json.loads(record_path.read_text()) if record_path.exists() else None
        rows = AnalysisTable.read(table)
        checkpoints = len({r["checkpoint"] for r in rows}) - 1
        n_params = record.get("n_params") if record else None
        title = f"{name}: {checkpoints} checkpoints after init" + (f", {n_params} parameters" if n_params else "")
        done.append(save_figure(rows, "mi", table.parent / f"{name}_mi.png", title=title, record=record))
        done.append(save_figure(rows, "distances", table.parent / f"{name}_distances.png", title=title, record=record))
    return done


def replot_aggregator_trends(figures):
    """``aggregator_trends.png`` and ``aggregator_trends_global.png``, and the same two of the
    committed quick run (``aggregator_trends_quick*``), from their tables."""
    done = []
    for name in ("aggregator_trends", "aggregator_trends_quick"):
        done += _replot_aggregator_trends(figures / "aggregator_trends", aggregator_trends, name)
    return done


def _replot_aggregator_trends(figures, at, name):
    tables = {rule: AnalysisTable.read(figures / f"{name}_{rule}.csv") for rule in at.RULES
              if (figures / f"{name}_{rule}.csv").exists()}
    if len(tables) != len(at.RULES) or not (figures / f"{name}.json").exists():
        return []
    meta = json.loads((figures / f"{name}.json").read_text())
    replicates = next(iter(tables.values()))[0]["n_runs"]
    path = figures / f"{name}.png"
    at.plot(tables, {rule: at.accuracy_from_table(rows) for rule, rows in tables.items()}, path,
            f"{replicates} replicate runs, 3 clients, last layer (330 parameters), "
            f"{meta.get('permutations', '?')} permutations")
    done = [path]
    global_table = figures / f"{name}_global.csv"
    if global_table.exists():
        rows = [{**r, "iteration": int(r["iteration"]), "value": float(r["value"])} for r in _csv_rows(global_table)]
        given = {rule: [r for r in rows if r["rule"] == rule] for rule in at.RULES}
        path = figures / f"{name}_global.png"
        at.plot_global(given, path, f"{replicates} replicate runs, 3 clients, output bias centred (9 dimensions), "
                                    "Gaussian estimator")
        done.append(path)
    return done


def replot_fedgradnorm(figures):
    figures = figures / "fedgradnorm"
    if not (figures / "fedgradnorm.csv").exists():
        return []
    meta = json.loads(sidecar_path(figures / "fedgradnorm.csv").read_text())
    path = figures / "fedgradnorm.png"
    fedgradnorm.plot(_csv_rows(figures / "fedgradnorm.csv"), path, meta)
    return [path]


def replot_invariance(figures):
    figures = figures / "invariance"
    if not (figures / "invariance.csv").exists():
        return []
    meta = json.loads(sidecar_path(figures / "invariance.csv").read_text())
    path = figures / "invariance.png"
    invariance.plot(_csv_rows(figures / "invariance.csv"), path, int(meta["rounds"]), results=meta.get("results"),
                    meta=meta)
    return [path]


def replot_fedavg_vs_fedsgd(figures):
    figures = figures / "fedavg_vs_fedsgd"
    curves_path = figures / "fedavg_vs_fedsgd_curves.json"
    if not curves_path.exists():
        return []
    entries = json.loads(curves_path.read_text())
    curves = {(c["partition"], c["model"], c["label"]): c["accuracy"] for c in entries}
    # each replicate's curve, where the run stored them (the range over replicates is drawn)
    replicates = {(c["partition"], c["model"], c["label"]): {r["replicate"]: r["accuracy"] for r in c["replicates"]}
                  for c in entries if c.get("replicates")}
    sidecar = sidecar_path(figures / "fedavg_vs_fedsgd.csv")
    plan = json.loads(sidecar.read_text()).get("plan") if sidecar.exists() else None
    path = figures / "fedavg_vs_fedsgd_accuracy.png"
    fedavg_vs_fedsgd.plot(curves, path, plan, replicates=replicates)
    return [path]


def replot_summaries(figures):
    """The figures of the summary tables (not analysis tables), as their scripts draw them."""
    done = []
    if (figures / "sources_of_dependence" / "sources_of_dependence.csv").exists():
        table = figures / "sources_of_dependence" / "sources_of_dependence.csv"
        summary = [r for cell in sources_of_dependence.read_summary(table).values() for r in cell]
        parts = [p for p in sources_of_dependence.PARTS if any(r["part"] == p for r in summary)]
        sources_of_dependence.figure(summary, figures / "sources_of_dependence" / "sources_of_dependence.png", parts, sources_of_dependence.PARTS)
        done.append(figures / "sources_of_dependence" / "sources_of_dependence.png")
    if (figures / "digits_lenet_paper" / "digits_lenet_paper.csv").exists():
        sidecar = sidecar_path(figures / "digits_lenet_paper" / "digits_lenet_paper.csv")
        meta = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        digits_lenet_paper.summary_figure(read_summary_table(figures / "digits_lenet_paper" / "digits_lenet_paper.csv"),
                                          figures / "digits_lenet_paper" / "digits_lenet_paper.png", meta.get("permutations"))
        done.append(figures / "digits_lenet_paper" / "digits_lenet_paper.png")
    if (figures / "digits_lenet_seeds" / "digits_lenet_seeds.csv").exists():
        digits_lenet_seeds.figure(digits_lenet_seeds.read_rows(figures / "digits_lenet_seeds" / "digits_lenet_seeds.csv"),
                                  figures / "digits_lenet_seeds" / "digits_lenet_seeds.png")
        done.append(figures / "digits_lenet_seeds" / "digits_lenet_seeds.png")
    return done


def main(figures=FIGURES):
    figures = Path(figures)
    done = []
    for step in (replot_core, replot_aggregator_trends, replot_fedgradnorm, replot_invariance,
                 replot_fedavg_vs_fedsgd, replot_summaries):
        done += step(figures)
    for path in done:
        print(f"wrote {path}")
    return done


if __name__ == "__main__":
    main()
