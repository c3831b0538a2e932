"""The full analysis at the paper's size: wall and CPU seconds, peak memory, where the time goes.

    python benchmarks/bench_paper_scale.py [--sizes 26400x850,22000x394] [--estimators auto,explicit]
    python benchmarks/bench_paper_scale.py --sizes 4000x850,8000x850 --profile
    python benchmarks/bench_paper_scale.py --sizes 22000x394 --estimators auto --gaussian-null analytic --merge
    python benchmarks/bench_paper_scale.py --quick --out check.json   # < 1 minute (the smoke test)
    python benchmarks/bench_paper_scale.py --dump DUMP --runs 10000 --estimators legacy --profile --merge

With ``--dump`` it analyses the first ``--runs`` runs of a sampled dump (copied with the
public writer) instead of a synthetic one: real parameters, with their ties and constant
columns, which the synthetic design has none of; the record names the dump and its task.

For each size RUNSxPARAMS it writes a synthetic dump of 3 clients x RUNS runs x PARAMS
parameters x `--checkpoints` checkpoints (float32) with the public writer
(``ParameterDump.create`` and ``write_chunk``, chunk by chunk), then analyses it with
:func:`mianalysis.analyze` in a fresh process per estimator set:

- ``auto``: the defaults (``estimators="auto"``; at these sizes the Gaussian copula
  estimate per pair, :mod:`mianalysis.analysis.inference.choice`);
- ``explicit``: every estimator issue 29 names, ``["gaussian", "ksg", "copula"]``;

each with `--permutations` permutations (100) for every estimate, the default intervals
(``ci_resamples`` None: the registry's) and all three distances. It records the wall
seconds of ``analyze``, the process's CPU seconds (user + system, all threads, and any
children), its peak resident memory (``ru_maxrss``, of the process and of its children),
the load average before and after (the machine may be shared), its minor page faults, and
the rows' MI beside the design's exact MI. On a virtual machine whose host takes freed
memory back within seconds, every large temporary array is fresh pages again, and their
first touch can cost more than the work done on them (docs/results/benchmarks.md);
``--keep-freed-memory`` runs each analysis with glibc's allocator told to keep what it
frees (``MALLOC_MMAP_MAX_=0``, ``MALLOC_TRIM_THRESHOLD_`` 2^62), as a user can. With
``--profile`` the same analysis runs under cProfile and the record holds the cumulative
seconds of each stage (:data:`STAGES`) and the functions with the most own time; profile a
smaller size and scale where the full size is too slow.

The design: client c at checkpoint t is ``sqrt(rho_t) S + sqrt(1 - rho_t) E_ct``, with
S (runs x params) shared by the clients and E_ct independent standard normals, so each
parameter of two clients has correlation rho_t (rising over the checkpoints,
:data:`RHOS`) and the exact MI of a pair is ``-PARAMS / 2 log2(1 - rho_t^2)`` bits. A
third of the parameters go through ``sinh`` and a third through ``x + x^3`` (monotone,
non-Gaussian marginals): the MI is unchanged, the copula estimate sees through them, the
Gaussian one does not. Writes benchmarks/results/paper_scale.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mianalysis import ParameterDump
from mianalysis.dumps import layout_from_shapes
from mianalysis.provenance import collect, utc_now

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "paper_scale.json"
SIZES = "26400x850,22000x394"  # the core paper's runs x the LeNet head; signal-rnn's size
QUICK_SIZES = "300x20"
ESTIMATOR_SETS = {"auto": "auto", "explicit": ["gaussian", "ksg", "copula"],
                  "legacy": ["gaussian", "ksg"]}  # the last: the experiment scripts' (experiments/_runner.py)
RHOS = (0.1, 0.2, 0.3, 0.4, 0.5)  # the correlation of each parameter between two clients, per checkpoint
CLIENTS = ("0", "1", "2")
TARGETS = {"26400x850": {"wall_seconds": 300, "peak_rss_gib": 16}, "22000x394": {"wall_seconds": 120}}
# What the profile attributes time to: (stage, function name as cProfile reports it, file it is in).
STAGES = (
    ("read samples", "samples", "dumps/format.py"),
    ("distances (paired, per run)", "paired_distances", "estimators/distances.py"),
    ("MI estimates and their permutation nulls", "_mi_row", "analysis/compute.py"),
    ("permutation tests", "mi_permutation_test", "estimators/significance.py"),
    ("permutation tests of estimates made (Gaussian, copula)", "gaussian_permutation_test", "estimators/significance.py"),
    ("resampled MI (bootstrap / half-subsampling replicates)", "mi_replicates", "analysis/inference/intervals.py"),
    ("KSG half-subsampling replicates from kept distances", "ksg_estimates_of_subsets", "estimators/ksg.py"),
    ("level standard errors (Wishart formula)", "level_se", "analysis/inference/intervals.py"),
    ("influence values (se of changes, delta method)", "mi_influence", "analysis/inference/intervals.py"),
    ("KSG marginal distance matrices", "marginal_distances", ""),
    ("normal scores (copula ranks)", "normal_scores", "estimators/copula.py"),
    ("Gram matrices", "gram_matrix", "estimators/gaussian.py"),
    ("Cholesky factors", "cholesky", "linalg"),
    ("KSG tie check", "ksg_ties", "estimators/ksg.py"),
)


def rho(t: int, checkpoints: int) -> float:
    """The correlation of each parameter between two clients at checkpoint t."""
    return RHOS[t] if checkpoints == len(RHOS) else 0.1 + 0.4 * t / max(checkpoints - 1, 1)


def exact_mi_bits(t: int, checkpoints: int, params: int) -> float:
    """The exact MI of any two clients at checkpoint t (monotone maps of a coordinate leave it unchanged)."""
    return float(-params / 2 * np.log2(1 - rho(t, checkpoints) ** 2))


def copy_first_runs(source: Path, path: Path, runs: int) -> tuple[int, int, int]:
    """The first `runs` completed runs of the dump `source` as a new dump at `path`, chunk by
    chunk with the public writer; (runs, params, checkpoints) of the copy."""
    dump = ParameterDump.open(source)
    runs = min(runs, dump.completed_runs)
    copy = ParameterDump.create(path, clients=list(dump.clients), checkpoints=list(dump.checkpoints), n_runs=runs,
                                layout=dump.layout)
    chunk = max(1, min(1000, 2**26 // (8 * dump.n_params * len(dump.checkpoints) * len(dump.clients))))
    for start in range(0, runs, chunk):
        stop = min(start + chunk, runs)
        copy.write_chunk(start, stop, {c: np.stack([np.asarray(dump.samples(c, index=t)[start:stop])
                                                    for t in range(len(dump.checkpoints))]) for c in dump.clients})
    return runs, dump.n_params, len(dump.checkpoints)


def write_dump(path: Path, runs: int, params: int, checkpoints: int, seed: int = 0) -> int:
    """The dump of the module docstring's design, chunk by chunk (this process never holds all
    of it); its size in bytes."""
    dump = ParameterDump.create(path, clients=list(CLIENTS), checkpoints=range(checkpoints), n_runs=runs,
                                layout=layout_from_shapes([("w", (params,))]))
    rng = np.random.default_rng(seed)
    weights = np.array([rho(t, checkpoints) for t in range(checkpoints)])[:, None, None]
    chunk = max(1, min(1000, 2**26 // (8 * params * checkpoints * (len(CLIENTS) + 1))))
    for start in range(0, runs, chunk):
        stop = min(start + chunk, runs)
        shared = rng.standard_normal((stop - start, params))
        out = {}
        for c in CLIENTS:
            x = np.sqrt(weights) * shared + np.sqrt(1 - weights) * rng.standard_normal((checkpoints, stop - start,
                                                                                         params))
            x[..., 0::3] = np.sinh(x[..., 0::3])
            x[..., 1::3] += x[..., 1::3] ** 3
            out[c] = x.astype(np.float32)
        dump.write_chunk(start, stop, out)
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


CHILD = r"""
import cProfile, io, json, os, pstats, resource, sys, time
from mianalysis import analyze

args = json.loads(sys.argv[1])
usage = lambda who: resource.getrusage(who)
before = [usage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
load_before = os.getloadavg()
profiler = cProfile.Profile() if args["profile"] else None
start = time.perf_counter()
if profiler:
    profiler.enable()
table = analyze(args["dump"], estimators=args["estimators"], n_permutations=args["permutations"],
                gaussian_null=args["gaussian_null"], random_state=0)
if profiler:
    profiler.disable()
wall = time.perf_counter() - start
after = [usage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
faults = sum(a.ru_minflt - b.ru_minflt for a, b in zip(after, before))
record = {"wall_seconds": wall, "cpu_seconds": cpu, "minor_page_faults": faults,
          "malloc_environment": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
          "peak_rss_kib_self": after[0].ru_maxrss,
          "peak_rss_kib_children": after[1].ru_maxrss, "load_average_before": list(load_before),
          "load_average_after": list(os.getloadavg()),
          "rows": [{k: r[k] for k in ("iteration", "client_a", "client_b", "quantity", "value", "ci_low", "ci_high",
                                      "p_value", "estimate_kind", "null_method")} for r in table]}
if profiler:
    stats = pstats.Stats(profiler)
    record["profile"] = [[file, line, name, calls, own, cumulative]
                         for (file, line, name), (_, calls, own, cumulative, _) in stats.stats.items()]
print("RECORD " + json.dumps(record, default=float))
"""


# glibc's allocator kept from handing freed memory back to the system (``--keep-freed-memory``):
# no block by mmap (each large array would be fresh pages again), no trimming of the heap.
KEEP_FREED_MEMORY = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**62)}


def run_analysis(dump: Path, estimators, permutations: int, gaussian_null: str, profile: bool,
                 keep_freed_memory: bool = False) -> dict:
    """One analysis of `dump` in a fresh process: its record (see :data:`CHILD`)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           **(KEEP_FREED_MEMORY if keep_freed_memory else {})}
    payload = json.dumps({"dump": str(dump), "estimators": estimators, "permutations": permutations,
                          "gaussian_null": gaussian_null, "profile": profile})
    done = subprocess.run([sys.executable, "-c", CHILD, payload], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"analyze failed on {dump}:\n{done.stderr[-4000:]}")
    line = next(line for line in reversed(done.stdout.splitlines()) if line.startswith("RECORD "))
    return json.loads(line[len("RECORD "):])


def stage_seconds(profile: list) -> dict:
    """Cumulative seconds of each of :data:`STAGES` (summed over the functions of that name and
    file; nested stages overlap) and the 15 functions with the most own time."""
    stages = {}
    for stage, name, where in STAGES:
        hits = [row for row in profile if row[2] == name and where in row[0]]
        stages[stage] = round(sum(row[5] for row in hits), 2) if hits else None
    top = sorted(profile, key=lambda row: -row[4])[:15]
    short = lambda file: file.split("site-packages/")[-1].split("mianalysis/")[-1]  # no machine paths
    return {"cumulative_seconds": stages,
            "top_own_time": [{"function": f"{short(f)}:{line}({name})", "calls": calls, "own_seconds": round(own, 2),
                              "cumulative_seconds": round(cum, 2)} for f, line, name, calls, own, cum in top]}


def summarize(record: dict, checkpoints: int, params: int, synthetic: bool = True) -> dict:
    """The record without its rows: MI per estimator and checkpoint (mean over pairs) beside the
    exact MI (of the synthetic design; None for a real dump)."""
    rows = record.pop("rows")
    mi = {}
    for r in rows:
        if r["quantity"].startswith("mi_") and r["client_b"] != "":
            mi.setdefault(r["quantity"], {}).setdefault(int(r["iteration"]), []).append(r)
    out = {}
    for quantity, by_t in sorted(mi.items()):
        out[quantity] = [{"iteration": t,
                          "exact_bits": round(exact_mi_bits(t, checkpoints, params), 3) if synthetic else None,
                          "mean_bits": round(float(np.mean([r["value"] for r in rs])), 3),
                          "pairs": len(rs), "kinds": sorted({r["estimate_kind"] for r in rs}),
                          "null_methods": sorted({r["null_method"] for r in rs}),
                          "max_p_value": float(np.nanmax([r["p_value"] for r in rs]))
                          if np.isfinite([r["p_value"] for r in rs]).any() else None}
                         for t, rs in sorted(by_t.items())]
    record["rows"] = len(rows)
    record["mi"] = out
    return record


def _public_arguments(argv) -> list:
    """The command-line arguments without --out and --tmp (and their values): paths of this machine."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--out", "--tmp"):
            skip = True
        elif not a.startswith(("--out=", "--tmp=")):
            out.append(a)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=None, help=f"comma-separated RUNSxPARAMS (default {SIZES})")
    parser.add_argument("--estimators", default="auto,explicit", help="comma-separated sets of " +
                        ", ".join(f"{k} ({v})" for k, v in ESTIMATOR_SETS.items()))
    parser.add_argument("--checkpoints", type=int, default=len(RHOS))
    parser.add_argument("--permutations", type=int, default=100)
    parser.add_argument("--gaussian-null", default="auto", choices=["auto", "permutation", "analytic", "moments"],
                        help="analyze's gaussian_null (default: its default, auto: the permutation-moment null "
                             "where shuffles are costly)")
    parser.add_argument("--profile", action="store_true", help="run each analysis under cProfile")
    parser.add_argument("--quick", action="store_true",
                        help=f"sizes {QUICK_SIZES}, 3 checkpoints, 5 permutations, profiled (< 1 minute)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the dumps (default: a temporary one)")
    parser.add_argument("--dump", type=Path, default=None,
                        help="analyse the first --runs runs of this sampled dump instead of synthetic ones")
    parser.add_argument("--runs", type=int, default=None, help="with --dump: how many of its runs (default all)")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="run each analysis with glibc's allocator keeping the memory it frees (see the module "
                             "docstring; the record's malloc_environment says so)")
    parser.add_argument("--merge", action="store_true",
                        help="add the results to those already in --out (each result names its command)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = args.sizes or QUICK_SIZES
        args.checkpoints, args.permutations, args.profile = 3, 5, True
    if args.dump is not None and args.sizes:
        raise SystemExit("--dump analyses that dump's runs: give --runs, not --sizes")
    sizes = []
    for size in [] if args.dump is not None else (args.sizes or SIZES).split(","):
        try:
            runs, params = (int(v) for v in size.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--sizes: {size!r} is not RUNSxPARAMS (e.g. 26400x850)") from None
        sizes.append((runs, params))
    sets = args.estimators.split(",")
    for name in sets:
        if name not in ESTIMATOR_SETS:
            raise SystemExit(f"--estimators: {name!r} is not one of {list(ESTIMATOR_SETS)}")
    if not 1 <= args.checkpoints:
        raise SystemExit("--checkpoints must be >= 1")
    started = utc_now()
    results = {"command": " ".join(["python benchmarks/bench_paper_scale.py", *_public_arguments(
        sys.argv[1:] if argv is None else argv)]),
        "design": __doc__.split("The design: ")[1].split(" Writes")[0].replace("\n", " "),
        "clients": len(CLIENTS), "checkpoints": args.checkpoints, "permutations": args.permutations,
        "gaussian_null": args.gaussian_null, "targets": TARGETS, "machine": {"cpu_count": os.cpu_count()},
        "results": []}
    tmp = Path(tempfile.mkdtemp(prefix="mianalysis-paper-scale-", dir=args.tmp))
    try:
        for runs, params in sizes or [(args.runs, None)]:
            path = tmp / ("dump" if args.dump is not None else f"{runs}x{params}")
            t0 = time.perf_counter()
            if args.dump is not None:
                runs, params, checkpoints = copy_first_runs(args.dump, path, args.runs or 2**62)
                size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            else:
                size, checkpoints = write_dump(path, runs, params, args.checkpoints), args.checkpoints
            written = time.perf_counter() - t0
            for name in sets:
                record = run_analysis(path, ESTIMATOR_SETS[name], args.permutations, args.gaussian_null, args.profile,
                                      args.keep_freed_memory)
                record = summarize(record, checkpoints, params, synthetic=args.dump is None)
                if "profile" in record:
                    record["profile"] = stage_seconds(record["profile"])
                row = {"command": results["command"], "checkpoints": checkpoints,
                       **({"dump": args.dump.name, "dump_task": ParameterDump.open(args.dump).meta.get("task")}
                          if args.dump is not None else {}),
                       "permutations": args.permutations, "gaussian_null": args.gaussian_null,
                       "size": f"{runs}x{params}", "runs": runs, "params": params, "estimators": name,
                       "estimator_list": ESTIMATOR_SETS[name], "dump_mib": round(size / 2**20, 1),
                       "dump_write_seconds": round(written, 1), "profiled": args.profile,
                       "wall_seconds": round(record.pop("wall_seconds"), 1),
                       "cpu_seconds": round(record.pop("cpu_seconds"), 1),
                       "peak_rss_gib": round(max(record.pop("peak_rss_kib_self"),
                                                 record.pop("peak_rss_kib_children")) / 2**20, 3), **record}
                row["load_average_before"] = [round(v, 2) for v in row["load_average_before"]]
                row["load_average_after"] = [round(v, 2) for v in row["load_average_after"]]
                results["results"].append(row)
                print(f"{runs}x{params} {name}: {row['wall_seconds']} s wall, {row['cpu_seconds']} s CPU, "
                      f"peak {row['peak_rss_gib']} GiB, load {row['load_average_before']} -> "
                      f"{row['load_average_after']}", flush=True)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["provenance"] = [collect(started, finished=True)]
    if args.merge and args.out.exists():  # earlier results first; the settings above are those of the last command
        earlier = json.loads(args.out.read_text())
        results["results"] = earlier["results"] + results["results"]
        results["provenance"] = earlier["provenance"] + results["provenance"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
