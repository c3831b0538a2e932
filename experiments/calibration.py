"""What an MI curve can tell you: estimators on correlated Gaussians with known MI, at the
experiments' sample sizes and dimensions.

X ~ N(0, I_d), Y = rho X + sqrt(1 - rho^2) E, so I(X;Y) = -d/2 log(1 - rho^2) exactly.

    python experiments/calibration.py [--quick]

Prints the table and writes figures/calibration/calibration.csv, with its provenance (versions,
machine, command line, times) in figures/calibration/calibration.csv.json.

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
Gaussian copula, same MI), the multivariate Student t (closed-form MI, not a Gaussian
copula), a discrete latent (4 well separated clusters shared by x and y: MI log 4) and a
sign mixture (each coordinate pair correlated by +rho or -rho: every correlation 0, the MI
positive); column ``family``. The last two have their exact MI by Monte Carlo of the known
densities (10^6 draws; its standard error in ``true_mc_se_nats``, 0 elsewhere). Writes
figures/calibration/calibration_regimes.csv (about 40 s on 2 idle cores, minutes when they are
shared; ``_quick`` with --quick, about 10 s) and its ``.csv.json`` sidecar;
:mod:`mianalysis.analysis.inference.regime` takes its thresholds from the full table (the
correlated Gaussians and, for the copula, the monotone maps: the other families show where
those thresholds do not reach).
"""

import argparse
import functools
import time

import numpy as np
from _results import figures_of, write_csv, write_sidecar

from mianalysis import gaussian_mi, ksg_mi, projection_mi_bound
from mianalysis.provenance import collect, utc_now
from mianalysis.analysis import gaussian_settings
from mianalysis.estimators.copula import normal_scores
from scipy.special import digamma, gammaln, logsumexp, ndtr

FIGURES = figures_of(__file__)  # figures/calibration/: where this script writes

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
    # "discrete-latent": `parameter` well separated clusters chosen by one uniform latent
    # (latent_samples; MI log(levels) within 1e-7 nats, rho unused); the last with fewer runs
    # than 2.2 x joint dims, where `auto` gives the bound.
    *[("discrete-latent", "discrete latent", n, d, 0.0, 4) for n, d in ((2000, 1), (2000, 3), (2000, 10), (400, 100))],
    # "mixture": every coordinate pair correlated by +rho or -rho, a fair sign drawn per pair
    # and run (sign_mixture_mi): all correlations 0, the MI d times that of one pair.
    *[("mixture", "sign mixture, zero correlation", n, d, rho, 0) for n, d, rho in
      ((2000, 1, 0.9), (2000, 1, 0.99), (2000, 3, 0.9), (2000, 10, 0.9), (400, 100, 0.9))],
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
                      ("student-t", "Student t", 1000, 1, 0.5, 3),
                      ("discrete-latent", "discrete latent", 1000, 3, 0.0, 4),
                      ("mixture", "sign mixture, zero correlation", 1000, 1, 0.9, 0)]
TOLERANCE = 0.05  # relative, of max(true MI, 1 nat)
# The discrete latent's clusters: level l at l x LATENT_SEPARATION sd along the diagonal.
LATENT_SEPARATION = 12.0
MC_DRAWS = 10**6  # Monte Carlo draws of the exact MI of the discrete latent and the mixture


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


@functools.lru_cache(maxsize=None)
def latent_mi(levels, separation=LATENT_SEPARATION, draws=MC_DRAWS, seed=0):
    """(MI, its Monte Carlo standard error) in nats of latent_samples with `levels` levels:
    the mean of the exact log density ratio over `draws` draws.

    Only the coordinate along the diagonal u carries the latent (the rest of x and of y is
    noise independent of everything), so I(x; y) = I(a; b) for a = l s + e, b = l s + e'
    (s the separation, e, e' standard normal), whatever the dimension. Bounds: I(x; y) <= H(L)
    = log(levels) (x - L - y is a Markov chain), and I(x; y) = I(x; L) - I(x; L | y) >= log(levels)
    - H(L | x) - H(L | y), where Fano gives H(L | x) <= h(P) + P log(levels - 1) for the
    nearest-centre error P <= 2 Phi(-s / 2): with s = 12, P <= 2.0e-9 and the MI is log(levels)
    within 1e-7 nats; the Monte Carlo value (log 4 - 4e-10, se 4e-10) agrees."""
    rng = np.random.default_rng(seed)
    centres = separation * np.arange(levels)
    latent = rng.integers(0, levels, size=draws)
    a, b = (centres[latent] + rng.standard_normal(draws) for _ in range(2))
    la, lb = (-0.5 * (v[:, None] - centres) ** 2 for v in (a, b))  # log densities up to constants
    ratio = logsumexp(la + lb, axis=1) - logsumexp(la, axis=1) - logsumexp(lb, axis=1) + np.log(levels)
    return float(ratio.mean()), float(ratio.std() / np.sqrt(draws))


def latent_samples(n, d, levels, rng, separation=LATENT_SEPARATION):
    """x, y of shape (n, d): one uniform latent L in {0, ..., levels - 1} per run, x = L s u + E,
    y = L s u + E' (u the unit diagonal, s = `separation`, E, E' standard normal)."""
    latent = rng.integers(0, levels, size=(n, 1))
    u = np.full(d, 1 / np.sqrt(d))
    return (separation * latent * u + rng.standard_normal((n, d)),
            separation * latent * u + rng.standard_normal((n, d)))


@functools.lru_cache(maxsize=None)
def sign_mixture_mi(rho, draws=MC_DRAWS, seed=0):
    """(MI, its Monte Carlo standard error) in nats of one coordinate pair of the sign
    mixture, (x, y) ~ N(0, [[1, rho], [rho, 1]]) or N(0, [[1, -rho], [-rho, 1]]) with equal
    weights: the mean over `draws` draws of the exact log density ratio,
    -log(1 - rho^2) / 2 - rho^2 (x^2 + y^2) / (2 (1 - rho^2)) + log cosh(rho x y / (1 - rho^2))
    (the marginals are standard normal). At rho = 0.9 it is 0.4088 (se 0.0007; quadrature on
    a grid: 0.4084), against 0.8304 for the correlated pair."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(draws)
    y = rng.choice([-1.0, 1.0], size=draws) * rho * x + np.sqrt(1 - rho**2) * rng.standard_normal(draws)
    t = np.abs(rho * x * y / (1 - rho**2))
    ratio = (-0.5 * np.log(1 - rho**2) - rho**2 * (x**2 + y**2) / (2 * (1 - rho**2))
             + t + np.log1p(np.exp(-2 * t)) - np.log(2))
    return float(ratio.mean()), float(ratio.std() / np.sqrt(draws))


def true_mc_se(family, d, rho, parameter):
    """Monte Carlo standard error (nats) of a family case's exact MI; 0 where it is closed
    form or quadrature."""
    if family == "discrete-latent":
        return latent_mi(parameter)[1]
    if family == "mixture":  # d pairs sharing one Monte Carlo value
        return d * sign_mixture_mi(rho)[1]
    return 0.0


def family_samples(family, n, d, rho, parameter, rng):
    """x, y of shape (n, d) of a family case and their exact MI in nats."""
    if family == "discrete-latent":
        return (*latent_samples(n, d, parameter, rng), latent_mi(parameter)[0])
    if family == "mixture":  # a fair sign per coordinate pair and run: d independent pairs
        x = rng.standard_normal((n, d))
        sign = rng.choice([-1.0, 1.0], size=(n, d))
        y = sign * rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))
        return x, y, d * sign_mixture_mi(rho)[0]
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
        print(f"{'family':>15} {'regime':>36} {'n':>5} {'d':>4} {'rho':>6} {'par':>5} {'true':>8} {'gauss':>8} "
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
                     "bound_nats": bound, "bound_covers": bool(bound <= true),
                     "latent_levels": parameter if family == "discrete-latent" else "",
                     "true_mc_se_nats": true_mc_se(family, d, rho, parameter)})
        if verbose:
            r = rows[-1]
            marks = "/".join("ok" if r[f"{e}_within_5pct"] else "off" for e in ("gaussian", "ksg", "copula"))
            print(f"{family:>15} {regime:>36} {n:>5} {d:>4} {rho:>6} {parameter:>5} {true:>8.2f} {gauss:>8.2f} "
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
