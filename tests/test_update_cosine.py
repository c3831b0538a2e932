"""The cosine similarity of clients' updates (parameters minus each run's start): the
kernel against closed forms and scipy, its edge cases, and the ``cosine_update`` rows of
an analysis (intervals, changes, notes, layers, resuming, the command line, the figure)."""

import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.spatial import distance

from mianalysis import ParameterDump, analyze, mean_update_cosine, update_cosines
from mianalysis.analysis.inference.intervals import mean_interval
from mianalysis.cli import main


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ---------------------------------------------------------------------------- the kernel
def test_agrees_with_scipy(rng):
    x0, y0 = rng.standard_normal((2, 40, 9))
    x, y = x0 + rng.standard_normal((40, 9)), y0 + rng.standard_normal((40, 9))
    want = np.array([1 - distance.cosine(a - a0, b - b0) for a, a0, b, b0 in zip(x, x0, y, y0)])
    np.testing.assert_allclose(update_cosines(x, y, x0, y0), want, rtol=1e-12, atol=1e-15)
    assert mean_update_cosine(x, y, x0, y0) == pytest.approx(want.mean(), rel=1e-12)


def test_identical_updates_give_one_and_opposite_minus_one(rng):
    x0, y0 = rng.standard_normal((2, 30, 5))
    u = rng.standard_normal((30, 5))
    np.testing.assert_allclose(update_cosines(x0 + u, y0 + u, x0, y0), 1.0, atol=1e-14)
    np.testing.assert_allclose(update_cosines(x0 + u, y0 - u, x0, y0), -1.0, atol=1e-14)
    start = np.zeros((30, 5))  # exact updates: the clipped result is exactly +-1
    assert np.all(update_cosines(u, u, start, start) == 1.0)
    assert np.all(update_cosines(u, -u, start, start) == -1.0)


def test_hand_computed_example():
    start = np.zeros((3, 2))
    got = update_cosines([[1, 0], [1, 1], [3, 4]], [[0, 5], [1, 0], [4, 3]], start, start)
    np.testing.assert_allclose(got, [0.0, 1 / np.sqrt(2), 24 / 25], rtol=1e-15)


@pytest.mark.parametrize("scale", [1e-300, 1e-8, 3.0, 1e8, 1e300])
def test_scale_invariance_at_any_magnitude(rng, scale):
    u, v = rng.standard_normal((2, 20, 4))
    start = np.zeros((20, 4))
    want = update_cosines(u, v, start, start)
    np.testing.assert_allclose(update_cosines(scale * u, v, start, start), want, rtol=1e-13)
    np.testing.assert_allclose(update_cosines(scale * u, scale * v, start, start), want, rtol=1e-13)
    np.testing.assert_allclose(update_cosines(-scale * u, v, start, start), -want, rtol=1e-13)
    # the whole problem scaled, starts included
    x0, y0 = rng.standard_normal((2, 20, 4))
    np.testing.assert_allclose(update_cosines(scale * (x0 + u), scale * (y0 + v), scale * x0, scale * y0),
                               update_cosines(x0 + u, y0 + v, x0, y0), rtol=1e-9)


def test_differences_that_overflow_and_updates_tiny_beside_large_parameters(no_warnings):
    big = np.finfo(np.float64).max / 1.5
    # x - x0 = 2 * big overflows float64: the update is still [1, 0] in direction
    got = update_cosines([[big, 0.0], [big, big]], [[1.0, 0.0], [1.0, 0.0]], [[-big, 0.0], [-big, -big]],
                         np.zeros((2, 2)))
    np.testing.assert_allclose(got, [1.0, 1 / np.sqrt(2)], rtol=1e-15)
    # an update of 1e-300 in a parameter beside one of 1e300 is not lost to the large one
    got = update_cosines([[1e300, 1e-300]], [[0.0, 2.0]], [[1e300, 0.0]], [[0.0, 0.0]])
    assert got[0] == 1.0


def test_zero_updates_are_nan_without_a_warning(rng, no_warnings):
    x0, y0 = rng.standard_normal((2, 6, 3))
    u, v = rng.standard_normal((2, 6, 3))
    x, y = x0 + u, y0 + v
    x[1], y[4] = x0[1], y0[4]  # client x does not move in run 1, client y in run 4
    got = update_cosines(x, y, x0, y0)
    assert np.isnan(got[[1, 4]]).all()
    keep = [0, 2, 3, 5]
    np.testing.assert_allclose(got[keep], update_cosines(x[keep], y[keep], x0[keep], y0[keep]), rtol=1e-15)
    assert mean_update_cosine(x, y, x0, y0) == pytest.approx(got[keep].mean(), rel=1e-15)
    assert np.isnan(mean_update_cosine(x0, y, x0, y0))  # every run has a zero update
    assert np.isnan(update_cosines(x0, y0, x0, y0)).all()  # the start itself


@pytest.mark.parametrize("args, error, match", [
    ((np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 3)), np.ones((3, 2))), ValueError,
     r"`x_start` must have the shape of `x` and `y` .* got \(3, 3\) for \(3, 2\)"),
    ((np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2)), np.ones((2, 2))), ValueError,
     r"`y_start` must have the shape of `x` and `y`"),
    ((np.ones((3, 2)), np.ones((4, 2)), np.ones((3, 2)), np.ones((3, 2))), ValueError,
     r"`x` and `y` must have the same shape"),
    ((np.ones((3, 2)), np.ones((3, 2)), np.full((3, 2), np.nan), np.ones((3, 2))), ValueError,
     r"`x_start` contains non-finite values"),
    ((np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2), complex)), TypeError,
     r"`y_start` must be real"),
    ((np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2)), "start"), TypeError, r"`y_start` must be a numeric array"),
])
def test_bad_input_is_named(args, error, match):
    with pytest.raises(error, match=match):
        update_cosines(*args)


# ---------------------------------------------------------------------------- analysis rows
def _dump(tmp_path, a, b, name="d", **kwargs):
    return ParameterDump.from_arrays(tmp_path / name, {"a": a, "b": b}, **kwargs)


def _cosines(a, b, t, cols=slice(None)):
    """Per-run cosines at checkpoint index t of the samples `a`, `b` as a dump stores them (float32)."""
    s = [np.asarray(x[i][:, cols], dtype=np.float32).astype(np.float64) for i in (t, 0) for x in (a, b)]
    return update_cosines(s[0], s[1], s[2], s[3])


def test_rows_known_answers_intervals_and_changes(tmp_path, rng, no_warnings):
    n, d = 300, 6
    start = rng.standard_normal((n, d))
    u = rng.standard_normal((n, d))
    # iteration 0: the start; 1: identical updates; 2: opposite ones; 3: unrelated ones
    a = np.stack([start, start + u, start + 2 * u, start + rng.standard_normal((n, d))])
    b = np.stack([start, start + u, start - u, start + rng.standard_normal((n, d))])
    dump = _dump(tmp_path, a, b)
    table = analyze(dump, estimators=[], metrics=["euclidean", "cosine_update"])
    rows = table.select("cosine_update", "a", "b")
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert np.isnan(rows[0]["value"]) and np.isnan(rows[0]["ci_low"]) and np.isnan(rows[0]["spread"])
    assert "the run's start (iteration 0): every update is zero" in rows[0]["note"]
    assert rows[1]["value"] == pytest.approx(1.0, abs=1e-6) and rows[2]["value"] == pytest.approx(-1.0, abs=1e-6)
    for r in rows[1:]:  # the mean over runs, Student's t interval clipped to [-1, 1]
        per_run = _cosines(a, b, r["checkpoint"])
        assert r["value"] == pytest.approx(per_run.mean(), rel=1e-12)
        assert r["spread"] == pytest.approx(per_run.std(ddof=1), rel=1e-9, abs=1e-12)
        expected = mean_interval(per_run, t=True, bounds=(-1, 1))[1:]
        assert (r["ci_low"], r["ci_high"]) == pytest.approx(expected, rel=1e-12, abs=1e-12)
        assert r["note"] == ""
    assert rows[3]["ci_low"] < 0 < rows[3]["ci_high"]
    assert table.settings["metrics"] == ["euclidean", "cosine_update"]
    assert table.settings["ci_method"]["cosine_update"] == "t, clipped"

    deltas = table.select("delta_cosine_update", "a", "b")
    assert [r["iteration"] for r in deltas] == [1, 2, 3]
    first = deltas[0]  # from the start: undefined, said so, no verdict
    assert np.isnan(first["value"]) and np.isnan(first["change_p"])
    assert "no change from the run's start" in first["note"] and first["verdict"] == "not made: no interval"
    change = _cosines(a, b, 2) - _cosines(a, b, 1)
    step = deltas[1]
    assert step["value"] == pytest.approx(change.mean(), rel=1e-12)
    expected = mean_interval(change, t=True, bounds=(-2, 2))[1:]
    assert (step["ci_low"], step["ci_high"]) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert step["change_se"] == pytest.approx(change.std(ddof=1) / np.sqrt(n), rel=1e-9, abs=1e-15)
    assert step["verdict"] == "falling" and step["family_verdict"] == "falling"
    assert deltas[2]["verdict"] == "rising" and np.isfinite(deltas[2]["p_adjusted"])


def test_intervals_of_a_few_runs_stay_in_range_and_use_t(tmp_path, rng, no_warnings):
    """4 runs: the normal interval of the mean cosine went past 1 (ci [-0.025, 1.332]); the
    interval is Student's t with 3 degrees of freedom, clipped to [-1, 1] ([-2, 2] for a change)."""
    n, d = 4, 3
    start = rng.standard_normal((n, d))
    u = rng.standard_normal((n, d))
    w = u.copy()
    v = rng.standard_normal(d)
    w[0] = v - (v @ u[0]) / (u[0] @ u[0]) * u[0]  # cosines (0, 1, 1, 1): mean 0.75, the normal interval past 1
    a = np.stack([start, start + u, start - u])
    b = np.stack([start, start + w, start + w])
    table = analyze(_dump(tmp_path, a, b), estimators=[], metrics=["euclidean", "cosine_update"])
    rows = table.select("cosine_update", "a", "b")[1:]
    deltas = table.select("delta_cosine_update", "a", "b")[1:]
    assert all(-1 <= r["ci_low"] <= r["value"] <= r["ci_high"] <= 1 for r in rows)
    assert all(-2 <= r["ci_low"] <= r["value"] <= r["ci_high"] <= 2 for r in deltas)
    per_run = _cosines(a, b, 1)
    se = per_run.std(ddof=1) / 2
    assert rows[0]["ci_high"] == 1.0 and per_run.mean() + 1.96 * se > 1  # clipped: the normal one went past 1
    assert rows[0]["ci_low"] == pytest.approx(per_run.mean() - stats.t.ppf(0.975, 3) * se, rel=1e-9)
    change = _cosines(a, b, 2) - per_run
    se = change.std(ddof=1) / 2
    assert deltas[0]["change_p"] == pytest.approx(2 * stats.t.sf(abs(change.mean()) / se, 3), rel=1e-9)
    # the distances keep the normal interval
    dist = table.select("euclidean", "a", "b")[1]
    per_run = np.linalg.norm(np.asarray(a[1], np.float32) - np.asarray(b[1], np.float32), axis=1)
    assert (dist["ci_low"], dist["ci_high"]) == pytest.approx(mean_interval(per_run)[1:], rel=1e-5)


def test_independent_updates_have_cosine_near_zero_with_sd_one_over_root_d(tmp_path, no_warnings):
    rng = np.random.default_rng(3)
    n, d = 400, 200
    start = rng.standard_normal((n, d))
    a = np.stack([start, start + rng.standard_normal((n, d))])
    b = np.stack([start, start + rng.standard_normal((n, d))])
    row = analyze(_dump(tmp_path, a, b), estimators=[], metrics=["cosine_update"]).select("cosine_update")[1]
    assert row["ci_low"] < 0 < row["ci_high"]
    # cos of independent isotropic updates has mean 0 and variance 1 / d exactly
    assert row["spread"] == pytest.approx(1 / np.sqrt(d), rel=0.1)
    assert row["ci_high"] - row["ci_low"] == pytest.approx(2 * 1.96 / np.sqrt(d * n), rel=0.1)


def test_zero_update_runs_are_left_out_and_named(tmp_path, rng, no_warnings):
    n, d = 50, 3
    start = rng.standard_normal((n, d))
    a1, b1 = start + rng.standard_normal((n, d)), start + rng.standard_normal((n, d))
    a1[[2, 7]] = start[[2, 7]]  # client a does not move in two runs
    b1[7] = start[7]
    a2 = start.copy()  # and not at all at the last checkpoint
    b2 = start + rng.standard_normal((n, d))
    a, b = np.stack([start, a1, a2]), np.stack([start, b1, b2])
    table = analyze(_dump(tmp_path, a, b), estimators=[], metrics=["cosine_update"])
    rows = table.select("cosine_update")
    per_run = _cosines(a, b, 1)
    assert np.isnan(per_run[[2, 7]]).all() and np.isfinite(np.delete(per_run, [2, 7])).all()
    assert rows[1]["value"] == pytest.approx(np.nanmean(per_run), rel=1e-12)
    assert rows[1]["ci_low"] == pytest.approx(mean_interval(per_run[np.isfinite(per_run)], t=True)[1], rel=1e-12)
    assert rows[1]["note"] == ("mean over 48 of 50 runs: 2 left out, where an update is zero (client 'a' in 2 runs, "
                               "client 'b' in 1 run); a zero update has no direction")
    assert np.isnan(rows[2]["value"]) and np.isnan(rows[2]["ci_low"])
    assert rows[2]["note"].startswith("undefined (NaN): an update is zero in every run (client 'a' in 50 runs)")
    assert np.isnan(table.select("delta_cosine_update")[1]["value"])


def test_a_dump_without_a_start_checkpoint_is_refused_before_any_file(tmp_path, rng):
    a, b = rng.standard_normal((2, 2, 10, 3))
    dump = _dump(tmp_path, a, b, checkpoints=[5, 10])
    with pytest.raises(ValueError, match=r"`metrics` 'cosine_update' compares the clients' updates since each "
                                         r"run's start, the checkpoint at iteration 0; dump .* has no such "
                                         r"checkpoint \(iterations \[5, 10\]\)"):
        analyze(dump, estimators=[], metrics=["euclidean", "cosine_update"], out=tmp_path / "t.csv")
    assert not list(tmp_path.glob("t.csv*"))
    assert analyze(dump, estimators=[], metrics=["euclidean"]).select("euclidean")  # distances need no start


def test_not_in_the_default_metrics(tmp_path, rng):
    a, b = rng.standard_normal((2, 2, 20, 2))
    table = analyze(_dump(tmp_path, a, b), estimators=["gaussian"])
    assert not table.select("cosine_update") and "cosine_update" not in table.settings["ci_method"]
    with pytest.raises(ValueError, match="`metrics` must be one of .*'cosine_update'; got 'cosine'"):
        analyze(_dump(tmp_path, a, b, "e"), metrics=["cosine"])


def test_by_layer_uses_each_tensor_alone(tmp_path, rng):
    n = 40
    start = rng.standard_normal((n, 5))
    a = np.stack([start, start + rng.standard_normal((n, 5))])
    b = np.stack([start, start + rng.standard_normal((n, 5))])
    dump = _dump(tmp_path, a, b, layout=[("w", (2, 2)), ("b", (1,))])
    table = analyze(dump, estimators=[], metrics=["cosine_update"], by="layer")
    for layer, cols in (("w", slice(0, 4)), ("b", slice(4, 5))):
        row = table.select("cosine_update", "a", "b", layer=layer)[1]
        assert row["value"] == pytest.approx(np.nanmean(_cosines(a, b, 1, cols)), rel=1e-12)
    whole = analyze(dump, estimators=[], metrics=["cosine_update"], layer="w").select("cosine_update")[1]
    assert whole["value"] == table.select("cosine_update", "a", "b", layer="w")[1]["value"]


def test_a_resumed_analysis_gives_the_same_rows(tmp_path, rng, monkeypatch):
    from mianalysis.analysis import journal

    n = 30
    start = rng.standard_normal((n, 3))
    a = np.stack([start + k * rng.standard_normal((n, 3)) for k in range(4)])
    b = np.stack([start + k * rng.standard_normal((n, 3)) for k in range(4)])
    dump = _dump(tmp_path, a, b)
    kwargs = {"estimators": [], "metrics": ["cosine_update"]}
    whole = analyze(dump, **kwargs)
    append = journal.Journal.append

    def append_then_stop(self, t, rows):  # interrupted once checkpoint 2 is saved
        append(self, t, rows)
        if t == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(journal.Journal, "append", append_then_stop)
    with pytest.raises(KeyboardInterrupt):
        analyze(dump, out=tmp_path / "t.csv", **kwargs)
    monkeypatch.setattr(journal.Journal, "append", append)
    resumed = analyze(dump, out=tmp_path / "t.csv", **kwargs)  # checkpoint 3's change needs 2's per-run values again
    key = [(r["quantity"], r["iteration"]) for r in whole]
    assert [(r["quantity"], r["iteration"]) for r in resumed] == key
    np.testing.assert_allclose([[r["value"], r["ci_low"], r["ci_high"]] for r in resumed],
                               [[r["value"], r["ci_low"], r["ci_high"]] for r in whole], rtol=1e-12)


def test_a_sampler_dump_measures_from_its_fixed_or_per_run_start(tmp_path):
    pytest.importorskip("torch")
    from mianalysis import ParameterSampler
    from mianalysis.tasks import TASKS

    for init in ("per-run", "fixed"):
        task = TASKS["gaussian-sgd"]()
        dump = ParameterSampler(task, init=init, progress=False).sample(12, tmp_path / init)
        assert dump.checkpoints[0] == 0  # the sampler records every run's start
        table = analyze(dump, estimators=[], metrics=["cosine_update"])
        rows = table.select("cosine_update", dump.clients[0], dump.clients[1])
        assert np.isnan(rows[0]["value"]) and all(-1 <= r["value"] <= 1 for r in rows[1:])


# ---------------------------------------------------------------------------- command line and figure
def test_cli_analyze_and_plot_cosine_update(tmp_path, rng, capsys):
    pytest.importorskip("matplotlib")
    n = 40
    start = rng.standard_normal((n, 4))
    u = rng.standard_normal((n, 4))
    _dump(tmp_path, np.stack([start, start + u, start + u]), np.stack([start, start + u, start - u]))
    out = tmp_path / "t.csv"
    assert main(["analyze", str(tmp_path / "d"), "--out", str(out), "--no-progress", "--estimators", "gaussian",
                 "--metrics", "euclidean", "cosine_update"]) == 0
    printed = capsys.readouterr().out
    assert "cosine_update a-b: falling (2: falling)" in printed  # identical directions at 1, opposite at 2
    from mianalysis.analysis import AnalysisTable

    table = AnalysisTable.read(out)
    rows = table.select("cosine_update", "a", "b")
    assert np.isnan(rows[0]["value"]) and rows[1]["value"] == pytest.approx(1.0, abs=1e-6)
    assert main(["plot", str(out), "--out", str(tmp_path / "f.png"), "--kind", "distances"]) == 0
    assert (tmp_path / "f.png").stat().st_size > 1000
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "u.csv"), "--no-progress",
                 "--metrics", "cosine"]) == 2
    assert "`metrics` must be one of 'euclidean', 'manhattan', 'chebyshev', 'cosine_update'; got 'cosine'" in \
        capsys.readouterr().err


def test_cli_dump_without_a_start_is_a_one_line_error(tmp_path, rng, capsys):
    a, b = rng.standard_normal((2, 2, 10, 3))
    _dump(tmp_path, a, b, checkpoints=[1, 2])
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "t.csv"), "--no-progress",
                 "--metrics", "cosine_update"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no such checkpoint (iterations [1, 2])" in err


def test_figure_draws_the_cosine_beside_the_distances_on_minus_one_to_one(tmp_path, rng, no_warnings):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from mianalysis.report.plots import check_drawable, figure_distances

    n = 40
    start = rng.standard_normal((n, 4))
    a = np.stack([start, start + rng.standard_normal((n, 4)), start + rng.standard_normal((n, 4))])
    b = np.stack([start, start + rng.standard_normal((n, 4)), start + rng.standard_normal((n, 4))])
    dump = _dump(tmp_path, a, b)
    both = analyze(dump, estimators=[], metrics=["euclidean", "cosine_update"])
    fig = figure_distances(both)
    axes = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in axes] == ["Euclidean distance", "Cosine similarity of updates"]
    cos_ax = axes[1]
    assert cos_ax.get_ylim() == pytest.approx((-1.05, 1.05)) and cos_ax.get_yticks().tolist() == [-1, -0.5, 0, 0.5, 1]
    line = cos_ax.get_lines()[-1]  # the pairs' mean: no point at the start, where the cosine is undefined
    np.testing.assert_array_equal(line.get_xdata(), [1, 2])
    np.testing.assert_allclose(line.get_ydata(), [r["value"] for r in both.select("cosine_update")[1:]])
    assert cos_ax.get_xlim() == pytest.approx(axes[0].get_xlim())  # the start keeps its place, as beside it
    assert "no cosine: zero updates (the start)" in cos_ax.get_legend_handles_labels()[1]
    plt.close(fig)
    only = analyze(dump, estimators=[], metrics=["cosine_update"])
    check_drawable(only, "distances")  # a table of cosines alone has something to draw
    fig = figure_distances(only)
    assert len(fig.axes) == 4 and [ax.get_title() for ax in fig.axes if ax.axison] == ["Cosine similarity of updates"]
    plt.close(fig)
    plain = analyze(dump, estimators=[], metrics=["euclidean"])
    fig = figure_distances(plain)
    assert len(fig.axes) == 3  # tables without it draw as before
    plt.close(fig)


def test_the_start_samples_never_travel_with_the_job(tmp_path, rng):
    import pickle

    from mianalysis.analysis.compute import CheckpointAnalysis
    from mianalysis.analysis.validate import check_request

    start = rng.standard_normal((20, 3))
    dump = _dump(tmp_path, np.stack([start, start + 1.0]), np.stack([start, start - 1.0]))
    request = check_request(dump, estimators=[], metrics=["cosine_update"], k=3, n_permutations=0, layer=None,
                            by=None, standardize=True, random_state=0, distance_cache="auto", verify=True, force=False,
                            gaussian_null="permutation", ci_resamples=None, ci_level=0.95)
    job = CheckpointAnalysis(dump, request)
    part = job(1)
    assert job._starts  # read once here ...
    sent = pickle.loads(pickle.dumps(job))
    assert sent._starts == {}  # ... and again where a copy runs
    assert sent(1)[1][0][1] == part[1][0][1]
    assert part[1][0][1][0]["value"] == pytest.approx(-1.0, abs=1e-6)
