"""KSG mutual information side by side: `ksg_mi` against other implementations.

    python benchmarks/compare_peers.py [--cap 360] [--quick] [--reuse-peers]

Peers (installed into a benchmark-only virtual environment, benchmarks/.peers-venv, on
first use; they are not dependencies of the project): NPEET (npeet-plus), infomeasure,
ennemi, and JIDT (infodynamics.jar from the idtxl-uv wheel, through jpype1; needs Java).
Data: X ~ N(0, I_d), Y = 0.5 X + sqrt(0.75) E, k = 3, KSG algorithm 1, at (n, d per
side) in (2000, 1), (2000, 10), (5000, 50), (10000, 100), (22000, 394). Every peer runs
in its own process on the same arrays with a wall-clock cap (`--cap` seconds); a peer
over the cap is recorded as "> cap". Each value is checked against ours (same algorithm,
no tie-breaking noise on our side: the peers' own noise is 1e-10 and cannot move counts
of continuous data). ennemi estimates MI between a 1-D y and each column of x, so it only
takes part at d = 1.

Ours is timed as the best of three calls after touching a few GB of memory once (on a
freshly booted virtual machine the first touch of a page is slow, see
bench_estimators.py); each peer runs once (5 s to the cap at the larger sizes).
`--reuse-peers` re-times only ours and keeps the peers' results of the last full run
(peers.json records when each peer result was measured).

Writes benchmarks/results/peers.json and benchmarks/results/peers.md (times and the
ratio of each peer's time to ours).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_estimators import data, warm_memory  # the same correlated Gaussians

from mianalysis import ksg_mi

HERE = Path(__file__).parent
VENV = HERE / ".peers-venv"
SIZES = [(2000, 1), (2000, 10), (5000, 50), (10000, 100), (22000, 394)]
PEER_PACKAGES = ["numpy", "scipy", "scikit-learn", "ennemi", "npeet-plus", "infomeasure", "idtxl-uv", "jpype1"]
PEERS = ["npeet", "infomeasure", "ennemi", "jidt"]

# Run inside the peers' environment: python -c RUNNER PEER X.npy Y.npy -> JSON line.
RUNNER = r"""
import json, sys, time
import numpy as np
peer, xf, yf = sys.argv[1:4]
x, y = np.load(xf), np.load(yf)
if peer == "npeet":
    from npeet_plus.estimators import mi
    run = lambda: mi(x, y, k=3, base=np.e)
elif peer == "infomeasure":
    import infomeasure as im
    run = lambda: im.mutual_information(x, y, approach="ksg", k=3, ksg_id=1, base="e")
elif peer == "ennemi":
    from ennemi import estimate_mi
    run = lambda: float(estimate_mi(y[:, 0], x[:, 0], k=3, preprocess=False)[0, 0])
elif peer == "jidt":
    import os, jpype, idtxl
    jar = os.path.join(os.path.dirname(idtxl.__file__), "infodynamics.jar")
    jpype.startJVM(jpype.getDefaultJVMPath(), "-ea", "-Xmx8g", classpath=[jar])
    cls = jpype.JPackage("infodynamics.measures.continuous.kraskov").MutualInfoCalculatorMultiVariateKraskov1
    def run():
        calc = cls()
        calc.setProperty("k", "3")
        calc.setProperty("NORMALISE", "false")
        calc.setProperty("NOISE_LEVEL_TO_ADD", "0")
        calc.initialise(x.shape[1], y.shape[1])
        calc.setObservations(jpype.JArray(jpype.JDouble, 2)(x.tolist()), jpype.JArray(jpype.JDouble, 2)(y.tolist()))
        return calc.computeAverageLocalOfObservations()
start = time.perf_counter()
value = float(run())
print(json.dumps({"seconds": time.perf_counter() - start, "nats": value}))
"""


def ensure_venv(venv=VENV):
    """The peers' Python, creating the environment at `venv` and installing the peers on first use.

    A dangling link, a file, or a folder that holds files but no working interpreter at
    `venv` stops the run with a message saying what to remove (it is never deleted here).
    A marker file records a finished install, so an interrupted install is retried.
    """
    python = venv / "bin" / "python"
    installed = venv / ".peers-installed"
    if venv.is_symlink() and not venv.exists():
        raise SystemExit(f"{venv} is a link to {os.readlink(venv)}, which does not exist; remove the link "
                         f"(rm {venv}) and run again to create the peers' environment there")
    if venv.exists() and not venv.is_dir():
        raise SystemExit(f"{venv} exists and is not a folder; remove it (rm {venv}) and run again to create "
                         "the peers' environment there")
    if venv.is_dir() and not python.exists() and any(venv.iterdir()):
        raise SystemExit(f"{venv} holds files but no working Python ({python} is missing or a broken link); "
                         f"remove it (rm -r {venv}) and run again to recreate the peers' environment")
    if not python.exists():
        # venv refuses a link, even one to a folder: create the environment where it points.
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv.resolve())], check=True)
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"`{sys.executable} -m venv {venv}` failed with exit code {exc.returncode}; "
                             "see its message above") from exc
    if not installed.exists():
        try:
            subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"installing the peers ({' '.join(PEER_PACKAGES)}) into {venv} failed with exit "
                             f"code {exc.returncode} (it needs access to PyPI); run again to retry") from exc
        installed.touch()
    return python


def agrees(theirs, ours):
    """Same KSG value up to the peers' 1e-10 tie-breaking noise and summation order."""
    return bool(abs(theirs - ours) <= 1e-6 + 1e-4 * abs(ours))


def run_peer(python, peer, xf, yf, cap):
    try:
        out = subprocess.run([str(python), "-c", RUNNER, peer, str(xf), str(yf)], capture_output=True, text=True,
                             timeout=cap)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": None}
    if out.returncode != 0:
        return {"status": "error", "error": out.stderr.strip().splitlines()[-1][:200] if out.stderr else "?"}
    return {"status": "ok", **json.loads(out.stdout.strip().splitlines()[-1])}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cap", type=float, default=360.0, help="seconds per peer and size")
    parser.add_argument("--quick", action="store_true", help="the three smallest sizes")
    parser.add_argument("--reuse-peers", action="store_true",
                        help="time only ksg_mi; keep the peers' results from results/peers.json")
    args = parser.parse_args()
    previous = {}
    if args.reuse_peers:
        old = json.loads((HERE / "results" / "peers.json").read_text())
        previous = {(row["n"], row["d"]): row["peers"] for row in old["sizes"]}
        args.cap = old["cap_seconds"]
    python = None if args.reuse_peers else ensure_venv()
    warm_memory()
    ksg_mi(*data(64, 2), noise=0)  # compile or load from cache
    ksg_mi(*data(64, 2), noise=0, dtype="float32")
    sizes = SIZES[:3] if args.quick else SIZES
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, d in sizes:
            x, y = data(n, d)
            xf, yf = Path(tmp) / "x.npy", Path(tmp) / "y.npy"
            np.save(xf, x)
            np.save(yf, y)
            row = {"n": n, "d": d, "peers": {}}
            for dtype in ("float64", "float32"):
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    value = ksg_mi(x, y, noise=0, units="nats", dtype=dtype)
                    times.append(time.perf_counter() - start)
                row[f"ours_{dtype}"] = {"seconds": min(times), "nats": value}
            ours = row["ours_float64"]
            if args.reuse_peers:
                row["peers"] = previous[(n, d)]
                for result in row["peers"].values():
                    if result["status"] == "ok":
                        result["agrees"] = agrees(result["nats"], ours["nats"])
                        result["ratio"] = result["seconds"] / ours["seconds"]
                rows.append(row)
                print(n, d, "ours", row["ours_float64"], row["ours_float32"], flush=True)
                continue
            measured = time.strftime("%Y-%m-%d")
            for peer in PEERS:
                if peer == "ennemi" and d > 1:
                    row["peers"][peer] = {"status": "not applicable (y must be 1-D)"}
                    continue
                result = run_peer(python, peer, xf, yf, args.cap)
                result["measured"] = measured
                if result["status"] == "ok":
                    result["agrees"] = agrees(result["nats"], ours["nats"])
                    result["ratio"] = result["seconds"] / ours["seconds"]
                row["peers"][peer] = result
                print(n, d, peer, result, flush=True)
            rows.append(row)
            print(n, d, "ours", row["ours_float64"], row["ours_float32"], flush=True)
    results = {"cap_seconds": args.cap, "cpu_count": os.cpu_count(), "k": 3, "algorithm": 1, "sizes": rows}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "peers.json").write_text(json.dumps(results, indent=1) + "\n")
    (HERE / "results" / "peers.md").write_text(markdown(rows, args.cap))
    print(markdown(rows, args.cap))


def markdown(rows, cap):
    head = ["n", "d per side", "ksg_mi float64 (s)", "ksg_mi float32 (s)"] + [f"{p} (s, x ours)" for p in PEERS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [str(row["n"]), str(row["d"]), f"{row['ours_float64']['seconds']:.3g}",
                 f"{row['ours_float32']['seconds']:.3g}"]
        for peer in PEERS:
            r = row["peers"][peer]
            if r["status"] == "ok":
                mark = "" if r["agrees"] else " (value differs)"
                cells.append(f"{r['seconds']:.3g} ({r['ratio']:.0f}x){mark}")
            elif r["status"] == "timeout":
                cells.append(f"> {cap:.0f} (> {cap / row['ours_float64']['seconds']:.0f}x)")
            else:
                cells.append(r["status"] if r["status"] != "error" else f"error: {r['error']}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
