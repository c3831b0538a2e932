"""KSG with coordinates on very different scales: raw max-norm or standardized coordinates?

X ~ N(0, I_d), Y = rho X + sqrt(1 - rho^2) E, so I(X;Y) = -d/2 log(1 - rho^2) exactly.
Each coordinate is then mapped by a strictly increasing function (none, sinh, or
z + z^3) and multiplied by its own scale (all 1, or log-spaced from 1e-3 to 1e3, the
order reversed for Y). Neither changes the true MI. The table gives ``ksg_mi`` with
``standardize=False`` and ``standardize=True`` for every case and seed; the summary
printed at the end, the mean absolute error per (scales, map), decides the default of
:func:`mianalysis.analyze`.

    python experiments/ksg_standardize.py [--quick]

Writes figures/ksg_standardize/ksg_standardize.csv (figures/ksg_standardize/ksg_standardize_quick.csv with --quick) and its
provenance in the ``.csv.json`` sidecar.
"""

import argparse

import numpy as np
from _results import figures_of, write_csv, write_sidecar

from mianalysis import ksg_mi
from mianalysis.provenance import collect, utc_now

FIGURES = figures_of(__file__)  # figures/ksg_standardize/: where this script writes

MAPS = {"none": lambda z: z, "sinh": np.sinh, "cubic": lambda z: z + z**3}
SCALES = ("equal", "1e-3..1e3")
CASES = [(2000, 2, 0.5), (2000, 2, 0.9), (2000, 5, 0.5), (2000, 5, 0.9)]  # (n, d per side, rho)
QUICK_CASES = [(1000, 2, 0.9), (1000, 5, 0.5)]
SEEDS = (0, 1, 2)


def scales(kind, d):
    """Per-coordinate scales of X and Y."""
    if kind == "equal":
        return np.ones(d), np.ones(d)
    s = np.logspace(-3, 3, d)
    return s, s[::-1]


def run(cases, seeds=SEEDS):
    """One row per (case, scales, map, seed) with both KSG estimates in nats."""
    rows = []
    for n, d, rho in cases:
        true = -0.5 * d * np.log(1 - rho**2)
        for seed in seeds:
            rng = np.random.default_rng(seed)
            x = rng.standard_normal((n, d))
            y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))
            for kind in SCALES:
                sx, sy = scales(kind, d)
                for name, f in MAPS.items():
                    u, v = f(x) * sx, f(y) * sy
                    raw = ksg_mi(u, v, units="nats", random_state=seed)
                    std = ksg_mi(u, v, units="nats", random_state=seed, standardize=True)
                    rows.append({"n": n, "d_per_side": d, "rho": rho, "scales": kind, "map": name, "seed": seed,
                                 "true_nats": true, "ksg_raw_nats": raw, "ksg_standardized_nats": std,
                                 "abs_error_raw": abs(raw - true), "abs_error_standardized": abs(std - true)})
    return rows


def summary(rows):
    """{(scales, map): (mean abs error raw, mean abs error standardized)} over cases and seeds."""
    out = {}
    for kind in SCALES:
        for name in MAPS:
            hit = [r for r in rows if r["scales"] == kind and r["map"] == name]
            out[(kind, name)] = (float(np.mean([r["abs_error_raw"] for r in hit])),
                                 float(np.mean([r["abs_error_standardized"] for r in hit])))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two small cases, a few seconds")
    args = parser.parse_args(argv)
    started = utc_now()
    rows = run(QUICK_CASES if args.quick else CASES)
    out = write_csv(rows, FIGURES / ("ksg_standardize_quick.csv" if args.quick else "ksg_standardize.csv"))
    table = summary(rows)
    print(f"mean |KSG - true| in nats over {len(rows) // (len(SCALES) * len(MAPS))} cases x seeds")
    print(f"{'scales':>10} {'map':>6} {'raw':>8} {'standardized':>13}")
    for (kind, name), (raw, std) in table.items():
        print(f"{kind:>10} {name:>6} {raw:>8.3f} {std:>13.3f}")
    record = {"table": out.name, "summary_mean_abs_error_nats": {f"{k}/{m}": {"raw": r, "standardized": s}
                                                                 for (k, m), (r, s) in table.items()},
              "provenance": [collect(started, finished=True)]}
    write_sidecar(out, record)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
