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
(``|estimate - true| <= 0.05 max(true, 1 nat)``). The Gaussian copula estimate (Gaussian
estimate of the normal scores) and the cross-fitted projection bound run on every row as
well (the bound: whether it is at most the truth, ``bound_covers``), and further families
test them where the truth is known: monotone maps of each coordinate (sinh, x + x^3: a
Gaussian copula, same MI) and the multivariate Student t (closed-form MI, not a Gaussian
copula; column ``family``). Writes figures/calibration_regimes.csv
(``_quick`` with --quick, at most a minute or two on 2 cores) and its ``.csv.json``
sidecar; :mod:`mianalysis.analysis.inference.regime` takes its thresholds from the full table.
"""

import argparse
import time

import numpy as np
from _results import FIGURES, write_csv, write_sidecar

from mianalysis import gaussian_mi, ksg_mi, projection_mi_bound
from mianalysis.provenance import collect, utc_now
from mianalysis.analysis import gaussian_settings
from mianalysis.estimators.copula import normal_scores
from scipy.special import digamma, gammaln, ndtr

# (n samples, d per side): the paper's signal-rnn scale with its reported 394 parameters,
# our signal-rnn (358) at the paper scale and at the long and quick runs, and digits-lenet
# (850) at our paper-preset and long runs.
CASES = [(22000, 394), (22000, 358), (2000, 358), (400, 358), (8000, 850), (2000, 850)]
QUICK_CASES = [(2000, 100), (400, 100)]
RHOS = (0.0, 0.5)


# (regime, n, d per side, rho, grid step of the rounding or 0); the rows of correlated
# Gaussians (family "gaussian"), rounded ones included.
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
# Families beyond correlated Gaussians, for the Gaussian copula estimate (and every
# estimator): (family, regime, n, d per side, rho, parameter). "sinh" and "cubic" (x + x^3)
# map each coordinate of the correlated Gaussians monotonically (the same MI: a Gaussian
# copula, where the copula estimate is exact); "student-t" is the multivariate Student t
# with `parameter` degrees of freedom and the same correlation matrix, whose MI has a closed
# form (student_t_mi) and whose dependence is not a Gaussian copula's.
FAMILY_CASES = [
    *[("sinh", "monotone map of Gaussians", n, d, rho, 0) for n, d, rho in
      ((2000, 1, 0.9), (2000, 3, 0.99), (2000, 100, 0.9), (440, 100, 0.5), (2000, 300, 0.999))],
    *[("cubic", "monotone map of Gaussians", n, d, rho, 0) for n, d, rho in
      ((2000, 1, 0.5), (2000, 3, 0.9), (2000, 100, 0.99), (880, 200, 0.5), (4000, 500, 0.999))],
    *[("student-t", "Student t", n, d, rho, nu) for n, d, rho, nu in
      ((2000, 1, 0.5, 3), (2000, 1, 0.9, 3), (2000, 1, 0.5, 10), (2000, 1, 0.5, 30), (8000, 2, 0.9, 5),
       (2000, 5, 0.5, 10), (2000, 50, 0.9, 10), (2000, 50, 0.9, 100))],
]
QUICK_REGIME_CASES = [
    ("low dimension", 1000, 5, 0.5, 0.0),
    ("hundreds of bits", 1000, 50, 0.99, 0.0),
    ("thousands of bits", 2000, 300, 0.999, 0.0),
    ("n just above 2 x joint dims", 440, 100, 0.5, 0.0),
    ("n < joint dims (shrinkage, singular)", 150, 100, 0.5, 0.0),
    ("quantised, coarse grid", 1000, 5, 0.9, 0.5),
]
QUICK_FAMILY_CASES = [("sinh", "monotone map of Gaussians", 1000, 3, 0.9, 0),
                      ("student-t", "Student t", 1000, 1, 0.5, 3)]
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


def student_t_excess(nu, p, q):
    """What the MI (nats) of a (p + q)-dimensional Student t with nu degrees of freedom adds
    to the Gaussian MI of its correlation matrix (the t entropies H_p + H_q - H_{p+q}, whose
    log-det and log(nu pi) terms leave the Gaussian part and 0)."""
    a, b, c, d = nu / 2, (nu + p) / 2, (nu + q) / 2, (nu + p + q) / 2
    return float(gammaln(a) + gammaln(d) - gammaln(b) - gammaln(c)
                 + b * digamma(b) + c * digamma(c) - d * digamma(d) - a * digamma(a))


def student_t_mi(rho, d, nu):
    """Exact MI (nats) of a 2d-dimensional Student t with nu degrees of freedom whose
    correlation matrix pairs coordinate j of X with coordinate j of Y by rho (else 0)."""
    return -0.5 * d * np.log(1 - rho**2) + student_t_excess(nu, d, d)


def family_samples(family, n, d, rho, parameter, rng):
    """x, y of shape (n, d) of a family case and their exact MI in nats."""
    x = rng.standard_normal((n, d))
    y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))
    true = -0.5 * d * np.log(1 - rho**2)
    if family == "sinh":
        return np.sinh(x), np.sinh(y), true
    if family == "cubic":
        return x + x**3, y + y**3, true
    if family == "student-t":  # one chi-square scale per sample for the whole vector
        scale = np.sqrt(rng.chisquare(parameter, size=(n, 1)) / parameter)
        return x / scale, y / scale, student_t_mi(rho, d, parameter)
    raise ValueError(f"unknown family {family!r}")


def _covariance_as_analyze(x, y):
    """(estimate, how) of the Gaussian log-det estimate of x, y, nats, as analyze runs it."""
    kwargs, note = gaussian_settings(x.shape[0], x.shape[1] + y.shape[1])
    how = "ledoit-wolf" if kwargs else "bias-corr."
    try:
        value = gaussian_mi(x, y, units="nats", **kwargs)
    except ValueError:  # singular covariance: analyze shrinks
        how, value = "ledoit-wolf", gaussian_mi(x, y, units="nats", shrinkage="ledoit-wolf")
    return value, how


def estimate_as_analyze(x, y):
    """(Gaussian estimate, how, KSG estimate), nats, as mianalysis.analyze runs them."""
    gauss, how = _covariance_as_analyze(x, y)
    return gauss, how, ksg_mi(x, y, units="nats", random_state=0, standardize=True)


def new_estimates_as_analyze(x, y):
    """(copula estimate, how, projection bound), nats, as mianalysis.analyze runs them: the
    Gaussian estimate of each coordinate's normal scores, and the registered bound with its
    default settings."""
    copula, how = _covariance_as_analyze(normal_scores(x), normal_scores(y))
    return copula, how, projection_mi_bound(x, y, units="nats")


def within(estimate, true):
    return bool(abs(estimate - true) <= TOLERANCE * max(true, 1.0))


def run_regimes(cases, family_cases=(), verbose=True):
    """One row per regime case (correlated Gaussians, `cases`) and per family case
    (`family_cases`): true MI, every estimate as analyze runs it, whether each estimate is
    within 5 % and whether the bound is at most the truth (``bound_covers``)."""
    rows = []
    if verbose:
        print(f"{'family':>9} {'regime':>36} {'n':>5} {'d':>4} {'rho':>6} {'par':>5} {'true':>8} {'gauss':>8} "
              f"{'ksg':>8} {'copula':>8} {'bound':>8}  (nats)")
    every = [("gaussian", regime, n, d, rho, step) for regime, n, d, rho, step in cases] + list(family_cases)
    for family, regime, n, d, rho, parameter in every:
        rng = np.random.default_rng(0)
        if family == "gaussian":  # as before the families: the same draws, the same rows
            x = rng.standard_normal((n, d))
            y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))
            if parameter:
                x, y = parameter * np.round(x / parameter), parameter * np.round(y / parameter)
            true = rounded_gaussian_mi(rho, parameter, d)
        else:
            x, y, true = family_samples(family, n, d, rho, parameter, rng)
        start = time.perf_counter()
        gauss, how, ksg = estimate_as_analyze(x, y)
        seconds = time.perf_counter() - start
        copula, copula_how, bound = new_estimates_as_analyze(x, y)
        rows.append({"regime": regime, "n": n, "d_per_side": d, "joint_dims": 2 * d, "rho": rho,
                     "grid_step": parameter if family == "gaussian" else 0.0,
                     "true_nats": true, "true_bits": true / np.log(2), "gaussian_nats": gauss,
                     "gaussian_method": how, "ksg_nats": ksg, "gaussian_within_5pct": within(gauss, true),
                     "ksg_within_5pct": within(ksg, true), "seconds": seconds, "family": family,
                     "degrees_of_freedom": parameter if family == "student-t" else "",
                     "copula_nats": copula, "copula_method": copula_how, "copula_within_5pct": within(copula, true),
                     "bound_nats": bound, "bound_covers": bool(bound <= true)})
        if verbose:
            r = rows[-1]
            marks = "/".join("ok" if r[f"{e}_within_5pct"] else "off" for e in ("gaussian", "ksg", "copula"))
            print(f"{family:>9} {regime:>36} {n:>5} {d:>4} {rho:>6} {parameter:>5} {true:>8.2f} {gauss:>8.2f} "
                  f"{ksg:>8.2f} {copula:>8.2f} {bound:>8.2f}  {marks} bound {'<=' if r['bound_covers'] else '>'} "
                  "true", flush=True)
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
        rows = run_regimes(QUICK_REGIME_CASES if args.quick else REGIME_CASES,
                           QUICK_FAMILY_CASES if args.quick else FAMILY_CASES)
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
