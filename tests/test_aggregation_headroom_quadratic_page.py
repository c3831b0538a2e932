"""docs/results/federated.md's section on experiments/aggregation_headroom_quadratic.py quotes
figures/aggregation_headroom_quadratic/aggregation_headroom_quadratic.csv (and its sidecar): its two tables are rebuilt here
from the CSV, and the numbers and ranges of its bullets recomputed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = {"diagonal": "diagonal, 5 rounds of E = 50", "diagonal-low-noise": "as diagonal, sigma 0.1",
         "diagonal-fixed-start": "as diagonal, fixed start", "diagonal-shared-noise": "as diagonal, noise shared",
         "diagonal-many-rounds": "diagonal, 30 rounds of E = 10", "rotated": "rotated, 5 rounds of E = 50",
         "diagonal-h0": "diagonal, heterogeneity 0", "rotated-h0": "rotated, heterogeneity 0"}
FISHER = ["Fisher (Hutchinson curvature)", "Fisher (Hutchinson, 10 probes)", "Fisher (Hutchinson, 100 probes)",
          "Fisher (exact diagonal curvature)"]
BASELINES = ["FedProx", "FedAvgM", "FedAdam", "FedYogi"]


def _rows():
    with open(ROOT / "figures" / "aggregation_headroom_quadratic" / "aggregation_headroom_quadratic.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _section():
    page = (ROOT / "docs" / "results" / "federated.md").read_text()
    start = page.index("### Where the optimum is known")
    return page[start:page.index("??? note", start)]


def _cell(r, digits=3):
    """A table cell: difference [95 %] ([Bonferroni]), bold where the latter is below 0, ratio."""
    if float(r["d_error"]) == float(r["d_error_low"]) == float(r["d_error_high"]) == 0:
        return "0 exactly"
    values = [f"{float(r[k]):+.{digits}f}" for k in ("d_error", "d_error_low", "d_error_high", "d_error_bonf_low",
                                                    "d_error_bonf_high")]
    text = f"{values[0]} [{values[1]}, {values[2]}] ([{values[3]}, {values[4]}])"
    return (f"**{text}**" if float(r["d_error_bonf_high"]) < 0 else text) + f" {float(r['error_ratio']):.3g}x"


def _ratios(rows, rule, designs=None):
    return [float(r["error_ratio"]) for r in rows if r["rule"] == rule and (designs is None or r["design"] in designs)]


def test_the_tables_are_the_csvs():
    rows = {(r["design"], r["rule"]): r for r in _rows()}
    section = _section()
    for design, name in NAMES.items():
        fedavg = rows[(design, "FedAvg")]
        line = (f"| {name} | {float(fedavg['final_error']):.3f} ({fedavg['gradients_per_round']}) | "
                + " | ".join(_cell(rows[(design, rule)]) for rule in FISHER) + " |")
        assert line in section, line
        cells = []
        for rule in BASELINES:
            r = rows[(design, rule)]
            foot = "" if r["setting_choice"] == "interior" else " (grid foot)"
            flag = "" if r["lr_choice"] == "interior" else " (lr at the ladder's foot)"
            cells.append(f"{r['setting'].replace('server ', '')}{foot}, lr {r['lr']}{flag}: "
                         + _cell(r, 5 if rule == "FedProx" else 3))
        line = f"| {name} | " + " | ".join(cells) + " |"
        assert line in section, line
    # the cost the header names: E + 2P gradients for P probes
    for (design, rule), r in rows.items():
        probes = {"Fisher (Hutchinson curvature)": 1, "Fisher (Hutchinson, 10 probes)": 10,
                  "Fisher (Hutchinson, 100 probes)": 100}.get(rule, 0)
        extra = 1 if rule == "Fisher (empirical Fisher)" else 2 * probes
        assert int(r["gradients_per_round"]) == int(r["local_steps"]) + extra


def test_the_bullets_quote_the_csv():
    rows = _rows()
    by = {(r["design"], r["rule"]): r for r in rows}
    text = " ".join(_section().split())
    sidecar = json.loads((ROOT / "figures" / "aggregation_headroom_quadratic" / "aggregation_headroom_quadratic.csv.json").read_text())
    assert f"Bonferroni over the table's {sidecar['bonferroni_family']} rule-design comparisons" in text
    assert f"{sidecar['seconds']:.0f} s on one thread" in text
    # what beats FedAvg under Bonferroni without the oracle: Hutchinson at low noise, FedProx by a few per cent
    better = sorted((r["design"], r["rule"]) for r in rows
                    if r["reference_free"] == "True" and r["d_error_bonf_high"] and float(r["d_error_bonf_high"]) < 0)
    assert better == [("diagonal-h0", "FedProx"), ("diagonal-low-noise", "Fisher (Hutchinson curvature)"),
                      ("diagonal-low-noise", "Fisher (Hutchinson, 10 probes)"),
                      ("diagonal-low-noise", "Fisher (Hutchinson, 100 probes)"),
                      ("diagonal-many-rounds", "FedProx"), ("rotated-h0", "FedProx")]
    # P probes in the diagonal design, against the oracle
    ratios = [float(by[("diagonal", rule)]["error_ratio"]) for rule in FISHER]
    assert (f"{ratios[0]:.2f}, {ratios[1]:.2f} and {ratios[2]:.3f} times FedAvg's error for P = 1, 10 and 100, "
            f"against the oracle's {ratios[3]:.3f}") in text
    hundred = by[("diagonal", "Fisher (Hutchinson, 100 probes)")]
    assert (f"{float(hundred['d_error']):.3f} [{float(hundred['d_error_low']):.3f}, {float(hundred['d_error_high']):.3f}]"
            f", but not under Bonferroni ([{float(hundred['d_error_bonf_low']):.3f}, "
            f"{float(hundred['d_error_bonf_high']):+.3f}])") in text
    assert f"at {hundred['gradients_per_round']} gradients per client and round against FedAvg's 50" in text
    one = _ratios(rows, "Fisher (Hutchinson curvature)")
    assert sorted(one)[1] > 4.65 and max(one) < 16.5 and "4.7-16 times worse" in text
    # FedProx: the grid's foot in five designs, where it is FedAvg
    prox = [r for r in rows if r["rule"] == "FedProx"]
    foot = [r for r in prox if r["setting_choice"] != "interior"]
    assert len(foot) == 5 and {r["setting"] for r in foot} == {"mu=0.001"}
    assert (f"{min(float(r['error_ratio']) for r in foot)}-{max(float(r['error_ratio']) for r in foot)} times its "
            f"error") in text
    assert (f"{min(float(r['d_error']) for r in foot):+.5f} to {max(float(r['d_error']) for r in foot):+.5f}"
            ) in text
    many, base = by[("diagonal-many-rounds", "FedProx")], by[("diagonal-many-rounds", "FedAvg")]
    assert (f"from {float(base['final_error']):.4f} to {float(many['final_error']):.4f} "
            f"({float(many['error_ratio']):.2f} times, {float(many['d_error']):.5f} [{float(many['d_error_low']):.5f}, "
            f"{float(many['d_error_high']):.5f}], Bonferroni [{float(many['d_error_bonf_low']):.5f}, "
            f"{float(many['d_error_bonf_high']):.5f}])") in text
    controls = [by[(d, "FedProx")]["error_ratio"] for d in ("diagonal-h0", "rotated-h0")]
    assert f"gives {float(controls[0]):.3f} and {float(controls[1]):.3f} times FedAvg's error" in text
    # the server optimizers' ranges (FedAvgM over the heterogeneous designs)
    heterogeneous = [d for d in NAMES if not d.endswith("h0")]
    span = {rule: (min(_ratios(rows, rule, designs)), max(_ratios(rows, rule, designs)))
            for rule, designs in [("FedAvgM", heterogeneous), ("FedAdam", None), ("FedYogi", None)]}
    assert f"FedAvgM has {span['FedAvgM'][0]:.2g}-{span['FedAvgM'][1]:.2g} times" in text
    assert f"FedAdam {span['FedAdam'][0]:.2g}-{span['FedAdam'][1]:.3g} times" in text
    assert f"FedYogi {span['FedYogi'][0]:.3g}-{span['FedYogi'][1]:.2g}" in text
    assert all(float(by[(d, r)]["d_error_bonf_low"]) > 0 for d in heterogeneous for r in ("FedAvgM", "FedAdam", "FedYogi"))
    assert all(float(by[(d, "FedAvgM")]["d_error_bonf_low"]) < 0 < float(by[(d, "FedAvgM")]["d_error_bonf_high"])
               for d in ("diagonal-h0", "rotated-h0"))
    # the design's power
    mde = [float(by[("diagonal", rule)]["d_error_mde"]) for rule in ("Fisher (exact diagonal curvature)",
                                                                      "Fisher (Hutchinson, 100 probes)")]
    fedavg = float(by[("diagonal", "FedAvg")]["final_error"])
    assert (f"from {mde[0]:.3f} (the oracle) or {mde[1]:.3f} (100 probes)" in text
            and f"{100 * mde[0] / fedavg:.0f}-{100 * mde[1] / fedavg:.0f} % of FedAvg's {fedavg:.3f}" in text)
    # the flags: which chosen rates and settings sit at an end of their ladder or grid
    ends = sorted((r["rule"], r["design"]) for r in rows if r["lr_choice"] != "interior")
    assert ends == sorted([("FedAdam", "diagonal-fixed-start"), ("Inverse variance", "diagonal-low-noise")]
                          + [("FedYogi", d) for d in ("diagonal", "diagonal-h0", "diagonal-shared-noise",
                                                       "diagonal-low-noise", "rotated")])
    assert {r["rule"] for r in rows if r["setting_choice"] not in ("", "interior")} == {"FedProx"}
