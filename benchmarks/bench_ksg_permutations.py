"""A 100-shuffle KSG permutation test against one KSG estimate, at weak and strong dependence.

X ~ N(0, I_d), Y = 0.5 X + s E coordinate by coordinate (n samples, d features per side as in
the other benchmarks' "n x d"), k = 3, algorithm 1, float64, and two dependences:

* ``weak``: s = sqrt(0.75): correlation 0.5 per coordinate, Y on X's scale (the data of the
  other KSG benchmarks, ``bench_estimators.data``);
* ``strong``: s = 0.1: correlation 0.98, Y on half X's scale (issue 55's "y = 0.5 x +
  noise"). A shuffle makes the pairs independent at either strength, but here the joint
  neighbours are X's and every sample's Y count lies far beyond its Y list.

For each size n x d and dependence:

* ``test_over_single``: ``--repeats`` interleaved runs of ``ksg_mi(x, y)`` (the defaults: the
  distance cache where it fits) and ``mi_permutation_test(x, y, n_permutations=P)`` as a user
  calls them; the median of the per-run ratios (each test over the single estimate just
  before it), in wall seconds and in the process's CPU seconds (all threads). The machine has
  2 cores that other jobs may share: each ratio compares two runs made under about the same
  load (the load average is recorded), and the CPU ratio does not count the time a thread
  waits for a core. OpenMP threads sleep when idle (``OMP_WAIT_POLICY=PASSIVE``, as in the
  tests), so CPU seconds count work, not spinning;
* ``stages``: the test's parts timed after (on the same data, no noise; medians of
  ``--stage-repeats`` runs, wall and CPU): both distance matrices as their upper-triangle
  tiles, the neighbour lists of both, and the P + 1 pairings (with how many samples per
  pairing were counted in the passes that hold matrix rows in cache, and from full rows),
  each also as a share of the median single estimate (``bound``);
* ``bit_identical``: the neighbour-list counts equal the brute-force pass over full rows on a
  few pairings (skipped with ``--no-brute``: it needs the two full matrices).

``--ratio-only --record-as before`` measures only the interleaved ratios, through the public
API, so the same command times an older version of the package (first on the import path:
the "before" entry's ``package``) and records it under "before".

Writes (or updates, by size and dependence) ``--out`` (default
benchmarks/results/ksg_permutations.json), with a "summary" of both entries.

    python benchmarks/bench_ksg_permutations.py              # 10000x200 and 10000x100, weak and strong
    python benchmarks/bench_ksg_permutations.py --sizes 10000x200 --dependence weak --repeats 3
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when libgomp loads: before numba

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

from mianalysis import ksg_mi, mi_permutation_test  # noqa: E402

OUT = Path(__file__).parent / "results" / "ksg_permutations.json"
NOISE = {"weak": float(np.sqrt(0.75)), "strong": 0.1}
TARGET = 1.5  # issue 55: a 100-shuffle test for at most 1.5 single estimates
BRUTE_PAIRINGS = 3  # pairings checked against the brute-force pass


def timed(function):
    """(result, wall seconds, CPU seconds of the process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def data(n, d, dependence, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    return x, 0.5 * x + NOISE[dependence] * rng.standard_normal((n, d))


def load():
    return [round(v, 2) for v in os.getloadavg()]


def median(values, places=2):
    return round(float(np.median(values)), places)


def ratios(x, y, permutations, repeats):
    """The interleaved single-estimate and test runs, their medians and the medians of the
    per-run ratios, wall and CPU; and the single estimate's unrounded medians (wall, CPU)."""
    row = {"load_average_before": load()}
    runs = {"single": [], "single_cpu": [], "test": [], "test_cpu": []}
    for _ in range(repeats):
        _, wall, cpu = timed(lambda: ksg_mi(x, y, random_state=0))
        runs["single"].append(wall)
        runs["single_cpu"].append(cpu)
        res, wall, cpu = timed(lambda: mi_permutation_test(x, y, n_permutations=permutations, random_state=0))
        runs["test"].append(wall)
        runs["test_cpu"].append(cpu)
    row["load_average_after_ratio"] = load()
    for name in ("single", "test"):
        row[f"{name}_seconds"] = median(runs[name])
        row[f"{name}_cpu_seconds"] = median(runs[f"{name}_cpu"])
    wall_ratios = [round(t / s, 2) for t, s in zip(runs["test"], runs["single"])]
    cpu_ratios = [round(t / s, 2) for t, s in zip(runs["test_cpu"], runs["single_cpu"])]
    row["test_over_single"] = median(wall_ratios)
    row["test_over_single_cpu"] = median(cpu_ratios)
    row["test_over_single_runs"] = wall_ratios
    row["test_over_single_cpu_runs"] = cpu_ratios
    row["target"] = TARGET
    row["target_met"] = bool(row["test_over_single"] <= TARGET)
    row["target_met_cpu"] = bool(row["test_over_single_cpu"] <= TARGET)
    row["estimate_bits"], row["null_mean_bits"], row["p_value"] = res.estimate, res.null_mean, res.p_value
    return row, (float(np.median(runs["single"])), float(np.median(runs["single_cpu"])))


def stages(x, y, permutations, stage_repeats, brute, single, single_cpu):
    """The test's parts on the same data (no tie-breaking noise: the costs are the same), medians
    of `stage_repeats` runs, and the check against the brute-force pass."""
    # The stages as mianalysis.estimators.ksg composes them (its module namespace, not its API).
    from mianalysis.estimators.ksg import (distance_tiles, ksg_estimates_from_distances, ksg_from_counts,
                                           listed_counts, marginal_distances, neighbour_lists)

    n = x.shape[0]
    rng = np.random.default_rng(0)
    perms = [np.arange(n)] + [rng.permutation(n) for _ in range(permutations)]
    times = []
    for _ in range(stage_repeats):
        (tiles_x, tiles_y), *tiles = timed(lambda: distance_tiles(x, y))
        lists, *lists_time = timed(lambda: (neighbour_lists(tiles_x, 3, n), neighbour_lists(tiles_y, 3, n)))
        stats = {}
        listed, *pairings = timed(lambda: list(listed_counts(tiles_x, tiles_y, n, perms, 3, 1, lists=lists,
                                                             stats=stats)))
        del tiles_x, tiles_y, lists
        times.append(tiles + lists_time + pairings)
    tiles, tiles_cpu, lists_time, lists_cpu, pairings, pairings_cpu = (float(np.median(v)) for v in np.transpose(times))
    out = {"stages": {
        "distance_tiles_seconds": round(tiles, 2), "distance_tiles_cpu_seconds": round(tiles_cpu, 2),
        "lists_seconds": round(lists_time, 2), "lists_cpu_seconds": round(lists_cpu, 2),
        "pairings_seconds": round(pairings, 2), "pairings_cpu_seconds": round(pairings_cpu, 2),
        "hot_row_samples_per_pairing": float(stats["looked_up"][1:].mean()),
        "full_row_samples_per_pairing": float(stats["full_rows"][1:].mean()),
        "load_average_after": load(),
    }}
    out["bound"] = {
        "distances_over_single": round(tiles / single, 2), "lists_over_single": round(lists_time / single, 2),
        "pairings_over_single": round(pairings / single, 2),
        "stages_over_single": round((tiles + lists_time + pairings) / single, 2),
        "distances_over_single_cpu": round(tiles_cpu / single_cpu, 2),
        "lists_over_single_cpu": round(lists_cpu / single_cpu, 2),
        "pairings_over_single_cpu": round(pairings_cpu / single_cpu, 2),
        "stages_over_single_cpu": round((tiles_cpu + lists_cpu + pairings_cpu) / single_cpu, 2),
    }
    if brute:
        dx, dy = marginal_distances(x), marginal_distances(y)
        counts = ksg_estimates_from_distances(dx, dy, perms[1:BRUTE_PAIRINGS], 3, 1, method="brute")
        ours = [ksg_from_counts(nx, ny, 3, 1) for nx, ny in listed[:BRUTE_PAIRINGS]]
        out["bit_identical"] = bool(np.array_equal(ours, counts))
    return out


def run(n, d, dependence, args):
    x, y = data(n, d, dependence)
    row = {"n": n, "d_per_side": d, "joint_dims": 2 * d, "dependence": dependence,
           "y": f"0.5 x + {NOISE[dependence]:.3g} e", "k": 3, "permutations": args.permutations}
    measured, (single, single_cpu) = ratios(x, y, args.permutations, args.repeats)
    row.update(measured)
    if not args.ratio_only:
        from mianalysis.estimators.ksg import neighbour_list_length

        row["list_length"] = neighbour_list_length(n, 3)
        row.update(stages(x, y, args.permutations, args.stage_repeats, not args.no_brute, single, single_cpu))
    row["load_average_after"] = load()
    return row


def version():
    """The package timed: its commit and whether its files differ from it (None outside a
    git checkout, e.g. an older version unpacked elsewhere)."""
    import mianalysis

    root = Path(mianalysis.__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "mianalysis"], cwd=root).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return {"path": str(root.name), "commit": None}
    return {"commit": head, "uncommitted_changes": changed}


def summary(results):
    """Per size and dependence: the ratios now and before (where both were measured) and
    whether the target is met, from the file's "current" and "before" entries."""
    before = {(r["n"], r["d_per_side"], r["dependence"]): r for r in results.get("before", {}).get("runs", [])}
    rows = []
    for r in results.get("current", {}).get("runs", []):
        row = {"size": f"{r['n']}x{r['d_per_side']}", "dependence": r["dependence"], "target": TARGET,
               "test_over_single": r["test_over_single"], "test_over_single_cpu": r["test_over_single_cpu"],
               "target_met": r["target_met"], "target_met_cpu": r["target_met_cpu"]}
        old = before.get((r["n"], r["d_per_side"], r["dependence"]))
        if old is not None:
            row["before_test_over_single"] = old["test_over_single"]
            row["before_test_over_single_cpu"] = old["test_over_single_cpu"]
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000x200,10000x100", help="comma-separated NxD, D features per side")
    parser.add_argument("--dependence", default="weak,strong", help="comma-separated: weak, strong")
    parser.add_argument("--permutations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved single/test runs")
    parser.add_argument("--stage-repeats", type=int, default=3, help="runs of the stages (medians)")
    parser.add_argument("--no-brute", action="store_true", help="skip the check against the brute-force pass")
    parser.add_argument("--ratio-only", action="store_true", help="only the interleaved ratios (public API)")
    parser.add_argument("--record-as", default="current", choices=["current", "before"],
                        help="the file's entry to write (\"before\": an older package, with --ratio-only)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for dependence in args.dependence.split(","):
        if dependence not in NOISE:
            parser.error(f"--dependence must name weak or strong; got {dependence!r}")
    sizes = []
    for size in args.sizes.split(","):
        try:
            n, d = (int(v) for v in size.split("x"))
        except ValueError:
            parser.error(f"--sizes must be NxD pairs such as 10000x200; got {size!r}")
        sizes.append((n, d))
    from mianalysis.estimators.calibration import OutsideCalibrationWarning

    warnings.simplefilter("ignore", OutsideCalibrationWarning)  # hundreds of joint dims: outside KSG's calibration
    x, y = data(1200, 2, "weak")
    mi_permutation_test(x, y, n_permutations=8, distance_cache=True)  # compile or load the kernels
    ksg_mi(*data(600, 60, "weak"))
    results = json.loads(args.out.read_text()) if args.out.exists() else {}  # other entries kept
    entry = results.setdefault(args.record_as, {})
    entry["machine"] = {"cpu_count": os.cpu_count(), "numba_threads": numba.get_num_threads(),
                        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "load_average_at_start": load()}
    entry["package"] = version()
    entry.setdefault("runs", [])
    for n, d in sizes:
        for dependence in args.dependence.split(","):
            row = run(n, d, dependence, args)
            print(json.dumps(row), flush=True)
            entry["runs"] = [r for r in entry["runs"]
                             if (r["n"], r["d_per_side"], r["dependence"]) != (n, d, dependence)] + [row]
            results["summary"] = summary(results)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
