"""Your own ``torch.nn.Module`` as a sampling task: a small CNN on scikit-learn's 8x8 digits.

Three clients each hold 150 digits (disjoint, drawn at random); every run starts the CNN
from a fresh initialisation and trains each client for two epochs with its own minibatch
order. The sampler records every client's parameters at every second iteration and the
analysis estimates the mutual information and the distances between the clients' parameter
vectors at each checkpoint.

Run it with a folder for the dump and the table (default: a new temporary folder)::

    python examples/digits_cnn.py runs/digits_cnn

The same task from the command line (``spec`` below is the factory)::

    mianalysis sample --task module --set factory=digits_cnn:spec --set lr=0.01 \\
        --set batch_size=50 --set epochs=2 --runs 40 --every 2 --out runs/digits_cnn/dump

(run from ``examples/``, or with ``examples`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

N_CLIENTS = 3
PER_CLIENT = 150


def small_cnn():
    """The model factory: conv 3x3 (1 -> 4 channels), ReLU, 2x2 max pooling, linear 64 -> 10
    (690 parameters), default-initialised (a fresh network each call)."""
    from collections import OrderedDict

    from torch import nn

    return nn.Sequential(OrderedDict(
        image=nn.Unflatten(1, (1, 8)), conv=nn.Conv2d(1, 4, 3, padding=1), relu=nn.ReLU(), pool=nn.MaxPool2d(2),
        flat=nn.Flatten(), head=nn.Linear(4 * 4 * 4, 10)))


def client_data(seed=0):
    """Three disjoint sets of `PER_CLIENT` digits: a list of (images (n, 8, 8), labels (n,))."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy((digits.images / 16.0).astype(np.float32))
    labels = torch.from_numpy(digits.target.astype(np.int64))
    order = np.random.default_rng(seed).permutation(len(labels))
    return [(images[order[c::N_CLIENTS][:PER_CLIENT]], labels[order[c::N_CLIENTS][:PER_CLIENT]])
            for c in range(N_CLIENTS)]


def spec():
    """The factory named on the command line: model, data and loss as a ModuleSpec."""
    import torch.nn.functional as F

    from mianalysis.tasks import ModuleSpec

    return ModuleSpec(model=small_cnn, data=client_data(), loss=F.cross_entropy)


def main(out=None, runs=40):
    """Sample `runs` runs into OUT/dump and analyse the convolution layer into OUT/table.csv;
    print a summary and return the table's rows."""
    from mianalysis import ParameterSampler, analyze
    from mianalysis.tasks import ModuleTask

    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="digits_cnn-"))
    task = ModuleTask.from_factory("digits_cnn:spec", lr=0.01, batch_size=50, epochs=2)
    dump = ParameterSampler(task, every=2, chunk_size=20, progress=False).sample(runs, out / "dump")
    # The convolution's 40 parameters: every client starts a run from the same point, so the
    # clients' parameters share information that training can only lose (see docs/concepts).
    rows = analyze(dump, estimators=["gaussian", "ksg"], layer="conv", n_permutations=20, ci_resamples=0,
                   out=out / "table.csv")

    def value(checkpoint, quantity, a="0", b="1"):
        return next(r for r in rows if r["checkpoint"] == checkpoint and r["client_a"] == a
                    and r["client_b"] == b and r["quantity"] == quantity)

    print(f"{task.n_clients} clients x {task.n_examples} digits, {dump.n_params} parameters, {runs} runs; "
          "conv layer, clients 0 and 1:")
    print("iteration  loss(client 0)  MI ksg (bits)  p      euclidean")
    for checkpoint, iteration in enumerate(dump.checkpoints):
        mi = value(checkpoint, "mi_ksg")
        loss = value(checkpoint, "loss", b="")["value"]
        print(f"{iteration:9d}  {loss:14.3f}  {mi['value']:13.3f}  {mi['p_value']:5.3f}  "
              f"{value(checkpoint, 'euclidean')['value']:9.3f}")
    print(f"wrote {out / 'dump'} and {out / 'table.csv'}")
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # `digits_cnn:spec` imports this file
    main(sys.argv[1] if len(sys.argv) > 1 else None)
