"""Small statistics that several experiment scripts share.

- :func:`clopper_pearson`: the exact binomial interval of a count: the coverage and the
  size that interval_coverage.py, change_coverage.py and copula_null_size.py report;
- :func:`rejection_columns`: a null's rejection rates with their intervals and a uniformity
  test of its p-values (copula_null_size.py, moment_null_size.py);
- :func:`detectable`: the smallest change a two-sided normal or t test detects with a given
  power (:data:`POWER` unless told), from the change's se: digits_lenet_seeds.py and
  digits_lenet_paired.py; :func:`law_quantile` is that test's quantile.
"""

from __future__ import annotations

from scipy import stats
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri
from scipy.stats import beta, kstest

__all__ = ["POWER", "clopper_pearson", "rejection_columns", "rejection_cells", "detectable", "law_quantile"]

#: The power at which a detectable change is reported.
POWER = 0.8


def clopper_pearson(hits, n, level=0.95):
    """The exact binomial interval of `hits` out of `n`."""
    a = (1 - level) / 2
    low = beta.ppf(a, hits, n - hits + 1) if hits else 0.0
    high = beta.ppf(1 - a, hits + 1, n - hits) if hits < n else 1.0
    return float(low), float(high)


def rejection_columns(p_values, alphas):
    """``rejected_A`` (the share of `p_values` at or below each A of `alphas`), its 95 %
    Clopper-Pearson interval (``rejected_A_low``, ``rejected_A_high``) and ``ks_uniform_p``
    (a Kolmogorov-Smirnov test that the p-values are uniform)."""
    n, out = len(p_values), {}
    for alpha in alphas:
        k = int((p_values <= alpha).sum())
        low, high = clopper_pearson(k, n)
        out.update({f"rejected_{alpha:g}": k / n, f"rejected_{alpha:g}_low": low, f"rejected_{alpha:g}_high": high})
    out["ks_uniform_p"] = float(kstest(p_values, "uniform").pvalue)
    return out


def rejection_cells(row):
    """The Markdown cells of :func:`rejection_columns` at 5 % and 1 %: "rate [low, high] | ... | KS p"."""
    return " | ".join([*(f"{row[f'rejected_{a}']:.1%} [{row[f'rejected_{a}_low']:.1%}, {row[f'rejected_{a}_high']:.1%}]"
                         for a in ("0.05", "0.01")), f"{row['ks_uniform_p']:.2g}"])


def law_quantile(q: float, df: int | None) -> float:
    """The `q` quantile of a test's law: normal (`df` None), or Student's t with `df` degrees of freedom."""
    return float(ndtri(q) if df is None else stats.t.ppf(q, df))


def detectable(se: float, level: float, df: int | None, power: float = POWER) -> float:
    """The smallest |change| that the two-sided test at `level` (normal, or t with `df`
    degrees of freedom: a change of delta se makes the statistic noncentral t) detects with
    probability `power`, given the change's se."""
    crit = law_quantile(1 - level / 2, df)

    def shortfall(delta):
        if df is None:
            got = ndtr(delta - crit) + ndtr(-delta - crit)
        else:
            got = stats.nct.sf(crit, df, delta) + stats.nct.sf(crit, df, -delta)  # both tails (cdf: NaN far out)
        return got - power

    return float(brentq(shortfall, 0.0, 2 * crit + 5, xtol=1e-10)) * se  # power is above 0.99 there
