"""`mianalysis report DUMP --out DIR` and mianalysis.report: table, figures and report.md
from a dump, with what each row means and which to read (mianalysis.analysis.reading)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mianalysis import AnalysisTable, DumpError, ParameterDump, report
from mianalysis.analysis.reading import mi_rows_by_trust, p_value_floor, reading_guide, row_kinds, start_notes
from mianalysis.report import HEADING, check_report_folder

N_PERMUTATIONS = 19  # p-values down to 1/20: enough for a test, few shuffles


def small_dump(path, n_runs=120, seed=0):
    """Three clients from one start per run (identical at iteration 0: infinite MI), then
    drifting apart with independent noise; a loss recorded from iteration 1 on."""
    rng = np.random.default_rng(seed)
    start = rng.standard_normal((1, n_runs, 2)).repeat(3, axis=0)
    scale = np.array([0.0, 1.0, 2.0])[:, None, None]
    samples = {c: start + scale * rng.standard_normal((3, n_runs, 2)) for c in ("a", "b", "c")}
    loss = np.vstack([np.full((1, n_runs), np.nan), 1.0 + rng.random((2, n_runs))])
    return ParameterDump.from_arrays(path, samples, checkpoints=[0, 1, 2],
                                     metrics={c: {"loss": loss} for c in samples}, meta={"init": "per-run"})


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    dump = small_dump(root / "dump")
    return dump, report(dump, root / "out", n_permutations=N_PERMUTATIONS)


def test_report_writes_the_table_figures_and_summary(made):
    dump, done = made
    names = [f.name for f in done.files]
    assert names == ["table.csv", "table.csv.json", "mi.png", "distances.png", "metrics.png", "report.md"]
    assert all(f.is_file() and f.stat().st_size > 0 for f in done.files)
    assert sorted(p.name for p in done.out_dir.iterdir()) == sorted(names)  # nothing else left behind
    table = AnalysisTable.read(done.out_dir / "table.csv")
    assert len(table) == len(done.table) and set(table.settings["permutations"].values()) == {N_PERMUTATIONS}
    assert (done.out_dir / "report.md").read_text() == done.summary
    # a permutation null for every MI row that has an estimate
    mi = [r for r in table if r["quantity"].startswith("mi_") and np.isfinite(r["value"])]
    assert mi and all(r["null_method"] == "permutation" and np.isfinite(r["p_value"]) for r in mi)
    assert min(r["p_value"] for r in mi) >= 1 / (N_PERMUTATIONS + 1) - 1e-12


def test_summary_names_every_row_kind_and_says_which_to_read(made):
    _, done = made
    text, table = done.summary, done.table
    assert text.startswith(HEADING + "\n")
    for quantity in {r["quantity"] for r in table}:
        assert f"`{quantity}`" in text, quantity
    # the design's consequence, the p floor, the start, the trends with their correction
    assert "per-run start, no stream shared" in text and "can only be lost" in text
    assert "1/(shuffles + 1) = 1/20 = 0.050" in text
    assert "At iteration 0 (the start, shared by the clients of a run)" in text and "infinite" in text
    groups = mi_rows_by_trust(table)
    assert ("Read first" in text) == bool(groups["calibrated"])
    assert ("Outside calibration" in text) == bool(groups["outside"])
    trends = text.split("## Trends", 1)[1]
    assert "Holm over each client pair's steps" in trends
    for pair in ("a-b", "a-c", "b-c"):
        assert re.search(rf"^mi_\w+ {pair}: (rising|falling|mixed|no detectable change)", trends, flags=re.M)
    assert "`loss`" in text and "metrics.png" in text


def test_a_second_report_replaces_the_first_and_keeps_the_folder_clean(made, tmp_path):
    dump, _ = made
    out = tmp_path / "again"
    first = report(dump, out, n_permutations=9, estimators=["gaussian"])
    assert "1/10 = 0.100" in first.summary and "`mi_ksg`" not in first.summary
    second = report(dump, out, n_permutations=N_PERMUTATIONS, estimators=["gaussian"])
    assert AnalysisTable.read(out / "table.csv").settings["permutations"] == {"gaussian": N_PERMUTATIONS}
    assert (out / "report.md").read_text() == second.summary


def test_bad_folders_and_dumps_are_refused_before_anything_is_written(made, tmp_path):
    dump, _ = made
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"holds files that are not a report's \(mine.txt\)"):
        report(dump, other)
    assert sorted(p.name for p in other.iterdir()) == ["mine.txt"] and (other / "mine.txt").read_text() == "keep me"
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "report.md").write_text("my own notes\n")
    with pytest.raises(ValueError, match="not a mianalysis report's"):
        report(dump, tmp_path / "fake")
    assert (tmp_path / "fake" / "report.md").read_text() == "my own notes\n"
    with pytest.raises(ValueError, match="inside the dump"):
        report(dump, dump.path / "report")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        check_report_folder(tmp_path / "file")
    with pytest.raises(DumpError, match="is not a dump"):
        report(other, tmp_path / "new")
    with pytest.raises(ValueError, match="`n_permutations` must be"):
        report(dump, tmp_path / "new", n_permutations=0)
    assert not (tmp_path / "new").exists()


def test_report_names_without_our_report_md_are_refused_and_a_journal_is_resumed(made, tmp_path):
    dump, _ = made
    mine = tmp_path / "r2"
    mine.mkdir()
    (mine / "mi.png").write_bytes(b"my own figure")
    with pytest.raises(ValueError, match=r"holds mi.png but no report.md of a mianalysis report"):
        report(dump, mine, n_permutations=9, estimators=["gaussian"])
    assert sorted(p.name for p in mine.iterdir()) == ["mi.png"] and (mine / "mi.png").read_bytes() == b"my own figure"
    # an analysis interrupted before any report file: only its journal and lock are there
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    (interrupted / "table.csv.partial").write_text("")
    (interrupted / ".table.csv.lock").write_text("")
    assert check_report_folder(interrupted) is False
    # a report interrupted later is known by its report.md (written first) and is finished by a rerun
    later = tmp_path / "later"
    later.mkdir()
    (later / "report.md").write_text(HEADING + "\n\nBeing written\n")
    (later / "mi.png").write_bytes(b"half drawn")
    assert check_report_folder(later) is True
    done = report(dump, later, n_permutations=9, estimators=["gaussian"])
    assert (later / "report.md").read_text() == done.summary and (later / "mi.png").read_bytes() != b"half drawn"


def test_cli_report_exits_0_and_bad_input_is_one_line(made, tmp_path, cli):
    dump, _ = made
    result = cli(["report", dump.path, "--out", tmp_path / "r", "--permutations", 9, "--estimators", "gaussian",
                  "--no-progress"])
    assert result.returncode == 0, result.stderr
    assert re.search(r"wrote .*report\.md \(what each row means.*table\.csv.*mi\.png", result.stdout)
    assert (tmp_path / "r" / "report.md").read_text().startswith(HEADING)
    (tmp_path / "x.txt").write_text("x")
    for args, message in ((["report", tmp_path, "--out", tmp_path / "s"], "is not a dump"),
                          (["report", dump.path, "--out", tmp_path], "holds files that are not a report's")):
        bad = cli(args)
        assert bad.returncode == 2 and bad.stdout == ""
        assert len(bad.stderr.strip().splitlines()) == 1 and message in bad.stderr, bad.stderr
        assert bad.stderr.startswith("mianalysis report: error: ")
    assert not (tmp_path / "s").exists() and (tmp_path / "x.txt").read_text() == "x"


# ------------------------------------------------------------- reading (no analysis)


def mi_row(quantity, iteration, value, *, kind="plain", outside=False, note=""):
    return {"quantity": quantity, "iteration": iteration, "client_a": "a", "client_b": "b", "value": value,
            "estimate_kind": kind, "outside_calibration": outside, "note": note, "null_method": "permutation"}


ROWS = [mi_row("mi_gaussian", 0, float("inf"), note="identical samples (same initial point): MI is infinite"),
        mi_row("mi_gaussian", 1, 2.0),
        mi_row("mi_ksg", 1, 0.5, outside=True, note="outside calibration: 8 joint dims > 4"),
        mi_row("mi_gaussian", 2, 0.1, kind="shrinkage", outside=True),
        mi_row("mi_bound", 2, 0.3, kind="bound"),
        mi_row("mi_ksg", 5, 0.0, note="client_a's parameters are constant across runs: MI is 0"),
        {"quantity": "loss", "iteration": 1, "client_a": "a", "client_b": "", "value": 1.0}]


def test_mi_rows_are_grouped_by_what_they_can_be_read_as():
    groups = mi_rows_by_trust(ROWS)
    assert {k: [(r["quantity"], r["iteration"]) for r in v] for k, v in groups.items()} == {
        "calibrated": [("mi_gaussian", 1)], "outside": [("mi_ksg", 1)], "bound": [("mi_bound", 2)],
        "shrinkage": [("mi_gaussian", 2)], "infinite": [("mi_gaussian", 0)], "constant": [("mi_ksg", 5)],
        "held": [], "none": []}
    guide = "\n".join(reading_guide(ROWS, "round"))
    assert "Read first: the 1 MI rows" in guide and "`mi_gaussian` at round 1" in guide
    assert "Outside calibration (1 rows: `mi_ksg` at round 1)" in guide
    assert "Lower bounds (1 rows: `mi_bound` at round 2)" in guide and "not an MI that rises" in guide
    assert "Shrinkage numbers (1 rows: `mi_gaussian` at round 2)" in guide and "not made: shrinkage" in guide
    assert "At round 0 (the start, shared" in guide
    assert "At round 5 a client's parameters are constant across runs: the MI is 0 by definition" in guide
    assert "round 5 (the start" not in guide  # only iteration 0 is the start
    assert reading_guide(ROWS[-1:]) == ["The table has no MI rows."]
    assert start_notes(ROWS[1:3]) == []


def test_start_notes_call_only_iteration_0_the_start():
    rows = [mi_row("mi_gaussian", 0, float("inf")), mi_row("mi_gaussian", 3, float("inf")),
            mi_row("mi_ksg", 4, 0.0, note="client_a's parameters are constant across runs: MI is 0"),
            mi_row("mi_ksg", 7, 0.0, note="client_a's parameters are constant across runs: MI is 0")]
    assert start_notes(rows, "round") == [
        "At round 0 (the start, shared by the clients of a run) their samples are identical: the MI is infinite "
        "(inf, no null or p-value) and the distances 0.",
        "At round 3 the clients' samples are identical: the MI is infinite (inf, no null or p-value) and the "
        "distances 0.",
        "At rounds 4, 7 a client's parameters are constant across runs: the MI is 0 by definition (no estimate)."]


def test_recorded_metrics_are_the_figures_metrics():
    """row_kinds calls a quantity a recorded metric exactly when the figures draw it as one
    (metric_names): a quantity with some per-client rows is one for both."""
    from mianalysis.report.plots import metric_names

    rows = ROWS + [{"quantity": "score", "iteration": 1, "client_a": "a", "client_b": "", "value": 1.0},
                   {"quantity": "score", "iteration": 1, "client_a": "a", "client_b": "b", "value": 1.0},
                   {"quantity": "nongaussian_share", "iteration": 1, "client_a": "a", "client_b": "", "value": 0.1}]
    recorded = [q for q, _, text in row_kinds(rows) if text.startswith("a metric the dump recorded")]
    assert recorded == metric_names(rows) == ["loss", "score"]


def test_row_kinds_describe_every_quantity_once():
    kinds = row_kinds(ROWS)
    assert [(q, n) for q, n, _ in kinds] == [("mi_gaussian", 3), ("mi_ksg", 2), ("mi_bound", 1), ("loss", 1)]
    text = dict((q, t) for q, _, t in kinds)
    assert "a lower bound on the MI, not an estimate" in text["mi_bound"]
    assert "KSG (k-NN)" in text["mi_ksg"] and "half-subsampling" in text["mi_ksg"]
    assert text["loss"].startswith("a metric the dump recorded")


def test_metrics_figure_needs_a_metric():
    from mianalysis.report.plots import figure_metrics

    with pytest.raises(ValueError, match="no recorded metric"):
        figure_metrics(ROWS[:1])


def test_p_value_floor():
    assert p_value_floor(20) == "1/21 = 0.048"
    assert p_value_floor({"gaussian": 0, "ksg": 100}) == "no p-value (no permutations) for gaussian, 1/101 = 0.010 for ksg"


# ------------------------------------------------------------- issue 50: links, refusals, empty rows


def test_a_rerun_replaces_links_in_place_of_its_figures_never_their_targets(made, tmp_path):
    # A report never writes through a link: mi.png, distances.png and metrics.png planted as
    # links to files outside the folder are replaced by the figures, the targets left as they were.
    dump, _ = made
    out = tmp_path / "linked"
    report(dump, out, n_permutations=9, estimators=["gaussian"])
    targets = {}
    for name in ("mi.png", "distances.png", "metrics.png"):
        target = tmp_path / f"precious-{name}"
        target.write_bytes(b"not yours: " + name.encode())
        (out / name).unlink()
        (out / name).symlink_to(target)
        targets[name] = target
    done = report(dump, out, n_permutations=9, estimators=["gaussian"])
    for name, target in targets.items():
        assert target.read_bytes() == b"not yours: " + name.encode(), name
        assert not (out / name).is_symlink() and (out / name).read_bytes().startswith(b"\x89PNG"), name
    assert sorted(p.name for p in out.iterdir()) == sorted(f.name for f in done.files)


def test_a_refused_report_leaves_nothing_behind(made, tmp_path):
    from mianalysis.dumps import layout_from_shapes

    empty = ParameterDump.create(tmp_path / "empty", clients=["a", "b"], checkpoints=[0, 1, 2], n_runs=10,
                                 layout=layout_from_shapes([("w", (2,))]))
    assert empty.completed_runs == 0
    with pytest.raises(ValueError, match="0 completed runs"):
        report(empty, tmp_path / "new" / "deeper", n_permutations=9)
    assert not (tmp_path / "new").exists()  # no placeholder report.md, no folder made
    (tmp_path / "bare").mkdir()
    with pytest.raises(ValueError, match="0 completed runs"):
        report(empty, tmp_path / "bare", n_permutations=9)
    assert list((tmp_path / "bare").iterdir()) == []
    # an earlier report's files stay as they were
    dump, _ = made
    earlier = tmp_path / "earlier"
    report(dump, earlier, n_permutations=9, estimators=["gaussian"])
    before = {p.name: p.read_bytes() for p in earlier.iterdir()}
    with pytest.raises(ValueError, match="0 completed runs"):
        report(empty, earlier, n_permutations=9)
    assert {p.name: p.read_bytes() for p in earlier.iterdir()} == before


def test_a_one_client_dump_is_refused_by_analyze_and_report(tmp_path, cli):
    from mianalysis import analyze

    rng = np.random.default_rng(0)
    one = ParameterDump.from_arrays(tmp_path / "one", {"a": rng.standard_normal((3, 20, 2))})
    message = "the analysis needs at least two clients; the dump has one: a"
    with pytest.raises(ValueError, match=message):
        analyze(one)
    with pytest.raises(ValueError, match=message):
        report(one, tmp_path / "r", n_permutations=9)
    assert not (tmp_path / "r").exists()
    central = ParameterDump.from_arrays(tmp_path / "central", {"a": rng.standard_normal((3, 20, 2)),
                                                               "central": rng.standard_normal((3, 20, 2))})
    with pytest.raises(ValueError, match=r"has one: a \(besides the reference 'central', which is in no pair\)"):
        analyze(central, estimators=["gaussian"])
    bad = cli(["report", one.path, "--out", tmp_path / "s", "--no-progress"])
    assert bad.returncode == 2 and bad.stdout == "" and not (tmp_path / "s").exists()
    assert len(bad.stderr.strip().splitlines()) == 1 and message in bad.stderr, bad.stderr


def test_a_report_of_five_runs_calls_its_empty_bound_rows_no_estimate(tmp_path):
    # 5 runs are too few for the bound (two folds of 4 runs): its rows are empty (NaN), and
    # the report says so, not that they are lower bounds, nor that their steps are a bound's.
    rng = np.random.default_rng(1)
    dump = ParameterDump.from_arrays(tmp_path / "d5", {c: rng.standard_normal((3, 5, 2)) for c in "ab"})
    done = report(dump, tmp_path / "r5", n_permutations=9)
    bound = [r for r in done.table if r["quantity"] == "mi_bound"]
    assert len(bound) == 3 and all(np.isnan(r["value"]) for r in bound)
    text = done.summary
    assert "Lower bounds" not in text and "`value` is a lower bound" not in text
    assert "No estimate (3 rows: `mi_bound` at iterations 0, 1, 2)" in text
    assert "no bound: 5 runs < 8 (two folds of 4 runs)" in text
    assert "empty (NaN) in every row: no estimate was made" in text
    assert "mi_bound a-b: not made: no estimate (no bound: 5 runs < 8 (two folds of 4 runs)) (every step)" in text
    groups = mi_rows_by_trust(done.table)
    assert [r["iteration"] for r in groups["none"]] == [0, 1, 2] and not groups["bound"]
