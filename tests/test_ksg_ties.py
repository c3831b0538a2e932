"""Ties and lattices in KSG's samples (mianalysis.estimators.ksg: ksg_ties, TiedSamplesWarning):
continuous samples pass, values on a grid and a client one step of fixed size from another are flagged."""

import warnings

import numpy as np
import pytest

from mianalysis import OutsideCalibrationWarning, TiedSamplesWarning, ksg_mi, ksg_ties
from mianalysis.estimators.ksg import TIE_THRESHOLD, KSGTies, duplicate_share

LR = 1e-5


def adam_like_grid(n_runs, d, seed=0):
    """Two clients one Adam step of size lr from one fixed start: every coordinate is start +- lr."""
    rng = np.random.default_rng(seed)
    start = rng.standard_normal(d)
    return (start + LR * rng.choice([-1.0, 1.0], size=(n_runs, d)),
            start + LR * rng.choice([-1.0, 1.0], size=(n_runs, d)))


def test_continuous_samples_are_not_flagged():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 5))
    ties = ksg_ties(x, 0.5 * x + rng.standard_normal((400, 5)))
    assert (ties.duplicate_share, ties.difference_share, ties.tied_share) == (0.0, 0.0, 0.0)
    assert not ties.flagged and ties.note == "" and ties.n_checked == 100 and ties.threshold == TIE_THRESHOLD


def test_values_on_a_grid_are_flagged():
    x, y = adam_like_grid(300, 8)
    ties = ksg_ties(x, y)
    assert ties.duplicate_share == 1.0 and ties.tied_share > 0.5  # every distance is 0 or 2 lr
    assert ties.flagged and ties.note.startswith("ties/lattice (KSG assumes continuous samples): repeated values 100%")


def test_a_client_on_a_lattice_around_another_is_flagged_through_the_differences():
    """A per-run start: each client's values are continuous across runs, but the two
    clients of a run are start +- lr, so y - x takes the values 0 and +-2 lr (Chebyshev
    distance exactly 2 lr)."""
    rng = np.random.default_rng(1)
    start = rng.standard_normal((300, 6))
    x = start + LR * rng.choice([-1.0, 1.0], size=start.shape)
    y = start + LR * rng.choice([-1.0, 1.0], size=start.shape)
    assert set(np.round(np.abs(x - y).max(axis=1) / LR, 6)) <= {0.0, 2.0}
    ties = ksg_ties(x, y)
    assert ties.duplicate_share == 0.0 and ties.tied_share < TIE_THRESHOLD
    assert ties.difference_share > 0.99 and ties.flagged and "repeated differences y - x" in ties.note
    assert np.isnan(ksg_ties(x, y[:, :4]).difference_share)  # only for equal sizes


def test_tied_neighbour_distances_on_an_integer_grid():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 5, size=(500, 1)).astype(float)
    y = x + rng.integers(0, 3, size=(500, 1))
    ties = ksg_ties(x, y, k=3)
    assert ties.tied_share > 0.9 and ties.flagged


def test_rounded_continuous_values_below_the_threshold_pass():
    """A few values tied by rounding are not a lattice: the noise breaks them harmlessly."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1000, 3))
    x[:20, 0] = x[20:40, 0]  # 40 of 3000 values repeated
    ties = ksg_ties(x, rng.standard_normal((1000, 3)))
    assert 0 < ties.duplicate_share < TIE_THRESHOLD and not ties.flagged


def test_duplicate_share_counts_every_repeated_entry_of_varying_columns():
    assert duplicate_share(np.array([[0.0, 1.0], [0.0, 2.0], [1.0, 3.0], [2.0, 4.0]])) == 0.25
    assert duplicate_share(np.array([[5.0, 1.0], [5.0, 1.0], [5.0, 2.0]])) == pytest.approx(2 / 3)  # col 0 is constant
    assert duplicate_share(np.ones((4, 2))) == 0.0


def test_ksg_mi_warns_on_a_lattice_and_not_on_continuous_samples():
    x, y = adam_like_grid(200, 4)
    with pytest.warns(TiedSamplesWarning, match="100% of the samples' values and 100% of their paired differences"):
        ksg_mi(x, y, random_state=0)
    with pytest.warns(TiedSamplesWarning, match=r"100% of the samples' values repeat .* tied or lie on a lattice"):
        ksg_mi(x, y[:, :3], random_state=0)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((200, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", OutsideCalibrationWarning)  # 200 runs: fewer than calibrated, said apart
        ksg_mi(a, a + rng.standard_normal((200, 4)), random_state=0)


def test_the_result_is_a_small_frozen_record():
    ties = KSGTies(0.0, float("nan"), 0.5, 10, 0.1)
    assert ties.flagged and ties.note.endswith("tied k-th neighbour distances 50%")
    with pytest.raises(AttributeError):
        ties.tied_share = 0.0  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"k": 0}, ValueError, "`k` must be"),
    ({"k": 2.5}, TypeError, "`k` must be an integer"),
    ({"threshold": 1.0}, ValueError, "`threshold` must be"),
    ({"max_rows": 0}, ValueError, "`max_rows` must be"),
])
def test_bad_settings_are_refused(kwargs, error, match):
    x, y = adam_like_grid(50, 2)
    with pytest.raises(error, match=match):
        ksg_ties(x, y, **kwargs)


def test_too_few_or_unpaired_samples_are_refused():
    with pytest.raises(ValueError, match="same number of samples"):
        ksg_ties(np.zeros((10, 2)), np.zeros((11, 2)))
    with pytest.raises(ValueError, match="`k` must be"):
        ksg_ties(np.arange(4.0), np.arange(4.0), k=3)


def test_analyze_marks_the_ksg_row_of_lattice_samples_outside_calibration(tmp_path):
    # Checkpoint 1 on a lattice (start +- lr per coordinate), checkpoint 2 continuous.
    import warnings

    from mianalysis import ParameterDump, analyze

    rng = np.random.default_rng(0)
    # 2 + 2 joint dimensions and 2,000 runs: inside KSG's calibrated regime but for the lattice.
    lattice = 1e-5 * rng.integers(-1, 2, size=(2, 2000, 2)).astype(np.float64)
    smooth = rng.standard_normal((2, 2000, 2))
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.stack([lattice[0], smooth[0]]),
                                                      "b": np.stack([lattice[1], smooth[0] + smooth[1]])},
                                     checkpoints=[1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = analyze(dump, estimators=["ksg"], metrics=[]).select("mi_ksg", "a", "b")
    assert [r["outside_calibration"] for r in rows] == [True, False]
    assert "ties/lattice" in rows[0]["note"] and "ties/lattice" not in rows[1]["note"]
