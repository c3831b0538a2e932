import re

import numpy as np
import pytest

from mianalysis.analysis import AnalysisTable
from mianalysis.cli import main
from mianalysis.dumps import ParameterDump


def test_version(capsys):
    import mianalysis

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"mianalysis {mianalysis.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", mianalysis.__version__)


def test_estimator_demo_prints_table(capsys, monkeypatch):
    import inspect
    import math

    from mianalysis.report import demo

    # The command prints estimator_table's default cases: four, of 5000 samples each (4 s, 84 KSG
    # estimates). Here the command runs the same cases with 1000 samples (under a second).
    assert [n for n, _, _ in demo.DEFAULT_CASES] == [5000] * 4
    assert inspect.signature(demo.estimator_table).parameters["cases"].default is demo.DEFAULT_CASES
    cases = tuple((1000, d, rho) for _, d, rho in demo.DEFAULT_CASES)
    table = demo.estimator_table
    monkeypatch.setattr(demo, "estimator_table", lambda *, seed: table(cases, seed=seed))  # the CLI passes seed only
    assert main(["demo", "--estimators-only"]) == 0
    out = capsys.readouterr().out
    assert "exact" in out and "ksg" in out
    # Four cases, each row with 10 columns.
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("1000")]
    assert len(rows) == 4 and all(len(r) == 10 for r in rows)
    for row, (_, d, rho) in zip(rows, cases):
        exact = -d / 2 * math.log2(1 - rho**2)
        assert row[1] == f"{d}+{d}" and float(row[3]) == pytest.approx(exact, abs=5e-4)
        assert float(row[5]) == pytest.approx(exact, abs=0.15)  # the bias-corrected Gaussian estimate (seed 0)
        if rho > 0:  # dependent: no shuffle of 20 comes near, the p-value floor 1/21
            assert float(row[8]) == float(row[9]) == 0.048
        else:
            assert float(row[8]) > 0.05 and float(row[9]) > 0.05
    assert float(rows[2][4]) > float(rows[2][5]) + 1  # 50 + 50 dims: the plug-in's upward bias, corrected


def test_demo_runs_the_main_job(tmp_path, capsys, single_threaded_torch):
    # PyTorch on one thread: the same demo, about 3x faster when the suite's other worker shares the 2 cores
    # 40 runs: the fewest for which the demo's default, the bound, is inside its own regime (halves of 20 runs)
    assert main(["demo", "--runs", "40", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "iterations per epoch" in out and "distances growing" in out
    # What a reader needs: the run time, the design's consequence, why iteration 0 is infinite, the p floor.
    assert re.search(r"sampled, analysed and drawn in \d+ s", out)
    assert "design: per-run start, no stream shared" in out and "can only be lost" in out
    assert "iteration 0" in out and "infinite" in out
    assert "never below 1/(shuffles + 1): 1/101 = 0.010 for copula, 1/21 = 0.048 for bound, 1/101 = 0.010 for ksg" \
        in out
    # analyze's default ("auto"): 40 runs of 716 dims give the bound, and every line says which and why
    assert "bound, a lower bound (40 runs < 2.2 x 716 joint dims: no calibrated estimate)" in out
    for name in ("signal_rnn_demo.csv", "signal_rnn_demo_mi.png", "signal_rnn_demo_distances.png"):
        assert (tmp_path / name).exists()
    # Every MI row of the demo's default estimators is a labelled bound, none outside calibration.
    from mianalysis.analysis import AnalysisTable

    mi = [r for r in AnalysisTable.read(tmp_path / "signal_rnn_demo.csv") if r["quantity"].startswith("mi_")]
    assert mi and all(r["estimate_kind"] == "bound" and not r["outside_calibration"] for r in mi)
    # 5 checkpoints (0, 2, 4, 6, 8) x 3 pairs in the summary
    assert sum(1 for line in out.splitlines() if line.strip()[:1].isdigit() and "-" in line.split()[1]) == 15


@pytest.fixture
def pair(tmp_path, rng):
    x = rng.standard_normal((200, 2))
    y = x + 0.5 * rng.standard_normal((200, 2))
    np.save(tmp_path / "x.npy", x)
    np.savetxt(tmp_path / "y.txt", y)
    return tmp_path / "x.npy", tmp_path / "y.txt", x, y


def test_estimate_ksg(pair, capsys):
    from mianalysis import ksg_mi

    xp, yp, x, y = pair
    assert main(["estimate", str(xp), str(yp), "--estimator", "ksg", "-k", "4", "--units", "nats", "--seed", "3"]) == 0
    out = capsys.readouterr().out  # 200 runs: outside KSG's calibrated regime, and said so (never "MI =")
    assert out.startswith("ksg gives ") and "nats (outside calibration): 200 runs x 4 joint dims: < 2000 runs" in out
    value = float(out.split()[2])
    with pytest.warns(UserWarning, match="outside its calibrated regime"):
        assert value == pytest.approx(ksg_mi(x, np.loadtxt(yp), k=4, units="nats", random_state=3), rel=1e-5)


def test_estimate_gaussian_with_permutations(pair, capsys):
    xp, yp, _, _ = pair
    assert main(["estimate", str(xp), str(yp), "--estimator", "gaussian", "--permutations", "9", "--seed", "1"]) == 0
    assert "p = 0.1 (9 permutations)" in capsys.readouterr().out


def test_missing_file_is_one_line_error(tmp_path, capsys):
    assert main(["estimate", str(tmp_path / "nope.npy"), str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mianalysis estimate: error: cannot read `x`") and err.count("\n") == 1


def test_bad_k_is_one_line_error(pair, capsys):
    xp, yp, _, _ = pair
    assert main(["estimate", str(xp), str(yp), "--estimator", "ksg", "-k", "0"]) == 2
    assert "`k` must be in [1, 199]; got 0" in capsys.readouterr().err


def test_sample_analyze_plot_verify(tmp_path, capsys):
    dump = tmp_path / "dump"
    args = ["sample", "--task", "signal-rnn", "--runs", "6", "--out", str(dump), "--seed", "1", "--no-progress",
            "--set", "n_layers=2", "--set", "seq_len=8", "--set", "n_examples=16", "--set", "batch_size=8"]
    assert main(args) == 0
    assert main(["verify", str(dump)]) == 0
    assert "OK, 6 runs verified, complete" in capsys.readouterr().out
    assert main(["analyze", str(dump), "--out", str(tmp_path / "r.csv"), "--permutations", "2", "--no-progress",
                 "--estimators", "gaussian", "ksg"]) == 0
    assert main(["plot", str(tmp_path / "r.csv"), "--out", str(tmp_path / "f.png"), "--kind", "distances"]) == 0
    assert (tmp_path / "f.png").stat().st_size > 1000
    from mianalysis.analysis import AnalysisTable
    from mianalysis.report.plots import figure_title

    table = AnalysisTable.read(tmp_path / "r.csv")
    title = figure_title(table, table.record_with_dump())
    assert title.startswith("signal-rnn; init per-run; shared streams: none; 6 runs; Gaussian MI")


@pytest.mark.parametrize(
    "args, message",
    [
        (["verify", "/nonexistent/dump"], "mianalysis verify: error: dump /nonexistent/dump does not exist"),
        (["analyze", "/nonexistent/dump", "--out", "x.csv"], "mianalysis analyze: error: dump /nonexistent/dump does not exist"),
        (["plot", "/nonexistent.csv", "--out", "x.png"], "mianalysis plot: error: results table /nonexistent.csv does not exist"),
        (["sample", "--task", "signal-rnn", "--runs", "0", "--out", "d"], "mianalysis sample: error: `runs` must be >= 1; got 0"),
        (["sample", "--task", "signal-rnn", "--runs", "2", "--out", "d", "--set", "layers=3"], "unknown setting(s) ['layers']"),
        (["sample", "--task", "signal-rnn", "--runs", "2", "--out", "d", "--set", "nolayers"], "--set expects KEY=VALUE"),
    ],
)
def test_command_errors_are_one_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "d").exists()


def test_federate_records_and_reports(tmp_path, capsys, single_threaded_torch):
    out = tmp_path / "fl"
    args = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "2", "--replicates", "2", "--record",
            "--layer", "5", "--aggregator", "and_mask", "--param", "threshold=0.5", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    assert "round 2: test accuracy" in capsys.readouterr().out
    assert main(["verify", str(out / "dump")]) == 0
    lines = (out / "history.csv").read_text().splitlines()
    assert lines[0].startswith("round,replicates,train_loss") and len(lines) == 4


def test_federate_bad_aggregator_is_one_line(tmp_path, capsys):
    assert main(["federate", "--aggregator", "krum", "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "argument --aggregator: invalid choice: 'krum' (choose from 'fedavg'" in err and err.count("\n") == 1


def test_federate_environments_step_placement_with_client_eb(tmp_path, capsys):
    out = tmp_path / "env"
    args = ["federate", "--task", "environments", "--clients", "4", "--fraction", "0.5", "--rounds", "2",
            "--algorithm", "fedsgd", "--placement", "step", "--aggregator", "and_mask", "--batch", "16",
            "--client-eb", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    header = (out / "history.csv").read_text().splitlines()[0]
    assert "val_accuracy" in header and "test_accuracy" in header
    eb = (out / "client_eb.csv").read_text().splitlines()
    assert eb[0] == "round,replicate,client,eb" and len(eb) == 1 + 2 * 2  # 2 rounds x 2 clients


def test_analyze_familywise_options_reach_the_table(tmp_path):
    from mianalysis.analysis import analyze

    rng = np.random.default_rng(0)
    base = rng.standard_normal((3, 60, 3))
    ParameterDump.from_arrays(tmp_path / "d", {c: base + rng.standard_normal(base.shape) for c in "abc"})
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "t.csv"), "--no-progress",
                 "--familywise", "bh", "--family", "cell"]) == 0
    table = AnalysisTable.read(tmp_path / "t.csv")
    assert table.settings["familywise"]["method"] == "bh" and table.settings["familywise"]["family"] == "cell"
    direct = analyze(tmp_path / "d", familywise="bh", family="cell")
    assert [r["p_adjusted"] for r in table] == pytest.approx([r["p_adjusted"] for r in direct], nan_ok=True)
    assert [r["family_verdict"] for r in table] == [r["family_verdict"] for r in direct]


def test_analyze_gaussianity_option_adds_the_diagnostic_rows(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2, 60, 3))
    ParameterDump.from_arrays(tmp_path / "d", {c: base + rng.standard_normal(base.shape) for c in "ab"})
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "t.csv"), "--no-progress"]) == 0
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "g.csv"), "--no-progress",
                 "--gaussianity"]) == 0
    plain, diagnosed = AnalysisTable.read(tmp_path / "t.csv"), AnalysisTable.read(tmp_path / "g.csv")
    assert not plain.select("nongaussian_share")
    assert {r["client_a"] for r in diagnosed.select("nongaussian_share")} == {"a", "b"}


def test_analyze_without_distance_cache_gives_the_same_table(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2, 60, 3))
    ParameterDump.from_arrays(tmp_path / "d", {c: base + rng.standard_normal(base.shape) for c in "ab"})
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "a.csv"), "--no-progress"]) == 0
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "b.csv"), "--no-progress",
                 "--no-distance-cache"]) == 0
    a, b = AnalysisTable.read(tmp_path / "a.csv"), AnalysisTable.read(tmp_path / "b.csv")
    assert [r["quantity"] for r in a] == [r["quantity"] for r in b]
    np.testing.assert_allclose([r["value"] for r in a], [r["value"] for r in b], atol=1e-9)


def test_plot_draws_a_chosen_metric_of_a_federated_dump_against_rounds(tmp_path, capsys, monkeypatch):
    from mianalysis import DumpWriter
    from mianalysis.report import plots

    rng = np.random.default_rng(0)
    with DumpWriter(tmp_path / "d", clients=["0", "1"], checkpoints=[0, 1, 2], runs=12, chunk_size=12,
                    meta={"flower": {"rounds": 2}}) as w:
        for run in w.missing_runs():
            for c in "01":
                for t in (0, 1, 2):  # no metrics at round 0, as a Flower app records them
                    w.record(run=run, client=c, checkpoint=t, params=rng.standard_normal(2),
                             metrics=None if t == 0 else {"train_loss": 1.0 / t, "accuracy": 0.5})
    table = str(tmp_path / "t.csv")
    assert main(["analyze", str(tmp_path / "d"), "--out", table, "--no-progress"]) == 0
    drawn = []
    real = plots.figure_mi

    def spy(*args, **kwargs):
        fig = real(*args, **kwargs)
        drawn.append((fig.axes[-1].get_title(), fig.axes[-1].get_xlabel()))
        return fig

    monkeypatch.setattr(plots, "figure_mi", spy)
    assert main(["plot", table, "--out", str(tmp_path / "l.png")]) == 0
    assert main(["plot", table, "--out", str(tmp_path / "a.png"), "--metric", "accuracy"]) == 0
    assert drawn == [("client train_loss", "round"), ("client accuracy", "round")]
    capsys.readouterr()
    assert main(["plot", table, "--out", str(tmp_path / "x.png"), "--metric", "loss"]) != 0
    assert "`metric` must be one of the table's recorded metrics ['accuracy', 'train_loss']; got 'loss'" in \
        capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
