"""Laws of one client's parameter vector for the null-size studies (copula_null_size.py,
moment_null_size.py): p standard normals mixed by a random matrix, under four copulas."""

from __future__ import annotations

import numpy as np

LAWS = ("gaussian", "student-t3", "scale-mixture", "ties")


def client(rng, n, p, law, mixing):
    """n runs of one client's p parameters under `law`: "gaussian" (the mixed normals),
    "student-t3" (divided by one sqrt(chi2_3 / 3) per run: a multivariate t), "scale-mixture"
    (times 1 or 4, one draw per run), "ties" (the Gaussian vector rounded to 0.25 sd)."""
    z = rng.standard_normal((n, p)) @ mixing
    if law == "student-t3":
        z = z / np.sqrt(rng.chisquare(3, size=(n, 1)) / 3)
    elif law == "scale-mixture":
        z = z * np.where(rng.random((n, 1)) < 0.5, 1.0, 4.0)
    elif law == "ties":
        z = np.round(z / (0.25 * z.std(axis=0))) * 0.25
    elif law != "gaussian":
        raise ValueError(f"`law` must be one of {LAWS}; got {law!r}")
    return z
