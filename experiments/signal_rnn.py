"""Figures 1 and 3 of the core paper: MI and distances between clients, signal-rnn task.

    python experiments/signal_rnn.py --quick   # ~1.5 minutes: 400 runs, 512 examples per client
    python experiments/signal_rnn.py           # the paper's scale (22,000 runs), a
                                               # 16-iteration epoch (2,000 runs) and one
                                               # fixed initial point for all runs

Writes figures/signal_rnn/signal_rnn_<config>{_mi,_distances}.png, .csv and its sidecar .csv.json
(settings, timings).
"""

from _runner import main

CONFIGS = {
    # The paper's settings: 100 examples, batch 64 -> 2 iterations per epoch, 22,000 runs.
    "paper": {"preset": "paper", "runs": 22000, "every": 1, "permutations": {"gaussian": 100, "ksg": 100}},
    # 1024 examples -> 16 iterations per epoch: enough training phases for curves.
    "long": {"preset": "long", "runs": 2000, "every": 2, "permutations": {"gaussian": 20, "ksg": 20}},
    # One fixed initial point for all runs: client randomness (data order, dropout) is then
    # independent between clients, so any MI left comes from training itself.
    "fixed_init": {"preset": "long", "settings": {"n_examples": 512}, "runs": 1000, "every": 2, "init": "fixed",
                   "permutations": {"gaussian": 20, "ksg": 20}},
    "quick": {"preset": "long", "settings": {"n_examples": 512}, "runs": 400, "every": 2,
              "permutations": {"gaussian": 10, "ksg": 10}},
}

if __name__ == "__main__":
    main("signal-rnn", CONFIGS, __doc__)
