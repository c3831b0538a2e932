"""experiments/fedavg_vs_fedsgd.py: the learning-rate search steps outwards until the best rate
is interior, treats a diverged rate as a closed side, and never runs a rate for more rounds
than the best so far needed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def search():
    spec = importlib.util.spec_from_file_location("experiment_fedavg_vs_fedsgd",
                                                  ROOT / "experiments" / "fedavg_vs_fedsgd.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.search_learning_rate


LADDER = [0.01, 0.1, 1.0, 10.0, 100.0]


def synthetic(rounds_needed, diverge_above=None):
    """A run that reaches the target after rounds_needed[lr] rounds (None: never)."""
    calls = []

    def run(lr, rounds):
        calls.append((lr, rounds))
        if diverge_above is not None and lr > diverge_above:
            raise ValueError("diverged")
        need = rounds_needed[lr]
        if need is not None and need <= rounds:
            return need, [0.5] * need + [0.99], None
        return None, [0.5] * rounds + [0.5 + lr / 1000], None

    return run, calls


def test_steps_outwards_until_the_best_is_interior(search):
    run, calls = synthetic({0.01: None, 0.1: 40, 1.0: 30, 10.0: 20, 100.0: 25})
    best, tried = search(run, [0.1, 1.0], 300, ladder=LADDER)
    assert best["lr"] == 10.0 and best["reached"] == 20
    assert [lr for lr, _ in calls] == [0.1, 1.0, 10.0, 100.0]  # 0.01 is never needed
    # each later rate runs at most as many rounds as the best so far needed
    assert calls == [(0.1, 300), (1.0, 40), (10.0, 30), (100.0, 20)]
    assert {t["lr"] for t in tried} == {0.1, 1.0, 10.0, 100.0}


def test_a_diverged_neighbour_closes_that_side(search):
    run, calls = synthetic({0.01: 90, 0.1: 50, 1.0: 30, 10.0: 20, 100.0: 10}, diverge_above=1.0)
    best, tried = search(run, [0.1, 1.0], 300, ladder=LADDER)
    assert best["lr"] == 1.0
    assert [lr for lr, _ in calls] == [0.1, 1.0, 10.0]
    assert tried[-1]["diverged"] == "diverged"


def test_all_starts_diverged_steps_down(search):
    run, _ = synthetic({0.01: 80, 0.1: 60, 1.0: 30, 10.0: 20, 100.0: 10}, diverge_above=0.1)
    best, _ = search(run, [1.0, 10.0], 300, ladder=LADDER)
    assert best["lr"] == 0.1 and best["reached"] == 60


def test_nothing_reached_picks_the_best_final_accuracy_at_the_edge(search):
    run, _ = synthetic(dict.fromkeys(LADDER, None))
    best, tried = search(run, [0.1, 1.0], 50, ladder=LADDER)
    assert best["lr"] == 100.0 and best["reached"] is None
    assert len(tried) == len(LADDER) - 1  # walked to the top edge; 0.01 below the worse start untried


def test_everything_diverged(search):
    run, _ = synthetic(dict.fromkeys(LADDER, 10), diverge_above=0.0)
    best, tried = search(run, [0.1, 1.0], 50, ladder=LADDER)
    assert best is None and all(t["diverged"] for t in tried)
