"""What an MI curve can tell you: estimators on correlated Gaussians with known MI, at the
experiments' sample sizes and dimensions.

X ~ N(0, I_d), Y = rho X + sqrt(1 - rho^2) E, so I(X;Y) = -d/2 log(1 - rho^2) exactly.

    python experiments/calibration.py [--quick]

Prints the table and writes figures/calibration.csv, with its provenance (versions,
machine, command line, times) in figures/calibration.csv.json.

    python experiments/calibration.py --regimes [--quick]

Where the experiments actually are: thousands of bits (rho near 1), n below, at and just
above twice the joint dimension (Ledoit-Wolf shrinkage, near-singular covariance), and
coordinates rounded to a grid (nearly discrete; the true MI of the rounded variables is
computed by quadrature). Both estimators run as :func:`mianalysis.analyze` runs them
(Gaussian: :func:`mianalysis.analysis.gaussian_settings`; KSG: k = 3, standardized
coordinates). Each row says whether each estimate is within 5 % of the truth
(``|estimate - true| <= 0.05 max(true, 1 nat)``). Writes figures/calibration_regimes.csv
(``_quick`` with --quick, at most a minute or two on 2 cores) and its ``.csv.json``
sidecar; :mod:`mianalysis.analysis.regime` takes its thresholds from the full table.
"""

import argparse
import time

import numpy as np
from _results import FIGURES, write_csv, write_sidecar

from mianalysis import gaussian_mi, ksg_mi
from mianalysis.provenance import collect, utc_now
from mianalysis.analysis import gaussian_settings
from scipy.special import ndtr

# (n samples, d per side): the paper's signal-rnn scale with its reported 394 parameters,
# our signal-rnn (358) at the paper scale and at the long and quick runs, and digits-lenet
# (850) at our paper-preset and long runs.
CASES = [(22000, 394), (22000, 358), (2000, 358), (400, 358), (8000, 850), (2000, 850)]
QUICK_CASES = [(2000, 100), (400, 100)]
RHOS = (0.0, 0.5)


# (regime, n, d per side, rho, grid step of the rounding or 0)
REGIME_CASES = [
    *[("low dimension", n, d, rho, 0.0) for n in (2000, 8000) for d in (1, 2, 3) for rho in (0.5, 0.9, 0.99)],
    ("low dimension", 2000, 5, 0.5, 0.0),
    ("low dimension", 2000, 20, 0.9, 0.0),
    ("high MI per coordinate", 2000, 2, 0.999, 0.0),
    ("hundreds of bits", 2000, 100, 0.99, 0.0),
    ("thousands of bits", 2000, 300, 0.999, 0.0),
    ("thousands of bits", 4000, 500, 0.999, 0.0),
    ("n just above 2 x joint dims", 440, 100, 0.5, 0.0),
    ("n just above 2 x joint dims", 880, 200, 0.5, 0.0),
    ("n = 2 x joint dims (shrinkage)", 400, 100, 0.5, 0.0),
    ("n < joint dims (shrinkage, singular)", 150, 100, 0.5, 0.0),
    ("n < joint dims (shrinkage, singular)", 300, 200, 0.5, 0.0),
    ("quantised, fine grid", 2000, 5, 0.9, 0.05),
    ("quantised, coarse grid", 2000, 5, 0.9, 0.5),
    ("quantised, coarse grid", 2000, 5, 0.5, 1.0),
]
QUICK_REGIME_CASES = [
    ("low dimension", 1000, 5, 0.5, 0.0),
    ("hundreds of bits", 1000, 50, 0.99, 0.0),
    ("thousands of bits", 2000, 300, 0.999, 0.0),
    ("n just above 2 x joint dims", 440, 100, 0.5, 0.0),
    ("n < joint dims (shrinkage, singular)", 150, 100, 0.5, 0.0),
    ("quantised, coarse grid", 1000, 5, 0.9, 0.5),
]
TOLERANCE = 0.05  # relative, of max(true MI, 1 nat)


def rounded_gaussian_mi(rho, step, d=1, width=8.0, nodes=16):
    """Exact (to quadrature accuracy) MI in nats of d independent pairs (X, Y), unit
    variances and correlation rho, each coordinate rounded to the nearest multiple of step."""
    if step == 0:
        return -0.5 * d * np.log(1 - rho**2)
    half = int(np.ceil(width / step))
    edges = (np.arange(-half, half + 2) - 0.5) * step
    gl, w = np.polynomial.legendre.leggauss(nodes)
    lo, hi = edges[:-1], edges[1:]
    xs = (lo[:, None] + hi[:, None]) / 2 + (hi - lo)[:, None] / 2 * gl  # (bins, nodes)
    wx = (hi - lo)[:, None] / 2 * w * np.exp(-xs**2 / 2) / np.sqrt(2 * np.pi)
    sigma = np.sqrt(1 - rho**2)
    cdf = ndtr((edges[None, None, :] - rho * xs[..., None]) / sigma)  # (bins, nodes, edges)
    p = np.einsum("bn,bne->be", wx, np.diff(cdf, axis=-1))
    p = p / p.sum()
    px, py = p.sum(1, keepdims=True), p.sum(0, keepdims=True)
    ok = p > 0
    return float(d * np.sum(p[ok] * np.log(p[ok] / (px @ py)[ok])))


def estimate_as_analyze(x, y):
    """(Gaussian estimate, how, KSG estimate), nats, as mianalysis.analyze runs them."""
    kwargs, note = gaussian_settings(x.shape[0], x.shape[1] + y.shape[1])
    how = "ledoit-wolf" if kwargs else "bias-corr."
    try:
        gauss = gaussian_mi(x, y, units="nats", **kwargs)
    except ValueError:  # singular covariance: analyze shrinks
        how, gauss = "ledoit-wolf", gaussian_mi(x, y, units="nats", shrinkage="ledoit-wolf")
    return gauss, how, ksg_mi(x, y, units="nats", random_state=0, standardize=True)


def within(estimate, true):
    return bool(abs(estimate - true) <= TOLERANCE * max(true, 1.0))


def run_regimes(cases, verbose=True):
    """One row per regime case: true MI, both estimates, and whether each is within 5 %."""
    rows = []
    if verbose:
        print(f"{'regime':>36} {'n':>5} {'d':>4} {'rho':>6} {'step':>5} {'true':>8} {'gauss':>8} {'ksg':>8}  (nats)")
    for regime, n, d, rho, step in cases:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((n, d))
        y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))
        if step:
            x, y = step * np.round(x / step), step * np.round(y / step)
        true = rounded_gaussian_mi(rho, step, d)
        start = time.perf_counter()
        gauss, how, ksg = estimate_as_analyze(x, y)
        rows.append({"regime": regime, "n": n, "d_per_side": d, "joint_dims": 2 * d, "rho": rho, "grid_step": step,
                     "true_nats": true, "true_bits": true / np.log(2), "gaussian_nats": gauss,
                     "gaussian_method": how, "ksg_nats": ksg, "gaussian_within_5pct": within(gauss, true),
                     "ksg_within_5pct": within(ksg, true), "seconds": time.perf_counter() - start})
        if verbose:
            print(f"{regime:>36} {n:>5} {d:>4} {rho:>6} {step:>5} {true:>8.2f} {gauss:>8.2f} {ksg:>8.2f}  "
                  f"{'ok' if rows[-1]['gaussian_within_5pct'] else 'off'}/{'ok' if rows[-1]['ksg_within_5pct'] else 'off'}",
                  flush=True)
    return rows


def write_rows(rows, out, started):
    """CSV `out` and its provenance sidecar."""
    out = write_csv(rows, out)
    write_sidecar(out, {"table": out.name, "provenance": [collect(started, finished=True)]})
    print(f"wrote {out}")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--regimes", action="store_true", help="the regime table (see above)")
    parser.add_argument("--out", help="CSV to write (default: under figures/)")
    args = parser.parse_args(argv)
    started = utc_now()
    if args.regimes:
        rows = run_regimes(QUICK_REGIME_CASES if args.quick else REGIME_CASES)
        name = "calibration_regimes_quick.csv" if args.quick else "calibration_regimes.csv"
        return write_rows(rows, args.out or FIGURES / name, started)
    rows = []
    header = (f"{'n':>6} {'d+d':>9} {'rho':>4} {'true':>8} {'plug-in':>8} {'gauss':>8} "
              f"{'gauss how':>12} {'ksg':>8} {'ksg s':>6}")
    print("MI in nats\n" + header + "\n" + "-" * len(header))
    for n, d in QUICK_CASES if args.quick else CASES:
        for rho in RHOS:
            rng = np.random.default_rng(0)
            x = rng.standard_normal((n, d))
            y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))
            true = -0.5 * d * np.log(1 - rho**2) + 0.0
            if n > 2 * (2 * d):
                how, gauss = "bias-corr.", gaussian_mi(x, y, units="nats")
                plug = gaussian_mi(x, y, units="nats", bias_correction=False)
            else:
                how, gauss, plug = "ledoit-wolf", gaussian_mi(x, y, units="nats", shrinkage="ledoit-wolf"), np.nan
            start = time.perf_counter()
            ksg = ksg_mi(x, y, units="nats", random_state=0)
            seconds = time.perf_counter() - start
            row = {"n": n, "d_per_side": d, "rho": rho, "true_nats": true, "gaussian_plugin_nats": plug,
                   "gaussian_nats": gauss, "gaussian_method": how, "ksg_nats": ksg, "ksg_seconds": seconds}
            rows.append(row)
            print(f"{n:>6} {f'{d}+{d}':>9} {rho:>4.1f} {true:>8.2f} {plug:>8.2f} {gauss:>8.2f} {how:>12} "
                  f"{ksg:>8.2f} {seconds:>6.1f}", flush=True)
    return write_rows(rows, args.out or FIGURES / ("calibration_quick.csv" if args.quick
                                                           else "calibration.csv"), started)


if __name__ == "__main__":
    main()
