"""The toolkit's main job end to end: sample -> dump -> analyze -> table -> figures."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from .analysis import analyze, select, write_table
from .plots import save_figure


def run_experiment(task, *, runs, out_dir, name, seed=0, every=1, init="per-run", chunk_size=64,
                   permutations=0, k=3, progress=True, dump_dir=None):
    """Sample `runs` runs of `task`, analyse them and draw the MI and distance figures.

    Writes ``out_dir/NAME.csv`` (the analysis table), ``out_dir/NAME_mi.png`` (Figure 1/2
    analogue), ``out_dir/NAME_distances.png`` (Figure 3/4 analogue) and
    ``out_dir/NAME.json`` (settings, timings, and the provenance of this session and of
    the dump: versions, machine, command line, times). The dump goes to `dump_dir`
    (default ``out_dir/dumps/NAME``) and is resumed if it exists with the same settings.

    Returns
    -------
    rows : list of dict
        The analysis table.
    """
    from ._provenance import collect, utc_now
    from .sampling import ParameterSampler

    started = utc_now()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dump_dir = Path(dump_dir) if dump_dir else out_dir / "dumps" / name
    sampler = ParameterSampler(task, seed=seed, init=init, every=every, chunk_size=chunk_size, progress=progress)
    start = time.perf_counter()
    dump = sampler.sample(runs, dump_dir)
    sampled = time.perf_counter()
    rows = analyze(dump, k=k, permutations=permutations, random_state=seed, progress=progress)
    analysed = time.perf_counter()
    write_table(rows, out_dir / f"{name}.csv")
    title = (f"{task.name} ({len(dump.checkpoints) - 1} checkpoints after init, {runs} runs, "
             f"{dump.n_params} parameters)")
    save_figure(rows, "mi", out_dir / f"{name}_mi.png", title=title)
    save_figure(rows, "distances", out_dir / f"{name}_distances.png", title=title)
    record = {"task": task.name, "settings": task.settings, "runs": runs, "seed": seed, "every": every,
              "init": init, "permutations": permutations, "k": k, "n_params": dump.n_params,
              "checkpoints": dump.checkpoints, "sampling_seconds": round(sampled - start, 1),
              "analysis_seconds": round(analysed - sampled, 1),
              "provenance": [collect(started, finished=True)], "dump_provenance": dump.provenance}
    (out_dir / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    return rows


def _fmt(v, width=7, digits=3):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return " " * (width - 1) + "-"
    if isinstance(v, float) and math.isinf(v):
        return f"{'inf':>{width}}"
    return f"{v:>{width}.{digits}f}"


def summary_table(rows):
    """Text table per checkpoint and client pair: MI by each estimator with its null mean
    and p-value, and the three mean distances."""
    quantities = {r["quantity"] for r in rows}
    ests = [e for e in ("gaussian", "ksg") if f"mi_{e}" in quantities]
    metrics = [m for m in ("euclidean", "manhattan", "chebyshev") if m in quantities]
    head = f"{'iter':>5} {'pair':>6}"
    for e in ests:
        head += f" {'MI ' + e[:5]:>9} {'null':>7} {'p':>6}"
    for m in metrics:
        head += f" {m[:9]:>9}"
    lines = [head, "-" * len(head)]
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})
    checkpoints = sorted({(r["checkpoint"], r["iteration"]) for r in rows})
    for t, it in checkpoints:
        for a, b in pairs:
            line = f"{it:>5} {a + '-' + b:>6}"
            for e in ests:
                r = [x for x in select(rows, f"mi_{e}", a, b) if x["checkpoint"] == t][0]
                line += f" {_fmt(r['value'], 9)} {_fmt(r['null_mean'])} {_fmt(r['p_value'], 6)}"
            for m in metrics:
                r = [x for x in select(rows, m, a, b) if x["checkpoint"] == t][0]
                line += f" {_fmt(r['value'], 9, 4)}"
            lines.append(line)
    return "\n".join(lines)


def finding(rows):
    """Does the core paper's finding hold in this table? MI above its permutation null
    (p <= 0.05, or more than 3 null sd above the null mean when fewer permutations were
    run) at every checkpoint after the first, MI rising from the first to the last of
    those, and every distance growing. Returns a dict of booleans and a sentence."""
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})
    out = {}
    for e in ("gaussian", "ksg"):
        series = [[r for r in select(rows, f"mi_{e}", a, b) if r["iteration"] > 0] for a, b in pairs]
        if not series or not series[0]:
            continue
        above = all(_significant(r) for s in series for r in s)
        rising = all(s[-1]["value"] > s[0]["value"] for s in series)
        out[f"mi_{e}_above_null"] = above
        out[f"mi_{e}_rising"] = rising
    growing = all(select(rows, m, a, b)[-1]["value"] > select(rows, m, a, b)[1]["value"]
                  for m in ("euclidean", "manhattan", "chebyshev") for a, b in pairs
                  if len(select(rows, m, a, b)) > 1)
    out["distances_growing"] = growing
    return out


def _significant(row):
    if not np.isfinite(row["value"]):
        return True
    if np.isnan(row["null_mean"]):
        return False
    if row["p_value"] <= 0.05:
        return True
    return row["value"] > row["null_mean"] + 3 * max(row["null_std"], 1e-12)
