"""experiments/aggregation_headroom.py chooses every rule's learning rate on a validation split
held out of the training examples, never on the test split it reports."""

import numpy as np
import pytest

from mianalysis.federated import FederatedData
from test_plots_legends import _experiment


def test_the_search_ranks_rates_by_the_validation_split_alone():
    script = _experiment("aggregation_headroom")
    assert script.FULL["validation"] > 0 and script.QUICK["validation"] > 0
    good_on_test = {"acc": np.array([[0.1, 0.9]]), "loss": np.array([[2.0, 0.1]]),
                    "val_acc": np.array([[0.1, 0.5]]), "val_loss": np.array([[2.0, 1.0]])}
    good_on_validation = {"acc": np.array([[0.1, 0.5]]), "loss": np.array([[2.0, 1.0]]),
                          "val_acc": np.array([[0.1, 0.9]]), "val_loss": np.array([[2.0, 0.1]])}
    assert script.score(good_on_validation) > script.score(good_on_test)
    assert set(script.summary(good_on_test)) == {"final_val_accuracy", "final_val_loss"}


def test_the_validation_split_is_held_out_of_the_clients_and_the_test_set_is_untouched():
    plain, held = FederatedData.digits(5, seed=0), FederatedData.digits(5, seed=0, validation=0.2)
    np.testing.assert_array_equal(plain.x_test, held.x_test)
    assert len(held.y_train) + len(held.y_val) == len(plain.y_train)
    pool = {x.tobytes() for x in held.x_train}
    assert not any(x.tobytes() in pool for x in held.x_val)
    assert np.all(np.bincount(held.y_val, minlength=10) > 0)  # stratified: every class
    with pytest.raises(ValueError, match="`validation` must be a share in"):
        FederatedData.digits(5, validation=1.0)


def test_the_findings_quote_the_committed_tables_only_significant_differences():
    """The two per-comparison accuracy differences whose 95 % interval excludes 0 in
    figures/aggregation_headroom/aggregation_headroom.csv are the two that docs/results/findings.md and
    docs/results/federated.md quote, both below FedAvg."""
    import csv
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with open(root / "figures" / "aggregation_headroom" / "aggregation_headroom.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["d_accuracy_low"]]
    excluded = [r for r in rows if float(r["d_accuracy_low"]) > 0 or float(r["d_accuracy_high"]) < 0]
    assert excluded and all(float(r["d_accuracy_high"]) < 0 for r in excluded)
    pages = [" ".join((root / "docs" / "results" / name).read_text().split()) for name in ("findings.md",
                                                                                          "federated.md")]
    for r in excluded:
        quoted = f"{float(r['d_accuracy']):.3f} [{float(r['d_accuracy_low']):.3f}, {float(r['d_accuracy_high']):.3f}]"
        assert all(quoted in page for page in pages), quoted
