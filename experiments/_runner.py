"""Shared command line of the experiment scripts: configurations -> run_experiment."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _results import WORK, figures_of, portable_sidecar

from mianalysis.report.experiment import TRENDS, finding, run_experiment, summary_table, trend_summary
from mianalysis.tasks import get_task


# The committed tables of these experiments were made with analyze's default of their time:
# a configuration without "estimators" keeps it, so that a rerun gives the same rows.
LEGACY_ESTIMATORS = ("gaussian", "ksg")


def main(task_name, configs, description, argv=None):
    """Run the configurations of `configs` (all but "quick", or "quick" alone with --quick)
    of the task `task_name` and print each one's summary; figures, tables and sidecars go to
    --out (default figures/SCRIPT/, the script named after the task), dumps to --work (default runs/), wherever the script is run from."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="one small configuration, under 2 minutes")
    parser.add_argument("--out", default=str(figures_of(task_name.replace("-", "_"))), help="figures and tables")
    parser.add_argument("--work", default=str(WORK), help="dumps (resumed when rerun)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--only", choices=sorted(configs), help="run just this configuration")
    args = parser.parse_args(argv)
    chosen = {k: v for k, v in configs.items() if (k == "quick") == args.quick}
    if args.only:
        chosen = {args.only: configs[args.only]}
    for name, cfg in chosen.items():
        full_name = f"{task_name.replace('-', '_')}_{name}"
        task = get_task(task_name, cfg.get("preset", "paper"), **cfg.get("settings", {}))
        start = time.perf_counter()
        rows = run_experiment(task, runs=cfg["runs"], out_dir=args.out, name=full_name, seed=cfg.get("seed", 0),
                              every=cfg.get("every", 1), init=cfg.get("init", "per-run"),
                              n_permutations=cfg.get("permutations", 0), progress=not args.no_progress,
                              dump_dir=Path(args.work) / full_name,
                              estimators=cfg.get("estimators", LEGACY_ESTIMATORS))
        portable_sidecar(Path(args.out) / f"{full_name}.csv")  # the dump as runs/..., not absolute
        print(f"\n== {full_name}: preset {cfg.get('preset', 'paper')}, {cfg['runs']} runs, "
              f"{time.perf_counter() - start:.0f} s ==")
        print(summary_table(rows))
        print(f"paper's finding (rising/growing from the {TRENDS}):", json.dumps(finding(rows, cfg.get("permutations", 0))))
        print(trend_summary(rows))
