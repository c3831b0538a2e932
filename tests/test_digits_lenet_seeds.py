"""experiments/digits_lenet_seeds.py: the replication family over seeds and pairs, the law of
each step's test, the power it reports, and its committed table recomputed from the seeds'
committed tables."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    """The script, imported from experiments/ (on the path: tests/conftest.py)."""
    import digits_lenet_seeds

    return digits_lenet_seeds


def test_detectable_change_has_the_stated_power(script):
    # Normal: the two-sided test at 0.05 rejects a change of d with probability 0.8.
    se = 0.01
    d = script.detectable(se, 0.05, None)
    assert d == pytest.approx(0.028016, abs=1e-6)  # (1.959964 + 0.841621) se, the far tail adding 1e-6
    assert stats.norm.sf(1.959964 - d / se) + stats.norm.cdf(-1.959964 - d / se) == pytest.approx(0.8, abs=1e-6)
    # t with 9 degrees of freedom at 0.05 / 27: the noncentral t's power, wider than normal.
    d9 = script.detectable(se, 0.05 / 27, 9)
    crit = stats.t.ppf(1 - 0.05 / 27 / 2, 9)
    assert stats.nct.sf(crit, 9, d9 / se) + stats.nct.sf(crit, 9, -d9 / se) == pytest.approx(0.8, abs=1e-6)
    assert d9 > script.detectable(se, 0.05 / 27, None) > d


def _step(seed, pair, iteration, change, se, df=9, cell="fixed-augmentation-26400"):
    p = 2 * stats.t.sf(abs(change) / se, df)
    return {"seed": seed, "cell": cell, "runs": 26400, "quantity": "mi_ksg", "pair": pair, "iteration": iteration,
            "change": change, "se": se, "p": p, "p_pair": p, "verdict_pair": "", "mi_minus_null": 0.0}


def test_replication_is_holm_over_every_seed_and_pair_of_a_cell(script):
    steps = [_step(s, pair, t, c, 0.01) for s, c0 in enumerate((0.07, -0.06, 0.005))
             for pair, t, c in (("0-1", 4, c0), ("0-2", 3, c0 / 4))]
    steps.append(_step(0, "0-1", 4, 0.001, 0.01, cell="fixed-nothing-26400"))
    rows = script.replication(steps)
    aug = [r for r in rows if r["cell"] == "fixed-augmentation-26400"]
    np.testing.assert_allclose([r["p_replication"] for r in aug], _holm([r["p"] for r in aug]), rtol=1e-12)
    assert {r["family_size"] for r in aug} == {6} and rows[-1]["family_size"] == 1
    verdicts = [r["verdict_replication"] for r in aug]
    assert verdicts == ["rising", "no detectable change", "falling"] + ["no detectable change"] * 3
    assert all(r["df"] == 9 for r in rows)
    assert aug[0]["interval_half_width_in_family"] == pytest.approx(stats.t.ppf(1 - 0.05 / 6 / 2, 9) * 0.01)


def _holm(p):
    """Holm's adjusted p-values, written out: the running max of (m - i) p_(i), capped at 1."""
    p = np.asarray(p)
    order = np.argsort(p)
    adjusted = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    out = np.empty_like(p)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def test_holm_helper_known_answer():
    np.testing.assert_allclose(_holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])


def test_replication_refuses_p_values_of_another_law(script):
    # A KSG step whose p is a normal test's is not what the analysis' defaults make; so is
    # one whose t test is not of KSG's 10 halves (19 degrees of freedom: 20 resamples).
    normal = {**_step(0, "0-2", 4, 0.05, 0.02), "p": 2 * stats.norm.sf(2.5)}
    with pytest.raises(ValueError, match=r"pair 0-2, into iteration 4: p = 0.0124193 is not the t with 9 degrees "
                                         r"of freedom test .*gives 0.03386"):
        script.replication([_step(0, "0-1", 4, 0.05, 0.02), normal])
    with pytest.raises(ValueError, match="not the t with 9 degrees of freedom test"):
        script.replication([_step(1, "1-2", 3, 0.05, 0.02, df=19)])
    # Near p = 1 the laws agree: no false alarm there.
    assert script.replication([{**_step(0, "0-1", 2, 0.00003, 0.01), "p": 2 * stats.norm.sf(0.003)}])


def test_a_table_without_the_step_columns_is_refused(script, tmp_path):
    (tmp_path / "digits_lenet_paper.csv").write_text("cell,quantity\nfixed-nothing-26400,mi_ksg\n")
    with pytest.raises(ValueError, match=r"missing columns \[.*'step_p'.*\]: not a table of digits_lenet_paper"):
        script.made_steps(script.seed_tables(tmp_path))


def test_committed_table_recomputes_from_the_seeds_committed_tables(script, tmp_path):
    assert script.main(["--out", str(tmp_path)]) == 0
    with (ROOT / "figures" / "digits_lenet_seeds" / "digits_lenet_seeds.csv").open(newline="") as fh:
        committed = list(csv.DictReader(fh))
    with (tmp_path / "digits_lenet_seeds.csv").open(newline="") as fh:
        made = list(csv.DictReader(fh))
    assert made == committed
    page = (ROOT / "docs" / "results" / "tables" / "digits_lenet_seeds.md").read_text()
    assert (tmp_path / "digits_lenet_seeds.md").read_text() == page
    # The rise into iteration 4 of the shared-augmentation cell: every seed and pair after
    # Holm over the replication family; the control: no step verdict at all.
    into4 = [r for r in made if r["cell"] == "fixed-augmentation-26400" and r["quantity"] == "mi_ksg"
             and r["iteration"] == "4"]
    assert len(into4) == 3 * len({r["seed"] for r in into4}) >= 9
    assert all(r["verdict_replication"] == "rising" for r in into4)
    control = [r for r in made if r["cell"] == "fixed-nothing-26400"]
    assert control and all(r["verdict_replication"] == "no detectable change" for r in control)
    assert all(math.isfinite(float(r["detectable_in_family"])) for r in made)
    # From a per-run start (a start shared within a run, nothing else or the augmentation):
    # the KSG MI falls at every made step of every seed and pair, the loss the design forces.
    per_run = [r for r in made if r["cell"].startswith("per-run-") and r["quantity"] == "mi_ksg"]
    assert {r["cell"] for r in per_run} == {"per-run-augmentation-26400", "per-run-nothing-26400"}
    assert all(r["verdict_replication"] == "falling" for r in per_run)
    for cell in ("per-run-augmentation-26400", "per-run-nothing-26400"):
        steps = sum(r["cell"] == cell for r in per_run)
        assert f"**{cell}, mi_ksg** (" in page and f"{steps} made steps; after Holm over all of them: 0 rising, " \
            f"{steps} falling" in page
